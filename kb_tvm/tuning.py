"""Tune one operator workload with kb or stock MetaSchedule, on a wall-clock budget: what
`kb-tvm tune-op` and the benchmark harness run."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .budget import TuningBudget
from .logger_guard import guard_metaschedule_logger

STRATEGIES = ("kb", "evolutionary")


@dataclass
class TuneResult:
    workload: str
    strategy: str
    target: str
    budget_s: float
    seconds: float
    trials: int
    failed: int
    best_ms: float | None  # best single measurement during tuning
    final_ms: float | None  # the best schedule re-timed after tuning (the number to trust)
    gflops: float | None
    work_dir: str
    curve: list[dict] = field(default_factory=list)
    stop_reason: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def physical_cores() -> int:
    try:
        import psutil
    except ImportError:
        return os.cpu_count() or 1
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def available_cpus() -> int:
    """CPUs this process may run on (taskset and containers included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cuda_available() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001 - no CUDA runtime at all
        return False


def make_target(spec: str | dict | None):
    """A tvm Target from "llvm", "cuda", a JSON dict, or None (cuda if a GPU is present, else llvm)."""
    import tvm

    if spec is None:
        spec = "cuda" if cuda_available() else "llvm"
    if isinstance(spec, str) and spec.strip().startswith("{"):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as err:
            raise ValueError(f"target {spec!r} is not valid JSON ({err.msg})") from None
    if spec == "llvm":
        spec = {"kind": "llvm", "num-cores": physical_cores()}
    elif spec == "cuda":
        if not cuda_available():
            raise ValueError("target 'cuda' asked for, but no CUDA GPU is visible to TVM")
        major, minor = tvm.cuda(0).compute_version.split(".")
        spec = {"kind": "cuda", "arch": f"sm_{major}{minor}", "max_threads_per_block": 1024,
                "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
                "registers_per_block": 65536, "host": {"kind": "llvm"}}
    if isinstance(spec, str):
        raise ValueError(f"unknown target {spec!r}: use llvm, cuda, or a JSON target like "
                         '\'{"kind": "llvm", "num-cores": 4}\'')
    try:
        return tvm.target.Target(spec)
    except Exception as err:  # noqa: BLE001 - TVM raises many kinds here
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"target {json.dumps(spec)} is not valid: {first}") from None


def default_builder(target):
    """Local builds on every core; GPU builds get 120 s (a cold GPU machine timed out at 30 s)."""
    from tvm.s_tir import meta_schedule as ms

    is_cuda = target.kind.name == "cuda"
    return ms.builder.LocalBuilder(max_workers=available_cpus() if is_cuda else physical_cores(),
                                   timeout_sec=120 if is_cuda else 30)


def default_runner():
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.LocalRunner(timeout_sec=30)


def _space_for(workload, target):
    from tvm.s_tir import meta_schedule as ms

    if target.kind.name == "cuda" and workload.cuda_space == "cuda-tensorcore":
        import tvm.s_tir.tensor_intrin.cuda  # noqa: F401 - registers the wmma/mma intrinsics

        kind = "cuda-tensorcore"
        return ms.space_generator.PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs=kind)
    return "post-order-apply"


