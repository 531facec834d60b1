"""The experience library: what earlier tuning runs learned, kept per tuned workload so a later
run can warm-start instead of searching from nothing.

Each entry holds one workload tuned on one target: the target, the TVM version, the workload's
description (name, op kind, dtypes, shapes, a log2 shape-feature vector, a hash), the best
latency found, the time and trials spent, the best-latency trajectory, the regions that won, the
measured costs, TVM's own JSONDatabase files for the workload, and optionally the cost-model
training samples (features and log-latencies).

Layout on disk::

    <root>/entries/<id>/entry.json                   the fields of ExperienceEntry + "schema"
    <root>/entries/<id>/database_workload.json       TVM JSONDatabase files, copied byte for byte
    <root>/entries/<id>/database_tuning_record.json  (kept opaque: TVM owns their format)
    <root>/entries/<id>/samples.json                 optional: {"feature_version", "rows": [[y, [x...]]]}
    <root>/staging/<name>                            entries being written or removed; never read

Schema rule: every entry.json says which SCHEMA_VERSION wrote it; a reader skips (with an
ExperienceWarning) any entry of another version rather than guess at its meaning. Bump the
version whenever a field changes meaning or a new field becomes required.

No pickle: a library file may come from someone else (`import_`), and unpickling runs code.
Everything here is JSON, so a library is data, never code.

No lock: an entry is written completely in <root>/staging/<id> and then renamed into
<root>/entries/<id>. A rename is atomic on POSIX, and ids are unique, so concurrent writers
(threads or processes) never touch the same directory and a reader sees either a whole entry or
none; a crash leaves at most a staging directory, which readers ignore and `prune` removes once
it is an hour old (a live writer's is seconds old).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import reprlib
import shutil
import tarfile
import time
import uuid
import warnings
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

import numpy as np

SCHEMA_VERSION = 1

_ENTRY_FILE = "entry.json"
_DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")
_SAMPLES_FILE = "samples.json"
_ENTRY_FILES = frozenset((_ENTRY_FILE, *_DATABASE_FILES, _SAMPLES_FILE))
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_WORKLOAD_KEYS = ("name", "op_kind", "dtypes", "vector", "shapes", "hash")
_COST_KEYS = ("per_batch_s", "per_candidate_s", "per_run_second")
_FIELDS = ("id", "created", "target_kind", "target", "tvm_version", "workload", "best_latency_s",
           "seconds", "trials", "trajectory", "regions_won", "costs")
# A staging directory untouched this long belongs to a crashed writer, not a live one
_STALE_STAGING_S = 3600.0


class ExperienceWarning(UserWarning):
    """An entry was skipped because it cannot be read; the message names it and says why."""


def default_path() -> Path:
    """$XDG_CACHE_HOME/kb_tvm/experience, else ~/.cache/kb_tvm/experience."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    # the XDG spec says to ignore a relative value
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "kb_tvm" / "experience"


# ---------------------------------------------------------------- validation (shared by writers and readers)

def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _short(value) -> str:
    # a long vector or trajectory is shortened ("[1, 2, 3, 4, 5, 6, ...]"): one short line, cheap to build
    return reprlib.repr(value)


def _check_workload(workload) -> None:
    _check(isinstance(workload, dict), f"workload={_short(workload)}: workload must be a dict")
    missing = [key for key in _WORKLOAD_KEYS if key not in workload]
    _check(not missing,
           f"workload is missing {', '.join(missing)}: workload needs {', '.join(_WORKLOAD_KEYS)}")
    for key in ("name", "op_kind", "hash"):
        value = workload[key]
        _check(isinstance(value, str) and value != "",
               f"workload {key}={_short(value)}: {key} must be a non-empty string")
    dtypes = workload["dtypes"]
    _check(isinstance(dtypes, list) and all(isinstance(d, str) for d in dtypes),
           f"workload dtypes={_short(dtypes)}: dtypes must be a list of strings")
    vector = workload["vector"]
    _check(isinstance(vector, list) and all(_is_number(v) for v in vector),
           f"workload vector={_short(vector)}: vector must be a list of finite numbers")
    shapes = workload["shapes"]
    _check(isinstance(shapes, list) and all(isinstance(s, list) and all(_is_int(d) for d in s) for s in shapes),
           f"workload shapes={_short(shapes)}: shapes must be a list of lists of ints")


