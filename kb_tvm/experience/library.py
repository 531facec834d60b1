"""The experience library (Experience): adding entries without a lock, reading them, the nearest
workloads to a new one, pruning, and sharing entries as .tar.gz archives."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import tarfile
import time
import uuid
import warnings
import zlib
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

import numpy as np

from .entries import ExperienceEntry, ExperienceWarning, _created, _read_entry, _reason, _warn_skip
from .schema import (
    _COST_KEYS,
    _DATABASE_FILES,
    _ENTRY_FILE,
    _ENTRY_FILES,
    _ID_RE,
    _SAMPLES_FILE,
    SCHEMA_VERSION,
    _check,
    _check_record,
    _check_samples,
    _check_workload,
    _is_int,
    _is_number,
    _plain,
    _round6,
    _short,
)

# A staging directory untouched this long belongs to a crashed writer, not a live one
_STALE_STAGING_S = 3600.0


def default_path() -> Path:
    """$XDG_CACHE_HOME/kb_tvm/experience, else ~/.cache/kb_tvm/experience."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    # the XDG spec says to ignore a relative value
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "kb_tvm" / "experience"


def _safe_member(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and "\\" not in name


class Experience:
    """The experience library at `path` (default: default_path()); created on first write."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_path()

    def __repr__(self) -> str:
        return f"Experience({str(self.path)!r})"

    @property
    def _entries_dir(self) -> Path:
        return self.path / "entries"

    @property
    def _staging_dir(self) -> Path:
        return self.path / "staging"

    # ---- writing

    def add(self, *, target: dict, tvm_version: str, workload: dict, best_latency_s: float, seconds: float,
            trials: int, trajectory, regions_won, costs: dict, database_files: tuple[Path, Path],
            samples: tuple[str, np.ndarray, np.ndarray] | None = None) -> ExperienceEntry:
        """Stores one tuned workload; returns its entry. Raises a one-line ValueError on bad input."""
        target = _plain("target", target)
        _check(isinstance(target, dict) and isinstance(target.get("kind"), str) and target["kind"] != "",
               f"target={_short(target)}: target must be a dict with a non-empty 'kind'")
        workload = _plain("workload", workload)
        _check_workload(workload)
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", workload["name"]).strip("._-")[:48] or "workload"
        record = {
            "schema": SCHEMA_VERSION,
            "id": f"{name}-{uuid.uuid4().hex[:12]}",
            "created": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "target_kind": target["kind"],
            "target": target,
            "tvm_version": tvm_version,
            "workload": workload,
            "best_latency_s": _plain("best_latency_s", best_latency_s),
            "seconds": _plain("seconds", seconds),
            "trials": _plain("trials", trials),
            "trajectory": _plain("trajectory", trajectory),
            "regions_won": _plain("regions_won", regions_won),
            "costs": _plain("costs", costs),
        }
        _check_record(record)
        # JSON keeps 10 and 10.0 apart; readers should always get floats where floats are meant
        workload["vector"] = [float(v) for v in workload["vector"]]
        record["best_latency_s"] = float(record["best_latency_s"])
        record["seconds"] = float(record["seconds"])
        record["trajectory"] = [[float(t), float(latency)] for t, latency in record["trajectory"]]
        record["costs"].update({key: float(record["costs"][key]) for key in _COST_KEYS})
        _check(isinstance(database_files, (tuple, list)) and len(database_files) == 2,
               f"database_files={_short(database_files)}: database_files must be (workload file, tuning-record file)")
        for index, file in enumerate(database_files):
            _check(Path(file).is_file(), f"database_files[{index}]={str(file)!r}: the file must exist")
        if samples is not None:
            samples = _check_samples(samples)

        def write(directory: Path) -> None:
            for source, file_name in zip(database_files, _DATABASE_FILES):
                shutil.copyfile(source, directory / file_name)  # byte for byte: TVM owns the format
            if samples is not None:
                version, x, y = samples
                rows = [[_round6(v), [_round6(f) for f in row]] for v, row in zip(y.tolist(), x.tolist())]
                data = {"feature_version": version, "rows": rows}
                (directory / _SAMPLES_FILE).write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
            (directory / _ENTRY_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")

        self._publish(record["id"], write)
        return _read_entry(self._entries_dir / record["id"])

    def _publish(self, entry_id: str, write) -> None:
        """Runs write(staging dir), then renames the finished directory into entries/.
        No lock: ids are unique, so two writers never share a directory, and the rename is atomic."""
        staging = self._staging_dir / entry_id
        staging.mkdir(parents=True)  # an existing one would be an id collision: fail, don't share
        try:
            write(staging)
            self._entries_dir.mkdir(parents=True, exist_ok=True)
            os.rename(staging, self._entries_dir / entry_id)  # atomic: readers see all or nothing
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _discard(self, directory: Path) -> None:
        """Removes an entry directory; renamed into staging/ first so readers never see half of it."""
        self._staging_dir.mkdir(parents=True, exist_ok=True)
        doomed = self._staging_dir / f"{directory.name}.removing-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(directory, doomed)
        except FileNotFoundError:
            return  # someone else removed it first
        shutil.rmtree(doomed, ignore_errors=True)

    # ---- reading

    def _scan(self) -> tuple[list[ExperienceEntry], list[Path]]:
        """(readable entries newest first, unreadable entry directories), warning about the latter."""
        if not self._entries_dir.is_dir():
            return [], []
        good, bad = [], []
        for directory in sorted(self._entries_dir.iterdir()):
            if not directory.is_dir():
                continue
            try:
                good.append(_read_entry(directory))
            except (ValueError, OSError) as err:
                if directory.exists():  # not merely removed by someone while we looked
                    _warn_skip(directory, err)
                    bad.append(directory)
        good.sort(key=_created, reverse=True)
        return good, bad

    def entries(self, *, target_kind: str | None = None) -> list[ExperienceEntry]:
        """The readable entries, newest first; unreadable ones are skipped with an ExperienceWarning."""
        good, _ = self._scan()
        return [e for e in good if target_kind is None or e.target_kind == target_kind]

    def _entry_dir(self, entry_id: str) -> Path:
        if not isinstance(entry_id, str) or _ID_RE.fullmatch(entry_id) is None:
            raise KeyError(f"no experience entry {entry_id!r} in {self.path}")  # also keeps '../x' out
        directory = self._entries_dir / entry_id
        if not directory.is_dir():
            raise KeyError(f"no experience entry {entry_id!r} in {self.path}")
        return directory

    def get(self, entry_id: str) -> ExperienceEntry:
        """The entry `entry_id`; KeyError if there is none or it cannot be read (with an ExperienceWarning)."""
        directory = self._entry_dir(entry_id)
        try:
            return _read_entry(directory)
        except (ValueError, OSError) as err:
            _warn_skip(directory, err)
            raise KeyError(f"experience entry {entry_id!r} cannot be read: {_reason(err)}") from None

    def nearest(self, workload: dict, *, target_kind: str, mcpu: str | None = None, k: int = 3,
                max_distance: float = 4.0) -> list[tuple[float, ExperienceEntry]]:
        """Up to k (distance, entry) for entries of the same target kind, op kind and dtypes whose
        shape vector lies within max_distance of `workload`'s, nearest first (ties: newest
        first). An equal workload hash is distance 0; of entries sharing one hash only the
        fastest is returned. `mcpu`: only entries tuned for that CPU (a schedule tuned with
        AVX-512 is no guide for a CPU without it, nor one tuned for baseline x86-64)."""
        _check(isinstance(workload, dict), f"workload={_short(workload)}: workload must be a dict")
        for key in ("op_kind", "dtypes", "vector"):
            _check(key in workload, f"workload is missing {key}: nearest needs op_kind, dtypes and vector")
        vector = np.asarray(workload["vector"], dtype=float)
        _check(vector.ndim == 1 and bool(np.isfinite(vector).all()),
               f"workload vector={_short(workload['vector'])}: vector must be a list of finite numbers")
        _check(isinstance(target_kind, str) and target_kind != "",
               f"target_kind={target_kind!r}: target_kind must be a non-empty string")
        _check(_is_int(k) and k >= 1, f"k={k!r}: k must be an int >= 1")
        _check(_is_number(max_distance) and max_distance >= 0,
               f"max_distance={max_distance!r}: max_distance must be finite and >= 0")

        best_per_hash: dict[str, tuple[float, ExperienceEntry]] = {}
        for entry in self.entries(target_kind=target_kind):  # another target kind is never a match
            if mcpu is not None and entry.target.get("mcpu") != mcpu:
                continue
            other = entry.workload
            if (other["op_kind"] != workload["op_kind"] or other["dtypes"] != list(workload["dtypes"])
                    or len(other["vector"]) != len(vector)):
                continue
            if other["hash"] == workload.get("hash"):
                distance = 0.0
            else:
                distance = float(np.linalg.norm(np.asarray(other["vector"], dtype=float) - vector))
            if distance > max_distance:
                continue
            kept = best_per_hash.get(other["hash"])
            # entries come newest first, so on equal latency the newer one stays
            if kept is None or entry.best_latency_s < kept[1].best_latency_s:
                best_per_hash[other["hash"]] = (distance, entry)
        found = sorted(best_per_hash.values(), key=lambda pair: _created(pair[1]), reverse=True)
        found.sort(key=lambda pair: pair[0])  # stable: equal distances stay newest first
        return found[:k]

    # ---- housekeeping

    def remove(self, entry_id: str) -> None:
        """Removes the entry `entry_id` (KeyError if there is none)."""
        self._discard(self._entry_dir(entry_id))

    def prune(self, *, keep: int = 1, dry_run: bool = False) -> list[str]:
        """Removes unreadable entries, stale staging directories (as 'staging/<name>') and, per
        (target kind, workload hash), all but the `keep` fastest entries. Returns what it removed,
        or with dry_run what it would remove."""
        _check(_is_int(keep) and keep >= 1, f"keep={keep!r}: keep must be >= 1")
        good, bad = self._scan()
        doomed = list(bad)
        groups: dict[tuple[str, str], list[ExperienceEntry]] = {}
        for entry in good:  # newest first, so equal latencies keep the newer entry
            groups.setdefault((entry.target_kind, entry.workload["hash"]), []).append(entry)
        for group in groups.values():
            group.sort(key=lambda e: e.best_latency_s)
            doomed.extend(e.path for e in group[keep:])
        removed = [d.name for d in doomed]
        if not dry_run:
            for directory in doomed:
                self._discard(directory)

        # a live writer touches its staging directory within seconds; an old one is a crash's leftover
        if self._staging_dir.is_dir():
            cutoff = time.time() - _STALE_STAGING_S
            for leftover in sorted(self._staging_dir.iterdir()):
                try:
                    stale = leftover.stat().st_mtime < cutoff
                except FileNotFoundError:
                    continue  # a writer just renamed it into entries/
                if stale:
                    removed.append(f"staging/{leftover.name}")
                    if not dry_run:
                        if leftover.is_dir() and not leftover.is_symlink():
                            shutil.rmtree(leftover, ignore_errors=True)
                        else:
                            leftover.unlink(missing_ok=True)
        return removed

    # ---- sharing

    def export(self, archive: str | Path, *, target_kind: str | None = None) -> int:
        """Writes the readable entries (of `target_kind`, if given) to a .tar.gz; returns how many."""
        archive = Path(archive)
        entries = self.entries(target_kind=target_kind)
        partial = archive.with_name(f".{archive.name}.{uuid.uuid4().hex[:8]}.partial")
        try:
            with tarfile.open(partial, "w:gz") as tar:
                for entry in entries:
                    for name in sorted(_ENTRY_FILES):
                        file = entry.path / name
                        if file.is_file():
                            tar.add(file, arcname=f"entries/{entry.id}/{name}", recursive=False)
            os.replace(partial, archive)  # no half-written archive under the real name
        finally:
            partial.unlink(missing_ok=True)
        return len(entries)

    def import_(self, archive: str | Path) -> int:
        """Adds the entries of an archive written by `export`; returns how many were added.
        Entries already present (by id) and unreadable ones (with an ExperienceWarning) are skipped.
        Raises a one-line ValueError if the file is not a .tar.gz or holds links or paths that
        leave the archive."""
        archive = Path(archive)
        if not archive.is_file():
            raise ValueError(f"{archive}: no such file")
        self._staging_dir.mkdir(parents=True, exist_ok=True)
        unpacked = self._staging_dir / f"import-{uuid.uuid4().hex[:12]}"
        unpacked.mkdir()
        try:
            try:
                with tarfile.open(archive, "r:gz") as tar:
                    wanted = self._check_members(archive, tar.getmembers())
                    if hasattr(tarfile, "data_filter"):
                        tar.extractall(unpacked, members=wanted, filter="data")
                    else:  # older Python: the members were checked above
                        tar.extractall(unpacked, members=wanted)
            except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
                raise ValueError(f"{archive}: not a readable .tar.gz archive ({_reason(err)})") from None
            return self._adopt(unpacked / "entries", archive)
        finally:
            shutil.rmtree(unpacked, ignore_errors=True)

    @staticmethod
    def _check_members(archive: Path, members: list[tarfile.TarInfo]) -> list[tarfile.TarInfo]:
        """The members to extract: entries/<id>/<known file>. An unsafe member rejects the whole archive."""
        wanted = []
        for member in members:
            if not _safe_member(member.name):
                raise ValueError(f"{archive}: member {member.name!r} leaves the archive: refusing to import it")
            if not (member.isreg() or member.isdir()):
                raise ValueError(f"{archive}: member {member.name!r} is a link or special file: refusing to import it")
            parts = PurePosixPath(member.name).parts
            if member.isreg():
                if (len(parts) == 3 and parts[0] == "entries" and _ID_RE.fullmatch(parts[1])
                        and parts[2] in _ENTRY_FILES):
                    wanted.append(member)
                else:
                    warnings.warn(f"ignoring {member.name} in {archive}: not part of an entry",
                                  ExperienceWarning, stacklevel=3)
        return wanted

    def _adopt(self, unpacked: Path, archive: Path) -> int:
        """Moves the readable entries of an unpacked archive into entries/; returns how many."""
        if not unpacked.is_dir():
            return 0
        added = 0
        for directory in sorted(unpacked.iterdir()):
            try:
                entry = _read_entry(directory)
            except (ValueError, OSError) as err:
                warnings.warn(f"skipping entries/{directory.name} in {archive}: {_reason(err)}",
                              ExperienceWarning, stacklevel=3)
                continue
            target = self._entries_dir / entry.id
            if target.exists():
                continue
            self._entries_dir.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(directory, target)  # same atomic step as add: unpacked/ lies under staging/
            except OSError:
                if target.exists():
                    continue  # another importer got there first
                raise
            added += 1
        return added
