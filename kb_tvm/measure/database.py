"""`RecordDatabase`: MetaSchedule's JSON database files with one record per schedule (logic in
`records.py`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import (
    JSONDatabase,
    PyDatabase,
    TuningRecord,
    Workload,
)

from .records import merged_seconds, record_latency


@derived_object
class RecordDatabase(PyDatabase):
    """MetaSchedule's JSON database files in `work_dir` (database_workload.json,
    database_tuning_record.json: stock JSONDatabase reads them), with one record per schedule.
    A schedule measured again refines its record: its run_secs hold one value per measurement,
    and records rank by their median (stock ranks every measurement as a record of its own and
    so deploys the luckiest). Each measurement is appended to the file when it is committed, so
    a crash loses nothing; reading merges them, and `compact()` rewrites the file with one line
    per schedule (the tune commands call it when tuning ends)."""

    def __init__(self, *, work_dir: str | os.PathLike) -> None:
        super().__init__()
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._store = JSONDatabase(work_dir=str(self.work_dir))  # appends each measurement
        self._records: dict[tuple[int, str], TuningRecord] = {}  # (workload, trace) -> merged
        for record in self._store.get_all_tuning_records():
            self._merge(record)
        RECORD_DATABASES.add(self)  # MetaSchedule hands strategies a bare handle: find the folder

    @property
    def path_tuning_record(self) -> Path:
        return self.work_dir / "database_tuning_record.json"

    @property
    def path_workload(self) -> Path:
        return self.work_dir / "database_workload.json"

    def has_workload(self, mod) -> bool:
        return self._store.has_workload(mod)

    def commit_workload(self, mod):
        return self._store.commit_workload(mod)

    def commit_tuning_record(self, record) -> None:
        self._store.commit_tuning_record(record)
        self._merge(record)

    def get_top_k(self, workload, top_k: int) -> list:
        key = _workload_key(workload)
        ranked = sorted((latency, index, record) for index, ((wkey, _), record) in enumerate(self._records.items())
                        if wkey == key and (latency := record_latency(record.run_secs)) is not None)
        return [record for _, _, record in ranked[:top_k]]

    def get_all_tuning_records(self) -> list:
        return list(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    def _merge(self, record) -> None:
        key = (_workload_key(record.workload), str(record.trace))  # the schedule with its decisions
        before = self._records.get(key)
        if before is not None:
            record = TuningRecord(record.trace, record.workload, merged_seconds(before.run_secs, record.run_secs),
                                  record.target, record.args_info)
        self._records[key] = record

    def compact(self) -> None:
        """Rewrite the files with one record line per schedule, written by MetaSchedule's own
        JSONDatabase (workloads in their old order, so record lines keep their workload numbers);
        atomically: a crash mid-way leaves the old files, which read the same."""
        staging = Path(tempfile.mkdtemp(dir=self.work_dir, prefix=".compact-"))
        try:
            fresh = JSONDatabase(work_dir=str(staging))
            with open(self.path_workload, encoding="utf-8") as lines:
                for line in lines:
                    if line.strip():
                        fresh.commit_workload(Workload.from_json(json.loads(line)).mod)
            for record in self._records.values():
                fresh.commit_tuning_record(TuningRecord(record.trace, fresh.commit_workload(record.workload.mod),
                                                        record.run_secs, record.target, record.args_info))
            os.replace(staging / "database_workload.json", self.path_workload)
            os.replace(staging / "database_tuning_record.json", self.path_tuning_record)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


# every RecordDatabase alive: MetaSchedule hands a strategy a bare handle, whose folder KBSearch finds here
RECORD_DATABASES: weakref.WeakSet = weakref.WeakSet()


def _workload_key(workload) -> int:
    """The workload's structural hash: the number JSONDatabase writes first in its workload line."""
    from tvm_ffi import structural_hash

    return int(structural_hash(workload.mod))
