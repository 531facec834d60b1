"""Tune one operator workload with kb or stock MetaSchedule, on a wall-clock budget: what
`kb-tvm tune-op` and the benchmark harness run."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .budget import TuningBudget
from .logger_guard import guard_metaschedule_logger
from .measure.records import record_latency
from .measure.targets import available_cpus, physical_cores, use_target_cores
from .measure.timing import REPORT_FIELDS

# "random": MetaSchedule's replay-trace, uniform samples of the design spaces (the replay
# datasets record it beside the two searches, so a dataset is not only what they liked);
# "agent": kb steered by the trained agent shipped in kb_tvm/models/agent.json
STRATEGIES = ("kb", "agent", "evolutionary", "random")
KB_STRATEGIES = ("kb", "agent")  # KBSearch (and, for a model, KBTaskScheduler) runs them


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")


def make_search(strategy: str, budget: TuningBudget, **kb_arguments):
    """(SearchStrategy, MetaSchedule cost model) that `strategy` names. kb_arguments go to KBSearch
    and are not stock search's to take: it gets its seed from tune_tir/tune_relax."""
    from .search.strategy import KBSearch, TimeCappedSearch

    check_strategy(strategy)
    if strategy in KB_STRATEGIES:
        agent = None
        if strategy == "agent":
            from .agent import MacroPolicy

            agent = MacroPolicy.load()
        # KBSearch trains its own model; "random" skips training the stock one
        return KBSearch(budget=budget, agent=agent, **kb_arguments), "random"
    if strategy == "random":
        return TimeCappedSearch(budget=budget, inner="replay-trace"), "random"
    return TimeCappedSearch(budget=budget), "xgb"


@dataclass
class TuneResult:
    workload: str
    strategy: str
    target: str
    budget_s: float
    seconds: float
    trials: int
    failed: int
    best_ms: float | None  # the best record's latency during tuning (median of its measurements)
    final_ms: float | None  # the best schedule re-timed after tuning (the number to trust)
    gflops: float | None
    work_dir: str
    curve: list[dict] = field(default_factory=list)
    stop_reason: str | None = None
    pipeline: str = "kb"
    # a kernel family's best variant where it was a region of this search (kb_tvm/kernels): the
    # family, its parameters, ms, and whether it beat MetaSchedule's best (then final_ms is its time)
    template: dict | None = None
    # how final_ms was timed (`time_best`'s report: median_s, repeats, number, verdict); None
    # where nothing was re-timed or final_ms is a kernel family's
    final_timing: dict | None = None

    def to_json(self) -> dict:
        return asdict(self)


PIPELINES = ("kb", "stock")


def default_builder(target, pipeline: str = "kb", stream_to=None, seconds_left=None):
    """Builds on every core (GPU: every CPU this process may use but one, left to the measuring
    process), 120 s each (a cold GPU machine timed out at 30 s). kb: KBBuilder's persistent
    workers, handing each candidate to `stream_to` (a KBRunner) as soon as it is built, and once
    builds have succeeded cutting each at 8x the slowest of them, at least 10 s, and never past
    `seconds_left()`, the job's budget (measure.pipeline.BuildPool.limit_s); stock: MetaSchedule's
    LocalBuilder, as stock runs it."""
    from tvm.s_tir import meta_schedule as ms

    # 120 s: a LocalBuilder worker's first build imports all of TVM's tensor intrinsics (40 s on
    # a 2-core CPU machine); at 30 s it is killed, and its successor fails the same way
    is_cuda = target.kind.name == "cuda"
    workers, timeout = (max(1, available_cpus() - 1), 120) if is_cuda else (physical_cores(), 120)
    if pipeline == "kb":
        from .measure.builder import KBBuilder

        return KBBuilder(workers=workers, timeout_s=timeout, stream_to=stream_to, seconds_left=seconds_left)
    return ms.builder.LocalBuilder(max_workers=workers, timeout_sec=timeout)


def parallel_builds(builder) -> int | None:
    """How many candidates `builder` builds at once, where it says (kb's and MetaSchedule's
    local builders); None for others."""
    from .measure.builder import KBBuilder

    if isinstance(builder, KBBuilder):
        return builder.pool.workers_count
    workers = getattr(builder, "max_workers", None)  # MetaSchedule's LocalBuilder
    return workers if isinstance(workers, int) and workers >= 1 else None


