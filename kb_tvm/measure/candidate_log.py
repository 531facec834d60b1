"""Every measured candidate of a tune, kept as data: one JSON line each, appended as its batch is
measured (a crash loses at most the batch in flight). The replay environment and offline
training are built from these files, so each line holds what a simulator needs to stand in
for a real measurement: the trace, the sketch it was drawn from, features, the latency or the
error, and what the candidate cost (build and run seconds where the pipeline reports them).

Plain Python: `CandidateRecorder` (`callbacks.py`) turns MetaSchedule's measure results into `rows`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

SCHEMA = "kb-tvm/candidates/1"
FILE_NAME = "candidates.jsonl"


@dataclass(frozen=True)
class CandidateRow:
    task: str
    workload: str  # structural hash of the task's module: the same kernel in any run
    target: str
    sketch: str  # hash of the trace's instructions without their decisions: its design space
    trace: list  # MetaSchedule's trace JSON (Trace.as_json, postprocessors removed)
    latency_s: list[float] | None  # every repeat's seconds; None when it failed
    error: str | None  # "build: ..." or "run: ..." (first 500 characters)
    build_s: float | None  # seconds its build took in a worker (None: the builder does not say)
    run_s: float | None  # seconds its measurement took, repeats included
    run_verdict: str | None  # why kb's runner stopped timing it ("slow": raced out early)
    job_s: float  # seconds since the job started when its batch came back
    batch: int
    features: list[float] | None  # per-store features summed, then maxed, over its stores
    strategy: str
    measured_on: str | None = None  # the RPC server that timed it (None: this machine); added in place
    kind: str = "candidate"
    schema: str = SCHEMA


class CandidateLog:
    """Appends CandidateRows to `path` (JSON lines); `read` gives them back, from a .gz too."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows_written = 0

    def append(self, rows: Iterable[CandidateRow]) -> None:
        lines = [json.dumps(asdict(row), separators=(",", ":")) for row in rows]
        self._write(lines)
        self.rows_written += len(lines)

    def append_workload(self, *, workload: str, task: str, module_json: str) -> None:
        """The task's module (tvm.ir.save_json) once, so its traces can be replayed offline."""
        self._write([json.dumps({"kind": "workload", "workload": workload, "task": task, "module": module_json,
                                 "schema": SCHEMA}, separators=(",", ":"))])

    def _write(self, lines: list[str]) -> None:
        if lines:
            with self.path.open("a") as f:
                f.write("\n".join(lines) + "\n")

    @staticmethod
    def read(path: str | Path, kind: str = "candidate") -> Iterator[dict]:
        """The rows of a log of one kind, "candidate" or "workload" (a torn last line, from a
        crash mid-write, is skipped)."""
        path = Path(path)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if row.get("schema") == SCHEMA and row.get("kind") == kind:
                    yield row

    def compress_to(self, dest: str | Path) -> Path:
        """A gzip copy at `dest` (what benchmarks keep in the repository)."""
        dest = Path(dest)
        with self.path.open("rb") as src, gzip.open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
        return dest


def plain(obj):
    """TVM FFI containers and scalars (a trace's JSON) as plain JSON values."""
    if obj is None:
        return None
    for kind in (bool, str, int, float):  # FFI strings subclass str: json wants the base type
        if isinstance(obj, kind):
            return kind(obj)
    if isinstance(getattr(obj, "value", None), (int, float)):  # IntImm, FloatImm
        return obj.value
    if hasattr(obj, "items"):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, Sequence) or hasattr(obj, "__len__"):
        return [plain(v) for v in obj]
    return str(obj)


def sketch_key(trace_json: list) -> str:
    """A trace's instructions without their decisions (and without the decisions' values in
    the instructions' attributes): equal for every sample of one design space."""
    insts = trace_json[0] if trace_json else []
    shape = [[inst[0], len(inst[1]), len(inst[3])] for inst in insts]
    return hashlib.sha1(json.dumps(shape).encode()).hexdigest()[:12]


def summed_maxed(per_store: Sequence[Sequence[float]]) -> list[float] | None:
    """One vector per candidate from MetaSchedule's per-store features: the sum over stores,
    then the max, rounded to 5 significant digits (they are log-scaled counts)."""
    if not len(per_store):
        return None
    columns = list(zip(*per_store))
    return [float(f"{v:.5g}") for v in [sum(c) for c in columns] + [max(c) for c in columns]]
