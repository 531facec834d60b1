"""One entry of the experience library (ExperienceEntry): read from its directory, checked, and
skipped with an ExperienceWarning when it cannot be read."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .schema import (
    _DATABASE_FILES,
    _ENTRY_FILE,
    _FIELDS,
    _SAMPLES_FILE,
    SCHEMA_VERSION,
    _check,
    _check_record,
    _check_samples,
    _is_int,
)


class ExperienceWarning(UserWarning):
    """An entry was skipped because it cannot be read; the message names it and says why."""


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