def default_runner(target, pipeline: str = "kb"):
    """kb: KBRunner's persistent measuring process; stock: MetaSchedule's LocalRunner."""
    from tvm.s_tir import meta_schedule as ms

    if pipeline == "kb":
        from .measure.runner import KBRunner

        return KBRunner(device="cuda" if target.kind.name == "cuda" else "cpu", timeout_s=60)
    return ms.runner.LocalRunner(timeout_sec=30)


@contextmanager
def measurement_pipeline(target, pipeline: str = "kb", builder=None, runner=None, budget=None):
    """(builder, runner) for a tune: those given, else `pipeline`'s defaults for the target
    (kb's builder cuts no build past `budget`, a TuningBudget, where one is given).
    The ones made here have their worker processes stopped when the block ends. kb's defaults
    on a GPU stream: each candidate is timed as soon as it is built, while the rest build."""
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}: use one of {', '.join(PIPELINES)}")
    made = []
    use_target_cores(target)  # the measuring workers start with the target's threads
    streams = pipeline == "kb" and target.kind.name == "cuda" and runner is None
    if runner is None:
        runner = default_runner(target, pipeline)
        made.append(runner)
    if builder is None:
        builder = default_builder(target, pipeline, stream_to=runner if streams else None,
                                  seconds_left=None if budget is None else lambda: budget.remaining)
        made.append(builder)
    try:
        yield builder, runner
    finally:
        for part in made:
            if pipeline == "kb":  # stock's LocalBuilder and LocalRunner keep no process to stop
                part.close()


def _space_for(workload, target):
    if target.kind.name == "cuda" and workload.cuda_space == "cuda-tensorcore":
        from .search.tensor_core_space import TensorCoreSpace

        return TensorCoreSpace()
    return "post-order-apply"