def tune_operator(
    workload,
    *,
    target,
    budget: str | float,
    work_dir: str | Path,
    strategy: str = "kb",
    trials_per_batch: int | None = None,
    max_trials: int = 100_000,
    builder=None,
    runner=None,
    seed: int | None = None,
    on_progress: Callable[[dict], None] | None = None,
    on_event: Callable[[dict], None] | None = None,
    quiet: bool = False,
    experience=None,
) -> TuneResult:
    """Tune `workload` for `budget` wall seconds with kb (KBSearch) or stock MetaSchedule
    (EvolutionarySearch stopped at the budget). Builder and runner default to local ones.
    on_progress gets the anytime curve's points, on_event KBSearch's decision-log events.
    quiet: keep MetaSchedule's per-batch tables out of the console (they still go to work_dir/logs).
    experience: a kb_tvm.Experience to warm-start from and add to (kb only); None: cold."""
    from tvm.s_tir import meta_schedule as ms

    from .adapter import KBSearch, ProgressRecorder, TimeCappedSearch

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    tuning_budget = TuningBudget(budget)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    is_cuda = target.kind.name == "cuda"
    cores = physical_cores()
    if trials_per_batch is None:
        trials_per_batch = 64 if is_cuda else 16
    builder = builder or default_builder(target)
    runner = runner or default_runner()
    stop_reasons: list[str] = []

    def event(record: dict) -> None:
        if record["event"] == "stop":
            stop_reasons.append(record["reason"])
        if on_event is not None:
            on_event(record)

    if strategy == "kb":
        search = KBSearch(budget=tuning_budget, seed=seed, on_event=event, experience=experience)
        cost_model = "random"  # KBSearch trains its own model; skip training the stock one
    else:
        search = TimeCappedSearch(budget=tuning_budget)
        cost_model = "xgb"
    budget_total = tuning_budget.total

    def progress(point: dict) -> None:
        point = {**point, "budget_s": budget_total}
        if on_progress is not None:
            on_progress(point)

    if quiet:  # MetaSchedule sizes its console handler from this level at every tune_tir call
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    # TVM registers its tensor intrinsics on first use (~10 s of TVMScript parsing, once per
    # process): keep that out of whichever strategy happens to run first
    import tvm.s_tir.tensor_intrin  # noqa: F401

    recorder = ProgressRecorder(on_progress=progress)
    tuning_budget.start()  # the rest of the job counts, MetaSchedule's own set-up included
    started = time.monotonic()
    with guard_metaschedule_logger():
        database = ms.tune_tir(
            _named_module(workload), target, str(work_dir), max_trials_global=max_trials,
            num_trials_per_iter=trials_per_batch, builder=builder, runner=runner, cost_model=cost_model,
            measure_callbacks=ms.MeasureCallback.create("default") + [recorder],
            space=_space_for(workload, target), strategy=search, seed=seed,
            num_tuning_cores=cores,
        )
    seconds = time.monotonic() - started
    final_ms = time_best(workload, target, database)
    best = final_ms if final_ms is not None else (None if math.isinf(recorder.best_ms) else recorder.best_ms)
    result = TuneResult(
        workload=workload.name, strategy=strategy, target=json.dumps(dict(target.export()), default=str),
        budget_s=budget_total, seconds=seconds, trials=recorder.trials, failed=recorder.failed,
        best_ms=None if math.isinf(recorder.best_ms) else recorder.best_ms, final_ms=final_ms,
        gflops=None if best is None else workload.flops / (best * 1e-3) / 1e9, work_dir=str(work_dir),
        curve=recorder.curve, stop_reason=stop_reasons[0] if stop_reasons else "budget spent")
    (work_dir / "result.json").write_text(json.dumps(result.to_json(), indent=1))
    return result


def _named_module(workload):
    """The workload's module with its function named after the workload: MetaSchedule names
    the task (logs, decision log, experience entry) after it."""
    import tvm

    func = next(iter(workload.module().functions.values()))
    return tvm.IRModule({workload.name.replace("-", "_"): func})


def time_best(workload, target, database, repeat: int = 10) -> float | None:
    """Re-time the database's best schedule on a fresh build: median of `repeat` runs, ms."""
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    mod = workload.module()
    sch = ms.tir_integration.compile_tir(database, mod, target)
    if sch is None:
        return None
    lib = tvm.compile(sch.mod, target=target)
    dev = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    rng = np.random.default_rng(0)
    args = []
    for info in ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"]):
        host = rng.uniform(-1, 1, size=[int(d) for d in info.shape]).astype(str(info.dtype))
        args.append(tvm.runtime.tensor(host, dev))
    timer = lib.mod.time_evaluator("main", dev, number=5, repeat=repeat, min_repeat_ms=50)
    return float(np.median(timer(*args).results)) * 1e3
