"""Recorded tuning datasets: every candidate measured on one workload and target, kept as the
data a replay stands on. A dataset merges the candidate logs of several runs (uniform samples,
kb, stock's evolutionary search) of the same kernel: one point per distinct schedule (sketch +
decisions), with its features, its latency (median of every measurement) or its error, and what
it cost (build and run seconds).

File: JSON lines (gzip), a header line then one line per point; `SCHEMA` names the version.
No TVM here: the traces ride along so a point can be rebuilt, but nothing below parses them
beyond their decisions.
"""

from __future__ import annotations

import gzip
import itertools
import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SCHEMA = "kb-tvm/dataset/1"


class DatasetError(ValueError):
    """A dataset file that cannot be read, or logs that do not make one."""


def decision_key(trace: list) -> tuple:
    """The sampled decisions of a trace (MetaSchedule's JSON: [instructions, decisions]) as a
    hashable tuple of (instruction index, value as JSON)."""
    decisions = trace[1] if len(trace) > 1 else []
    return tuple((int(inst), json.dumps(value, separators=(",", ":"))) for inst, value in decisions)


@dataclass
class Point:
    """One distinct schedule of the dataset."""

    sketch: str
    decisions: tuple  # decision_key(trace)
    trace: list
    features: np.ndarray | None
    latency_s: float | None  # median over its measurements; None: it failed to build or run
    error: str | None
    build_s: float
    run_s: float
    measurements: int
    strategies: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.latency_s is not None

    def to_json(self) -> dict:
        return {"kind": "point", "sketch": self.sketch, "trace": self.trace,
                "features": None if self.features is None else [round(float(v), 6) for v in self.features],
                "latency_s": self.latency_s, "error": self.error, "build_s": round(self.build_s, 4),
                "run_s": round(self.run_s, 4), "measurements": self.measurements, "strategies": list(self.strategies)}