def tune_operator(
    workload,
    *,
    target,
    budget: str | float,
    work_dir: str | Path,
    strategy: str = "kb",
    pipeline: str = "kb",
    trials_per_batch: int | None = None,
    max_trials: int = 100_000,
    builder=None,
    runner=None,
    seed: int | None = None,
    repeatable: bool = False,
    on_progress: Callable[[dict], None] | None = None,
    on_event: Callable[[dict], None] | None = None,
    quiet: bool = False,
    experience=None,
) -> TuneResult:
    """Tune `workload` for `budget` wall seconds with kb (KBSearch), stock MetaSchedule
    (EvolutionarySearch stopped at the budget) or "random" (stock's replay-trace). Builder and runner default to local ones.
    on_progress gets the anytime curve's points, on_event KBSearch's decision-log events.
    pipeline: the builder and runner when none are given: kb's persistent ones or stock's.
    seed, repeatable: see KBSearch's options of those names.
    quiet: keep MetaSchedule's per-batch tables out of the console (they still go to work_dir/logs).
    experience: a kb_tvm.Experience to warm-start from and add to (kb only); None: cold.
    kb and agent also open a kernel family's region where one serves the target and computes the
    workload (`template_region`: e.g. an fp16/bf16 GEMM on an sm_90 GPU); `final_ms` is then the
    faster of it and MetaSchedule's best."""
    from tvm.s_tir import meta_schedule as ms

    from .measure.callbacks import CandidateRecorder, ProgressRecorder
    from .measure.database import RecordDatabase

    tuning_budget = TuningBudget(budget)
    work_dir = Path(work_dir)
    stop_reasons: list[str] = []

    def event(record: dict) -> None:
        if record["event"] == "stop":
            stop_reasons.append(record["reason"])
        if on_event is not None:
            on_event(record)

    # refuses a bad one; either search registers TVM's tensor intrinsics when made, before the clock
    search, cost_model = make_search(strategy, tuning_budget, seed=seed, repeatable=repeatable, on_event=event,
                                     experience=experience, log_dir=str(work_dir / "kb_logs"))
    use_target_cores(target)  # before any kernel runs here or in the workers started below
    work_dir.mkdir(parents=True, exist_ok=True)
    is_cuda = target.kind.name == "cuda"
    cores = physical_cores()
    if trials_per_batch is None:
        trials_per_batch = 64 if is_cuda else 16
    budget_total = tuning_budget.total

    def progress(point: dict) -> None:
        point = {**point, "budget_s": budget_total}
        if on_progress is not None:
            on_progress(point)

    if quiet:  # MetaSchedule sizes its console handler from this level at every tune_tir call
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    recorder = ProgressRecorder(on_progress=progress)
    database = RecordDatabase(work_dir=work_dir)
    tuning_budget.start()  # the rest of the job counts, MetaSchedule's own set-up included
    started = time.monotonic()
    template = None
    # the families' variants are timed here, before the pipeline's workers start: they would
    # share the cores (the first variants ran 2-5x slow while the workers imported TVM)
    if strategy in KB_STRATEGIES:
        template = template_region(workload, target, tuning_budget, work_dir, runner=runner,
                                   on_measured=lambda family, ms: recorder.add(family, [ms]), on_event=event)
        if template is not None:
            search.outside_best = {_task_name(workload): template.seconds}
            search.outside_names = {_task_name(workload): template.family.name}
    with measurement_pipeline(target, pipeline, builder, runner, budget=tuning_budget) as (builder, runner), \
            guard_metaschedule_logger():
        if strategy in KB_STRATEGIES:
            search.build_workers = parallel_builds(builder)
        kept = CandidateRecorder(work_dir=work_dir, strategy=strategy,
                                 clock=lambda: tuning_budget.spent, builder=builder, runner=runner)
        ms.tune_tir(
            _named_module(workload), target, str(work_dir), max_trials_global=max_trials, database=database,
            num_trials_per_iter=trials_per_batch, builder=builder, runner=runner, cost_model=cost_model,
            measure_callbacks=ms.MeasureCallback.create("default") + [recorder, kept],
            space=_space_for(workload, target), strategy=search, seed=seed,
            num_tuning_cores=cores,
        )
    seconds = time.monotonic() - started
    database.compact()
    best_ms = best_record_ms(workload, target, database)
    final_timing: dict = {}
    final_ms = time_best(workload, target, database, measurer=getattr(runner, "measurer", None),
                         on_report=lambda report: final_timing.update({k: report[k] for k in REPORT_FIELDS}))
    template_row = None
    if template is not None:
        family = template.family
        wins = final_ms is None or template.seconds * 1e3 < final_ms
        template_row = {"family": family.name, "kernel": family.source, **family.record(template.params),
                        "variant": family.describe(template.params), "ms": template.seconds * 1e3,
                        "beats_metaschedule": wins}
        if wins:
            final_ms, final_timing = template.seconds * 1e3, {}
    best = final_ms if final_ms is not None else best_ms
    result = TuneResult(
        workload=workload.name, strategy=strategy, target=json.dumps(dict(target.export()), default=str),
        budget_s=budget_total, seconds=seconds, trials=recorder.trials, failed=recorder.failed,
        best_ms=best_ms, final_ms=final_ms, final_timing=final_timing or None,
        gflops=None if best is None else workload.flops / (best * 1e-3) / 1e9, work_dir=str(work_dir),
        curve=recorder.curve, stop_reason=stop_reasons[0] if stop_reasons else "budget spent", pipeline=pipeline,
        template=template_row)
    (work_dir / "result.json").write_text(json.dumps(result.to_json(), indent=1))
    return result


def _task_name(workload) -> str:
    return workload.name.replace("-", "_")


def _named_module(workload):
    """The workload's module with its function named after the workload: MetaSchedule names
    the task (logs, decision log, experience entry) after it."""
    import tvm

    func = next(iter(workload.module().functions.values()))
    return tvm.IRModule({_task_name(workload): func})