def _check_record(record: dict) -> None:
    """Raises a one-line ValueError naming the first bad field of an entry.json record."""
    entry_id = record["id"]
    _check(isinstance(entry_id, str) and _ID_RE.fullmatch(entry_id) is not None,
           f"id={_short(entry_id)}: id must be letters, digits, '.', '_' or '-', not starting with '.', '_' or '-'")
    created = record["created"]
    try:
        datetime.fromisoformat(created)
    except (TypeError, ValueError):
        raise ValueError(f"created={_short(created)}: created must be an ISO-8601 time") from None
    target = record["target"]
    _check(isinstance(target, dict) and isinstance(target.get("kind"), str) and target["kind"] != "",
           f"target={_short(target)}: target must be a dict with a non-empty 'kind'")
    _check(record["target_kind"] == target["kind"],
           f"target_kind={_short(record['target_kind'])}: target_kind must equal target['kind']")
    version = record["tvm_version"]
    _check(isinstance(version, str) and version != "",
           f"tvm_version={_short(version)}: tvm_version must be a non-empty string")
    _check_workload(record["workload"])
    best = record["best_latency_s"]
    _check(_is_number(best) and best > 0,
           f"best_latency_s={_short(best)}: best_latency_s must be finite and > 0")
    seconds = record["seconds"]
    _check(_is_number(seconds) and seconds >= 0, f"seconds={_short(seconds)}: seconds must be finite and >= 0")
    trials = record["trials"]
    _check(_is_int(trials) and trials >= 0, f"trials={_short(trials)}: trials must be an int >= 0")
    trajectory = record["trajectory"]
    _check(isinstance(trajectory, list) and all(
        isinstance(p, list) and len(p) == 2 and _is_number(p[0]) and p[0] >= 0 and _is_number(p[1]) and p[1] > 0
        for p in trajectory),
        f"trajectory={_short(trajectory)}: trajectory must be [[seconds >= 0, latency > 0], ...]")
    times = [p[0] for p in trajectory]
    _check(times == sorted(times),
           f"trajectory seconds={_short(times)}: trajectory seconds must be non-decreasing")
    regions = record["regions_won"]
    _check(isinstance(regions, list) and all(isinstance(r, str) for r in regions),
           f"regions_won={_short(regions)}: regions_won must be a list of strings")
    costs = record["costs"]
    _check(isinstance(costs, dict) and all(_is_number(costs.get(k)) and costs[k] >= 0 for k in _COST_KEYS),
           f"costs={_short(costs)}: costs must hold finite numbers >= 0 for {', '.join(_COST_KEYS)}")


def _json_default(value):
    # numpy scalars and arrays from the tuner become plain JSON numbers and lists
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON data")


def _plain(name: str, value):
    """`value` as plain JSON data (numpy scalars converted), or a ValueError naming it."""
    try:
        return json.loads(json.dumps(value, default=_json_default, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}={_short(value)}: {name} must be JSON data ({err})") from None


def _check_samples(samples) -> tuple[str, np.ndarray, np.ndarray]:
    _check(isinstance(samples, tuple) and len(samples) == 3,
           f"samples={_short(samples)}: samples must be (feature_version, X, y) or None")
    version, x, y = samples
    _check(isinstance(version, str) and version != "",
           f"samples feature_version={version!r}: feature_version must be a non-empty string")
    try:
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"samples: X and y must be numeric arrays ({err})") from None
    _check(x.ndim == 2, f"samples X has shape {x.shape}: X must be 2-D [n x d]")
    _check(y.ndim == 1, f"samples y has shape {y.shape}: y must be 1-D [n]")
    _check(x.shape[0] == len(y),
           f"samples X has {x.shape[0]} rows, y has {len(y)} values: X rows must equal len(y)")
    _check(len(y) >= 1, "samples have 0 rows: samples must hold at least one row (pass samples=None instead)")
    _check(bool(np.isfinite(x).all() and np.isfinite(y).all()),
           "samples hold NaN or inf: X and y must be finite")
    return version, x, y


