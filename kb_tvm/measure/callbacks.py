"""MeasureCallbacks: `ProgressRecorder` records best latency against seconds (a run's anytime
curve); `CandidateRecorder` keeps every measured candidate as data (logic in `candidate_log.py`)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from .candidate_log import FILE_NAME as CANDIDATES_FILE
from .candidate_log import (
    CandidateLog,
    CandidateRow,
    plain,
    sketch_key,
    summed_maxed,
)
from .records import mean_seconds


@derived_object
class ProgressRecorder(PyMeasureCallback):
    """Records (seconds since start, trials, best ms, the task and its batch's best) after every
    measured batch, and calls `on_progress` with it; the anytime curve of a run."""

    def __init__(self, *, on_progress: Callable[[dict], None] | None = None) -> None:
        self.on_progress = on_progress
        self.started = time.monotonic()
        self.curve: list[dict] = []
        self.trials = 0
        self.failed = 0
        self.best_ms = math.inf

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.add(str(task_scheduler.tasks_[task_id].ctx.task_name), [
            None if (seconds := mean_seconds(result)) is None else seconds * 1e3 for result in runner_results],
            task_id=int(task_id))

    def add(self, task: str, latencies_ms: list[float | None], task_id: int | None = None) -> None:
        """A measured batch (None: a failed candidate); also for kernels measured outside
        MetaSchedule (a kernel family's variants, task_id None)."""
        ok = [ms for ms in latencies_ms if ms is not None]
        batch_best = min(ok, default=math.inf)
        self.trials += len(latencies_ms)
        self.failed += len(latencies_ms) - len(ok)
        self.best_ms = min(self.best_ms, batch_best)
        point = {"seconds": round(time.monotonic() - self.started, 3), "trials": self.trials,
                 "failed": self.failed, "best_ms": None if math.isinf(self.best_ms) else self.best_ms,
                 "task_id": task_id, "task": task,
                 "batch_best_ms": None if math.isinf(batch_best) else batch_best}
        self.curve.append(point)
        if self.on_progress is not None:
            self.on_progress(point)


@derived_object
class CandidateRecorder(PyMeasureCallback):
    """Keeps every measured candidate as a row of a `CandidateLog` in `work_dir` (logic in
    `measure/candidate_log.py`): trace, sketch, features, latency or error, and the build and
    run seconds that kb's builder and runner report (`builder`, `runner`: the tune's own;
    stock's report none). `clock` gives the job's seconds (a TuningBudget's `spent`)."""

    def __init__(self, *, work_dir: str | os.PathLike, strategy: str, clock: Callable[[], float],
                 builder=None, runner=None) -> None:
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        self.log = CandidateLog(Path(work_dir) / CANDIDATES_FILE)
        self.strategy = strategy
        self.clock = clock
        self.builder = builder
        self.runner = runner
        self.features = PerStoreFeature()
        self.batches = 0
        self._workload_keys: dict[int, str] = {}

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        import tvm
        from tvm_ffi import structural_hash

        ctx = task_scheduler.tasks_[task_id].ctx
        workload = self._workload_keys.get(int(task_id))
        if workload is None:
            workload = self._workload_keys[int(task_id)] = f"{structural_hash(ctx.mod) & (2**64 - 1):016x}"
            self.log.append_workload(workload=workload, task=str(ctx.task_name), module_json=tvm.ir.save_json(ctx.mod))
        built_in = [_outcome(self.builder, b) for b in builder_results]
        ran_in = [None if b.error_msg is not None else _outcome(self.runner, b.artifact_path) for b in builder_results]
        features = [f.numpy().tolist() for f in self.features.extract_from(ctx, measure_candidates)]
        job_s, target = round(self.clock(), 3), json.dumps(plain(ctx.target.export()))
        rows = []
        for i, (cand, built, ran) in enumerate(zip(measure_candidates, builder_results, runner_results)):
            trace = plain(cand.sch.trace.as_json(remove_postproc=True))
            error = (f"build: {built.error_msg}" if built.error_msg is not None
                     else f"run: {ran.error_msg}" if ran.error_msg is not None else None)
            latency = None if error is not None or not ran.run_secs else [float(s) for s in ran.run_secs]
            rows.append(CandidateRow(
                task=str(ctx.task_name), workload=workload, target=target, sketch=sketch_key(trace), trace=trace,
                latency_s=latency, error=None if error is None else error[:500],
                build_s=_seconds(built_in[i]), run_s=_seconds(ran_in[i]), run_verdict=_verdict(ran_in[i]),
                measured_on=_server(ran_in[i]),
                job_s=job_s, batch=self.batches,
                features=summed_maxed(features[i]) if i < len(features) else None, strategy=self.strategy))
        self.log.append(rows)
        self.batches += 1


def _outcome(part, key):
    """A candidate's Outcome (seconds, value) from KBBuilder (by its BuilderResult) or KBRunner
    (by its artifact); None from parts that report none (MetaSchedule's LocalBuilder,
    LocalRunner, RPCRunner)."""
    return part.outcome_of(key) if hasattr(part, "outcome_of") else None


def _seconds(outcome) -> float | None:
    return None if outcome is None or outcome.seconds is None else round(outcome.seconds, 4)


def _server(outcome) -> str | None:
    value = None if outcome is None else outcome.value
    return value.get("server") if isinstance(value, dict) else None


def _verdict(outcome) -> str | None:
    value = None if outcome is None else outcome.value
    return value.get("verdict") if isinstance(value, dict) else None