def template_region(workload, target, budget: TuningBudget, work_dir: Path, *, runner=None,
                    on_measured: Callable[[str, float | None], None] = lambda family, ms: None,
                    on_event: Callable[[dict], None] = lambda record: None):
    """The kernel families (kb_tvm/kernels) as a region of this task, measured before
    MetaSchedule's: each family that serves the target and computes the workload (e.g. an
    fp16/bf16 GEMM on an sm_90 GPU) gets its variant search on the local device, all of
    them together at most `task_search.SHARE_OF_BUDGET` of the budget, each variant checked against
    the workload's own TIR (TVM's default schedule) on two input sets before it is timed. Returns
    the best right variant (a KernelChoice; every measured one is a line of
    work_dir/kernels.jsonl), or None where no family applies. The variants are not MetaSchedule
    schedules: MetaSchedule's search then runs with the variant's seconds as the bar to beat.
    on_measured(family name, ms or None) after each variant."""
    from .kernels import applicable, task_search
    from .kernels.family import NotApplicable
    from .measure.remote import RemoteMeasurer

    name = _task_name(workload)

    def skip(family, why: str) -> None:
        on_event({"event": "kernel_skip", "family": family.name, "task": name, "why": why})

    families = applicable(target)
    if not families:
        return None
    if isinstance(getattr(runner, "measurer", None), RemoteMeasurer):
        for family in families:
            skip(family, "measuring through an RPC tracker: the family's variants are measured on a local device")
        return None
    mod = workload.module()
    matched = []
    for family in families:
        try:
            matched.append((family, family.match(mod, target)))
        except NotApplicable as why:
            skip(family, str(why))
    if not matched:
        return None
    device = task_search.local_device(target)
    reference = _default_build(workload, target)

    def notify(record: dict) -> None:
        if record["event"] == "kernel_variant":
            on_measured(record["family"], None if record["seconds"] is None else record["seconds"] * 1e3)
        on_event(record)

    stop_at = budget.spent + task_search.SHARE_OF_BUDGET * budget.remaining
    earlier = task_search.read_rows(work_dir)
    best = None
    for i, (family, problem) in enumerate(matched):
        # an equal part of what is left to each family still to search
        family_stop = budget.spent + (stop_at - budget.spent) / (len(matched) - i)
        choice = task_search.search_task(family, problem, mod["main"], name, target, device,
                                         lambda arrays: task_search.task_output(reference, "main", arrays, device),
                                         until=lambda family_stop=family_stop: budget.spent >= family_stop,
                                         work_dir=work_dir, earlier=earlier, notify=notify)
        if choice is not None:
            on_event({"event": "kernel_best", "family": family.name, "task": name, "seconds": choice.seconds,
                      "variant": family.describe(choice.params)})
            if best is None or choice.seconds < best.seconds:
                best = choice
    return best


def _default_build(workload, target):
    """The workload built as TVM builds an untuned kernel (dlight's default schedules on a GPU):
    the reference the families' variants are checked against."""
    import tvm
    from tvm.s_tir import dlight as dl

    mod = workload.module()
    with target:
        if target.kind.name == "cuda":
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.Fallback())(mod)
        return tvm.compile(mod, target=target)


def best_record_ms(workload, target, database) -> float | None:
    """The latency of the record `time_best` re-times and a build would deploy: the median of
    its measurements, in ms."""
    record = database.query_tuning_record(workload.module(), target, "main")
    latency = None if record is None else record_latency(record.run_secs)
    return None if latency is None else latency * 1e3


def time_best(workload, target, database, repeat: int = 10, measurer=None, *,
              on_report: Callable[[dict], None] | None = None) -> float | None:
    """Re-time the database's best schedule on a fresh build, as the runner timed it
    (`measure.timer.time_function` on `activation_like` arguments; the runner's policy, that of
    `measurer` where given, with at least `repeat` repeats and no race): the median, ms. With a
    RemoteMeasurer, by it, on the devices it measures on (this machine may have no GPU).
    on_report gets the timing report (repeats, number, verdict)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from .measure.remote import RemoteMeasurer
    from .measure.targets import compile_kernel
    from .measure.timer import device_arguments, time_function
    from .measure.timing import TimingPolicy, at_least
    from .measure.workers import argument_signature

    mod = workload.module()
    sch = ms.tir_integration.compile_tir(database, mod, target)
    if sch is None:
        return None
    lib = compile_kernel(sch.mod, target)
    signature = argument_signature(ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"]))
    if isinstance(measurer, RemoteMeasurer):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "best.so")
            lib.export_library(path)
            outcome = measurer.submit(path, signature).result()
        if outcome.error is not None:
            return None
        report = outcome.value
    else:
        dev = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
        policy = at_least(getattr(measurer, "policy", None) or TimingPolicy(), repeat)
        report = time_function(lib.mod, "main", dev, device_arguments(dev, signature), policy,
                               cpu=target.kind.name != "cuda")
    if on_report is not None:
        on_report(report)
    return report["median_s"] * 1e3