def _round6(value: float) -> float:
    return float(f"{value:.6g}")  # 6 significant digits: plenty for a cost model, files stay small


# ---------------------------------------------------------------- entries

@dataclass(frozen=True)
class ExperienceEntry:
    """One tuned workload, read from <root>/entries/<id>/."""

    id: str
    created: str
    target_kind: str
    target: dict
    tvm_version: str
    workload: dict
    best_latency_s: float
    seconds: float
    trials: int
    trajectory: list
    regions_won: list
    costs: dict
    path: Path

    def database_paths(self) -> tuple[Path, Path]:
        """(workload file, tuning-record file) of the entry's TVM JSONDatabase."""
        return self.path / _DATABASE_FILES[0], self.path / _DATABASE_FILES[1]

    def database(self):
        """The entry's records as a TVM JSONDatabase (imports TVM, which takes seconds)."""
        from tvm.s_tir.meta_schedule.database import JSONDatabase

        workload, records = self.database_paths()
        return JSONDatabase(path_workload=str(workload), path_tuning_record=str(records), allow_missing=False)

    def samples(self) -> tuple[str, np.ndarray, np.ndarray] | None:
        """(feature_version, X [n x d], y [n] log-latency), or None when the entry has none or
        they cannot be read (that with an ExperienceWarning)."""
        path = self.path / _SAMPLES_FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_bytes())
            rows = data["rows"]
            x = np.array([row[1] for row in rows], dtype=float)
            y = np.array([row[0] for row in rows], dtype=float)
            return _check_samples((data["feature_version"], x, y))
        except (OSError, ValueError, TypeError, KeyError, IndexError) as err:
            warnings.warn(f"skipping samples of {self.path}: {_reason(err)}", ExperienceWarning, stacklevel=2)
            return None

    def summary(self) -> dict:
        """Everything but `path`, as JSON data (a copy: changing it leaves the entry alone)."""
        return json.loads(json.dumps({name: getattr(self, name) for name in _FIELDS}))


def _reason(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _read_entry(directory: Path) -> ExperienceEntry:
    """The entry in `directory`, or a ValueError saying why it cannot be read."""
    try:
        raw = (directory / _ENTRY_FILE).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"no {_ENTRY_FILE}") from None
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{_ENTRY_FILE} is not JSON ({_reason(err)})") from None
    _check(isinstance(record, dict), f"{_ENTRY_FILE} is not a JSON object")
    _check("schema" in record, f"{_ENTRY_FILE} has no schema field")
    _check(_is_int(record["schema"]) and record["schema"] == SCHEMA_VERSION,
           f"written by schema {record['schema']}, this kb_tvm reads {SCHEMA_VERSION}")
    missing = [name for name in _FIELDS if name not in record]
    _check(not missing, f"missing fields {', '.join(missing)}")
    _check_record(record)
    _check(record["id"] == directory.name, f"id={record['id']!r}: id must equal its directory name")
    absent = [name for name in _DATABASE_FILES if not (directory / name).is_file()]
    _check(not absent, f"missing {', '.join(absent)}")
    return ExperienceEntry(**{name: record[name] for name in _FIELDS}, path=directory)


def _created(entry: ExperienceEntry) -> tuple[datetime, str]:
    when = datetime.fromisoformat(entry.created)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when, entry.id  # the id breaks exact ties so the order is stable


def _warn_skip(directory: Path, err: Exception) -> None:
    warnings.warn(f"skipping {directory}: {_reason(err)}", ExperienceWarning, stacklevel=2)


def _safe_member(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and "\\" not in name


# ---------------------------------------------------------------- the library

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