@dataclass
class Dataset:
    """The points of one workload on one target, and how a batch of them cost time when they
    were recorded: batch seconds = per_batch_s + sum(build_s) / builders + sum(run_s).
    per_batch_s is the median over every recorded batch; per_batch_by_strategy each
    strategy's own (its search's time between batches is in it: stock's evolution costs more).
    start_s: a run's seconds before its first batch's work, the median over the recorded runs
    (a search's start: sampling, ranking, the workers); 0.0 in datasets recorded without it."""

    name: str
    workload: str  # structural hash of the task's module
    task: str
    target: str
    points: list[Point]
    per_batch_s: float
    builders: int
    per_batch_by_strategy: dict[str, float] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    module: str | None = None  # the task's module (tvm.ir.save_json), to rebuild a point
    start_s: float = 0.0

    def __post_init__(self) -> None:
        self.keys = [(p.sketch, p.decisions) for p in self.points]
        self.index = {key: i for i, key in enumerate(self.keys)}
        counts: dict[str, int] = {}
        for p in self.points:
            counts[p.sketch] = counts.get(p.sketch, 0) + 1
        self.sketches = sorted(counts, key=lambda s: (-counts[s], s))  # most sampled first
        uniform = [i for i, p in enumerate(self.points) if "random" in p.strategies]
        self.uniform_indices = uniform or list(range(len(self.points)))

    @property
    def size(self) -> int:
        return len(self.points)

    @property
    def best_latency_s(self) -> float | None:
        ok = [p.latency_s for p in self.points if p.ok]
        return min(ok) if ok else None

    @property
    def target_kind(self) -> str:
        try:
            return json.loads(self.target).get("kind", self.target)
        except (json.JSONDecodeError, AttributeError):
            return self.target.split()[0]

    def batch_seconds(self, points: Iterable[Point], per_batch_s: float | None = None) -> float:
        points = list(points)
        fixed = self.per_batch_s if per_batch_s is None else per_batch_s
        return fixed + sum(p.build_s for p in points) / self.builders + sum(p.run_s for p in points)

    def header(self) -> dict:
        return {"kind": "dataset", "schema": SCHEMA, "name": self.name, "workload": self.workload,
                "task": self.task, "target": self.target, "size": self.size,
                "valid": sum(p.ok for p in self.points), "best_latency_s": self.best_latency_s,
                "per_batch_s": round(self.per_batch_s, 4), "start_s": round(self.start_s, 4),
                "per_batch_by_strategy": {k: round(v, 4) for k, v in self.per_batch_by_strategy.items()},
                "builders": self.builders,
                "strategies": _strategy_counts(self.points), "sources": self.sources, "module": self.module}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as out:
            out.write(json.dumps(self.header(), separators=(",", ":")) + "\n")
            for p in self.points:
                out.write(json.dumps(p.to_json(), separators=(",", ":")) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Dataset:
        path = Path(path)
        try:
            with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as f:
                lines = [json.loads(line) for line in f if line.strip()]
        except (OSError, EOFError, json.JSONDecodeError) as err:
            raise DatasetError(f"{path}: not a readable dataset ({type(err).__name__}: {err})") from None
        if not lines or lines[0].get("kind") != "dataset" or lines[0].get("schema") != SCHEMA:
            raise DatasetError(f"{path}: not a dataset of schema {SCHEMA}")
        head = lines[0]
        points = [Point(sketch=r["sketch"], decisions=decision_key(r["trace"]), trace=r["trace"],
                        features=None if r["features"] is None else np.asarray(r["features"], dtype=float),
                        latency_s=r["latency_s"], error=r["error"], build_s=r["build_s"], run_s=r["run_s"],
                        measurements=r["measurements"], strategies=tuple(r["strategies"]))
                  for r in lines[1:] if r.get("kind") == "point"]
        return cls(name=head["name"], workload=head["workload"], task=head["task"], target=head["target"],
                   points=points, per_batch_s=head["per_batch_s"], builders=head["builders"],
                   per_batch_by_strategy=head.get("per_batch_by_strategy", {}), sources=head.get("sources", []),
                   module=head.get("module"), start_s=head.get("start_s", 0.0))


def build_dataset(logs: list[str | Path], *, name: str, workload: str | None = None) -> Dataset:
    """One dataset from the candidate logs (measure/candidate_log.py) of runs on one workload and
    target: `workload` picks it where a log holds several (a model's tasks), else the logs must
    hold one."""
    from ..measure.candidate_log import CandidateLog

    rows, modules = [], {}
    for log in logs:
        for row in CandidateLog.read(log):
            rows.append({**row, "source": Path(log).name})
        for row in CandidateLog.read(log, kind="workload"):
            modules[row["workload"]] = row["module"]
    all_rows = rows  # a batch's fixed cost is read off whole runs, every task's batches in turn
    workloads = sorted({r["workload"] for r in rows})
    if workload is None:
        if len(workloads) != 1:
            raise DatasetError(f"the logs hold {len(workloads)} workloads ({', '.join(workloads[:5])}): name one")
        workload = workloads[0]
    rows = [r for r in rows if r["workload"] == workload]
    if not rows:
        raise DatasetError(f"no candidate of workload {workload} in {', '.join(map(str, logs))}")
    targets = {r["target"] for r in rows}
    if len(targets) != 1:
        raise DatasetError(f"workload {workload} was measured on {len(targets)} targets: one dataset per target")
    target = targets.pop()

    merged: dict[tuple, list[dict]] = {}
    for r in rows:
        merged.setdefault((r["sketch"], decision_key(r["trace"])), []).append(r)
    build_all = [r["build_s"] for r in rows if r.get("build_s") is not None]
    run_all = [r["run_s"] for r in rows if r.get("run_s") is not None]
    build_default = statistics.median(build_all) if build_all else 0.0
    run_default = statistics.median(run_all) if run_all else 0.0
    points = []
    for (sketch, decisions), group in merged.items():
        latencies = [statistics.median(r["latency_s"]) for r in group if r.get("latency_s")]
        first = group[0]
        features = next((r["features"] for r in group if r.get("features")), None)
        builds = [r["build_s"] for r in group if r.get("build_s") is not None]
        runs = [r["run_s"] for r in group if r.get("run_s") is not None]
        points.append(Point(
            sketch=sketch, decisions=decisions, trace=first["trace"],
            features=None if features is None else np.asarray(features, dtype=float),
            latency_s=statistics.median(latencies) if latencies else None,
            error=None if latencies else (first.get("error") or "failed")[:200],
            build_s=builds[0] if builds else build_default, run_s=runs[0] if runs else run_default,
            measurements=len(latencies), strategies=tuple(sorted({r["strategy"] for r in group}))))
    builders = _builders(target)
    fixed = _fixed_batch_seconds(all_rows, builders)
    starts = _start_seconds(all_rows, builders)
    return Dataset(name=name, workload=workload, task=first["task"], target=target, points=points,
                   per_batch_s=statistics.median([s for ss in fixed.values() for s in ss]) if fixed else 0.0,
                   per_batch_by_strategy={k: statistics.median(v) for k, v in fixed.items()}, builders=builders,
                   sources=sorted({r["source"] for r in rows}), module=modules.get(workload),
                   start_s=statistics.median(starts) if starts else 0.0)


def _builders(target: str) -> int:
    """Builds of a batch run in parallel, one per core of the machine that built them."""
    try:
        spec = json.loads(target)
    except json.JSONDecodeError:
        return 1
    host = spec.get("host") if isinstance(spec.get("host"), dict) else spec
    return max(1, int(host.get("num-cores", 1)))


def _batches_by_run(rows: list[dict]) -> dict[tuple, list[list[dict]]]:
    """Each recorded run's batches in order, keyed by (source, strategy). Batches are numbered
    per run, across its tasks."""
    batches: dict[tuple, list[dict]] = {}
    for r in rows:
        batches.setdefault((r["source"], r["strategy"], r["batch"]), []).append(r)
    runs: dict[tuple, list[list[dict]]] = {}
    for (source, strategy, _), group in sorted(batches.items(), key=lambda item: item[0][2]):
        runs.setdefault((source, strategy), []).append(group)
    return runs


def _work_seconds(batch: list[dict], builders: int) -> float:
    """A batch's builds (in parallel) and runs."""
    return (sum(r.get("build_s") or 0.0 for r in batch) / builders
            + sum(r.get("run_s") or 0.0 for r in batch))


def _fixed_batch_seconds(rows: list[dict], builders: int) -> dict[str, list[float]]:
    """The fixed cost of each recorded batch after a run's first, by strategy: the wall seconds
    since the batch before (`job_s`) less its work."""
    fixed: dict[str, list[float]] = {}
    for (_, strategy), batches in _batches_by_run(rows).items():
        for before, batch in itertools.pairwise(batches):
            wall = max(r["job_s"] for r in batch) - max(r["job_s"] for r in before)
            fixed.setdefault(strategy, []).append(max(0.0, wall - _work_seconds(batch, builders)))
    return fixed


def _start_seconds(rows: list[dict], builders: int) -> list[float]:
    """Each recorded run's seconds before its first batch's work: that batch's wall seconds
    (`job_s`) less its work."""
    return [max(0.0, max(r["job_s"] for r in batches[0]) - _work_seconds(batches[0], builders))
            for batches in _batches_by_run(rows).values()]


def _strategy_counts(points: list[Point]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in points:
        for s in p.strategies:
            counts[s] = counts.get(s, 0) + 1
    return counts
