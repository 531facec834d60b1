"""The glue to MetaSchedule: every `derived_object` of kb_tvm lives here.

- `KBSearch`: the budget-aware coarse-to-fine SearchStrategy (logic in `search/`: planner, candidate factory, phases).
- `TimeCappedSearch`: stock MetaSchedule's search, stopped when a wall budget is spent;
  the baseline for side-by-side runs (`--strategy evolutionary`).
- `ProgressRecorder`: a MeasureCallback that records best latency against seconds.
- `CandidateRecorder`: a MeasureCallback that keeps every measured candidate as data (logic in
  `measure/candidate_log.py`).
- `KBTaskScheduler`: splits one wall-clock budget across a model's tasks (logic in
  `allocation.py`).
- `KBBuilder`, `KBRunner`: the persistent build-and-measure path (logic in `measure/`); they
  serve stock MetaSchedule searches as well as KBSearch.
- `RecordDatabase`: MetaSchedule's JSON database files with one record per schedule (logic in
  `measure/records.py`).
- `TensorCoreSpace`: MetaSchedule's tensor-core design space with bf16 and software-pipelined
  WMMA sketches added (logic in `search/tensor_core_space.py`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.database import (
    JSONDatabase,
    PyDatabase,
    TuningRecord,
    Workload,
)
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy, SearchStrategy
from tvm.s_tir.meta_schedule.space_generator import PostOrderApply, PySpaceGenerator
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler
from tvm.s_tir.schedule import ScheduleError

from . import allocation, warm_start
from .budget import TuningBudget
from .decision_log import DecisionLog, earlier_events
from .experience import Experience
from .measure.candidate_log import FILE_NAME as CANDIDATES_FILE
from .measure.candidate_log import (
    CandidateLog,
    CandidateRow,
    plain,
    sketch_key,
    summed_maxed,
)
from .measure.pipeline import BuildPool, Measurer
from .measure.remote import RemoteMeasurer
from .measure.records import merged_seconds, record_latency
from .measure.timing import TimingPolicy
from .measure.workers import argument_signature, built_arguments, cuda_compiler
from .search import FEATURE_VERSION, CandidateFactory, SearchOptions, TaskSearch
from .search.tensor_core_space import align_bf16_staging, tensor_core_rules
from .templates import load_templates


def _check(name: str, value, ok: bool, rule: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r}: {rule}")


def _validated_options(**given) -> SearchOptions:
    known = {f.name for f in fields(SearchOptions)}
    unknown = set(given) - known
    if unknown:
        raise TypeError(f"unknown KBSearch option(s) {sorted(unknown)}; known: {sorted(known)}")
    opt = SearchOptions(**given)
    for name in ("coarse_samples_per_space", "coarse_trials_per_region", "keep_regions",
                 "proposals_per_trial", "elites", "refine_elites", "generations", "population",
                 "remeasure_times", "patience"):
        value = getattr(opt, name)
        _check(name, value, isinstance(value, int) and value >= 1, "must be an integer >= 1")
    _check("remeasure_top", opt.remeasure_top, isinstance(opt.remeasure_top, int) and opt.remeasure_top >= 0,
           "must be an integer >= 0")
    for name in ("coarse_max_fraction", "refine_after", "remeasure_share", "sampling_time_share",
                 "proposing_time_share"):
        value = getattr(opt, name)
        _check(name, value, 0.0 < value <= 1.0, "must be a fraction in (0, 1]")
    for name in ("explore_share", "min_exploration"):
        value = getattr(opt, name)
        _check(name, value, 0.0 <= value <= 1.0, "must be a fraction in [0, 1]")
    _check("min_total_gain", opt.min_total_gain, opt.min_total_gain >= 0.0, "must be >= 0")
    _check("bar_margin", opt.bar_margin, opt.bar_margin >= 1.0, "must be >= 1 (the pace is extrapolated at least as is)")
    _check("repeatable", opt.repeatable, isinstance(opt.repeatable, bool), "must be True or False")
    return opt


def _mean_seconds(result) -> float | None:
    if result.error_msg is not None or not result.run_secs:
        return None
    return sum(float(s) for s in result.run_secs) / len(result.run_secs)


def _result_error(result) -> str | None:
    return None if result.error_msg is None else str(result.error_msg)


@derived_object
class KBSearch(PySearchStrategy):
    """Budget-aware coarse-to-fine search.

    KBSearch(budget="10m") spends at most the budget in wall-clock seconds (plus at most
    one measurement batch); trials (tune_tir's max_trials_*) stay an optional cap. Clones
    made for the tasks of one job share its budget. It writes one decision log per task
    under `log_dir` (default: `<work_dir>/kb_logs`, found from its database), and hands
    every logged event (a dict with "event", "task" and its fields) to `on_event`.
    `experience`: a `kb_tvm.Experience` library to warm-start from (similar workloads on the
    same target kind lend their best schedules, winning regions, costs and cost-model rows)
    and to add each task's outcome to; None (the default) searches cold and keeps nothing.
    `seed` (default: tune_tir's) seeds its random choices: samples, mutations, ties.
    `repeatable=True` also draws samples from explicit seeds in a fixed order with no time limit
    on how many, so one seed proposes the same first batch; the measurements' noise and the
    wall-clock budget still make two runs part later. `agent`: a trained `kb_tvm.agent.MacroPolicy`
    that picks each fine-phase batch's macro-action (the rules where it is unsure; None: the
    rules alone). `outside_best`: task name -> the best seconds already measured for that task
    outside MetaSchedule's space (the Hopper template's kernel); its search spends seconds only
    where it expects to beat them. Other options: `SearchOptions`.
    """

    def __init__(self, *, budget: str | float | TuningBudget, templates_dir: str | None = None,
                 log_dir: str | None = None, on_event: Callable[[dict], None] | None = None,
                 experience: Experience | None = None, agent=None,
                 outside_best: dict[str, float] | None = None, **options) -> None:
        _check("experience", experience, experience is None or isinstance(experience, Experience),
               "must be a kb_tvm.Experience or None")
        if agent is not None:  # the agent is optional: without one, nothing of it is imported
            from .agent import MacroPolicy

            _check("agent", agent, isinstance(agent, MacroPolicy), "must be a kb_tvm.agent.MacroPolicy or None")
        _check("outside_best", outside_best, outside_best is None or (isinstance(outside_best, dict) and all(
            isinstance(v, (int, float)) and v > 0 for v in outside_best.values())),
               "must map task names to seconds > 0, or be None")
        self.outside_best = dict(outside_best or {})
        self.experience = experience
        self.agent = agent
        self.budget = budget if isinstance(budget, TuningBudget) else TuningBudget(budget)
        self.options = _validated_options(**options)
        self.templates_dir = templates_dir
        self.log_dir = log_dir
        self.on_event = on_event
        self.context = None
        self.task: TaskSearch | None = None

    def _initialize_with_tune_context(self, context) -> None:
        self.context = context

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        target_kind = self.context.target.kind.name
        templates = load_templates(target_kind, self.templates_dir)
        log_dir = self.log_dir
        if log_dir is None:
            path = getattr(database, "path_workload", None) or next(
                (d.path_workload for d in list(_RECORD_DATABASES) if d._outer().same_as(database)), None)
            log_dir = os.path.join(os.path.dirname(path) if path else os.getcwd(), "kb_logs")
        task_name = self.context.task_name or "task"
        listener = None
        if self.on_event is not None:
            on_event = self.on_event

            def listener(record: dict) -> None:
                on_event({**record, "task": task_name})

        logged_before = earlier_events(log_dir, task_name)  # read before this run's log joins them
        log = DecisionLog.for_task(log_dir, task_name, listener)
        self.budget.start()
        options = self.options
        if options.seed is None and self.context.rand_state >= 0:
            options = _validated_options(**{**vars(options), "seed": int(self.context.rand_state)})
        _check("repeatable", options.repeatable, options.seed is not None or not options.repeatable,
               "needs a seed (KBSearch(seed=...) or tune_tir(seed=...))")
        borrowed, prior = [], None
        if self.experience is not None:
            try:
                borrowed, prior = warm_start.lend(self.experience, self.context.mod, task_name,
                                                  self.context.target, FEATURE_VERSION)
            except Exception as err:  # noqa: BLE001 - a library problem must not stop tuning
                log.write("borrow-failed", error=f"{type(err).__name__}: {err}"[:300])
        self.task = TaskSearch(context=self.context, design_spaces=design_spaces, templates=templates,
                               budget=self.budget.task(task_name), options=options, max_trials=int(max_trials),
                               trials_per_batch=int(num_trials_per_iter), log=log, borrowed=borrowed,
                               prior=prior, steer=self.agent, outside_best_s=self.outside_best.get(task_name))
        log.write("start", task=self.context.task_name, target=str(self.context.target.export()),
                  budget_s=self.budget.total, budget_spent_s=self.budget.spent, max_trials=int(max_trials),
                  trials_per_batch=int(num_trials_per_iter), design_spaces=len(design_spaces),
                  templates=[{"name": t.name, "why": t.why} for t in templates], options=vars(options),
                  outside_best_ms=None if task_name not in self.outside_best else self.outside_best[task_name] * 1e3)
        if database is not None and database.has_workload(self.context.mod):
            # an interrupted or earlier run's best: they parent the search, unmeasured again
            records = database.get_top_k(database.commit_workload(self.context.mod), options.population)
            earlier = [(r.trace, latency) for r in records if (latency := record_latency(r.run_secs)) is not None]
            if earlier:
                self.task.start_from_records(earlier)
        if logged_before:
            self.task.resume_from_log(logged_before)

    def post_tuning(self) -> None:
        task = self.task
        if task is None:
            return
        task.stop("tuning ended by the task scheduler")
        payload = task.experience() if self.experience is not None else None
        if payload is not None:
            try:
                entry_id = warm_start.save(self.experience, self.context, payload)
                task.log.write("experience-saved", entry=entry_id, library=str(self.experience.path))
            except Exception as err:  # noqa: BLE001 - the records are in the database anyway
                task.log.write("experience-save-failed", error=f"{type(err).__name__}: {err}"[:300])

    def generate_measure_candidates(self):
        batch = self.task.next_batch()
        if batch is None:
            return None
        return [CandidateFactory.measure_candidate(c) for c in batch]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.task.observe([(_mean_seconds(r), _result_error(r)) for r in results])

    def clone(self) -> SearchStrategy:
        # clones (one per task) share the budget: it counts seconds of the whole job
        return KBSearch(budget=self.budget, templates_dir=self.templates_dir, log_dir=self.log_dir,
                        on_event=self.on_event, experience=self.experience, agent=self.agent,
                        outside_best=self.outside_best, **vars(self.options))


@derived_object
class TimeCappedSearch(PySearchStrategy):
    """Stock MetaSchedule search (evolutionary by default) that stops when the budget is spent.
    Only a baseline: it does nothing budget-aware beyond stopping."""

    def __init__(self, *, budget: str | float | TuningBudget, inner: str | SearchStrategy = "evolutionary"):
        self.budget = budget if isinstance(budget, TuningBudget) else TuningBudget(budget)
        self.inner = SearchStrategy.create(inner) if isinstance(inner, str) else inner

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        self.budget.start()
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if self.budget.exhausted:
            return None
        return self.inner.generate_measure_candidates()

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> SearchStrategy:
        return TimeCappedSearch(budget=self.budget, inner=self.inner.clone())


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
            None if (seconds := _mean_seconds(result)) is None else seconds * 1e3 for result in runner_results],
            task_id=int(task_id))

    def add(self, task: str, latencies_ms: list[float | None], task_id: int | None = None) -> None:
        """A measured batch (None: a failed candidate); also for kernels measured outside
        MetaSchedule (the Hopper template's variants, task_id None)."""
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
    return None if outcome is None else round(outcome.seconds, 4)


def _server(outcome) -> str | None:
    value = None if outcome is None else outcome.value
    return value.get("server") if isinstance(value, dict) else None


def _verdict(outcome) -> str | None:
    value = None if outcome is None else outcome.value
    return value.get("verdict") if isinstance(value, dict) else None


@derived_object
class KBTaskScheduler(PyTaskScheduler):
    """Splits one wall-clock budget across the tasks of a model by expected gain per second.

    Use with tune_tasks / tune_relax: `task_scheduler=KBTaskScheduler(budget=b)`, and give
    KBSearch the same TuningBudget `b` so that both count the same seconds. Bottleneck analysis
    first: `default_latency` (task name -> seconds per call of its default schedule, as
    `kb_tvm.model_tuning.profile_kernels` times them) lets trivial tasks keep their default
    schedule without a batch; without it every task gets one batch and trivial ones retire
    after it. The rest get batches by expected gain per second until the budget is spent (at
    most one batch over). `experience`: similar workloads tuned before say how fast each task
    is likely to improve, before it has a curve of its own.
    `stats` holds per task: seconds, trials, latency before/after, and why it retired;
    `earlier` takes the stats of an interrupted run of the same job, to resume it.
    `runner`: the tune's KBRunner. Where it measures on several devices (an RPC tracker's
    servers), up to that many tasks' batches are in flight at once: while one task's batch is
    timed, the next task's builds and then measures on the devices left free. A task's results
    are taken as its batch completes; MetaSchedule's loop allows that (its tasks are joined one by
    one), and with one device (or another runner) it is one batch at a time, as before.
    """

    def __init__(self, *, budget: str | float | TuningBudget, floor_share: float = 0.02,
                 min_gain_left: float = 0.005, on_event: Callable[[dict], None] | None = None,
                 earlier: list[allocation.TaskStats] | None = None,
                 default_latency: dict[str, float] | None = None,
                 experience: Experience | None = None, runner: KBRunner | None = None) -> None:
        _check("experience", experience, experience is None or isinstance(experience, Experience),
               "must be a kb_tvm.Experience or None")
        self.experience = experience
        _check("floor_share", floor_share, 0.0 <= floor_share < 1.0, "must be a fraction in [0, 1)")
        _check("min_gain_left", min_gain_left, 0.0 <= min_gain_left < 1.0, "must be a fraction in [0, 1)")
        # each task's search reads its own clock (TaskClock), which this scheduler keeps
        self.budget = (budget if isinstance(budget, TuningBudget) else TuningBudget(budget)).share_among_tasks()
        self.floor_share = floor_share
        self.min_gain_left = min_gain_left
        self.on_event = on_event
        self.stats: list[allocation.TaskStats] = []
        self.earlier = {t.name: t for t in earlier or []}  # a resumed job's tasks, by name
        self.default_latency = dict(default_latency or {})
        _check("runner", runner, runner is None or hasattr(runner, "latest_futures"), "must be a KBRunner or None")
        self.runner = runner
        self.handed_out: tuple[int, float, int] | None = None  # (task, when, the runner's batch count then)
        self.in_flight: dict[int, tuple[float, list | None]] = {}  # task -> (handed out at, its futures)

    def next_task_id(self) -> int:
        scheduler = self._outer()
        if not self.stats:
            self.budget.start()
            self.stats = [self.earlier.get(str(r.ctx.task_name)) or allocation.TaskStats(
                name=str(r.ctx.task_name), weight=float(r.task_weight), flop=float(r.flop),
                latency_default=self.default_latency.get(str(r.ctx.task_name))) for r in scheduler.tasks_]
            if self.experience is not None:
                self._borrow_curves(scheduler)
            for index, task in enumerate(self.stats):  # finished in an earlier run: not re-spent
                if task.retired is not None and not task.parked and not scheduler.tasks_[index].is_terminated:
                    scheduler.terminate_task(index)
        self._track_handed_out(scheduler)
        self._take_results(scheduler, wait=len(self.in_flight) >= self._parallel_batches())
        while True:
            for index, record in enumerate(scheduler.tasks_):
                if record.is_terminated and self.stats[index].retired is None:
                    self.stats[index].retired = "its search stopped"
                    self._emit("retire", task=self.stats[index].name, why="its search stopped")
            if self.budget.exhausted:
                return self._finish("budget spent")
            choice = allocation.choose_next(self.stats, default_batch_seconds=10.0,
                                            seconds_left=self.budget.remaining, floor_share=self.floor_share,
                                            min_gain_left=self.min_gain_left, busy=frozenset(self.in_flight))
            for index, why in choice.revived.items():
                self.stats[index].retired = None
                self.stats[index].revivals += 1
                self._emit("revive", task=self.stats[index].name, why=why)
            for index, why in choice.retired.items():
                self.stats[index].retired = why
                if not self.stats[index].parked:  # a trivial task may come back: its search stays
                    scheduler.terminate_task(index)
                self._emit("retire", task=self.stats[index].name, why=why)
            if choice.task is not None:
                break
            if not self.in_flight:
                return self._finish(choice.why)
            self._take_results(scheduler, wait=True)  # what the busy tasks bring may change the choice
        self._set_clocks()
        self._emit("allocate", task=self.stats[choice.task].name, why=choice.why,
                   budget_spent_s=self.budget.spent, budget_left_s=self.budget.remaining,
                   in_flight=[self.stats[t].name for t in self.in_flight])
        self.handed_out = (choice.task, time.monotonic(), self.runner.batches_run if self.runner else 0)
        return choice.task

    def _parallel_batches(self) -> int:
        return self.runner.devices if self.runner is not None else 1

    def _track_handed_out(self, scheduler) -> None:
        """The task handed out last time is in flight now, unless its search gave no batch
        (MetaSchedule then terminated it and ran nothing)."""
        if self.handed_out is None:
            return
        task, when, batches_before = self.handed_out
        self.handed_out = None
        if scheduler.tasks_[task].is_terminated:
            return
        futures = None
        if self.runner is not None:
            if self.runner.batches_run == batches_before:
                return
            futures = self.runner.latest_futures
        self.in_flight[task] = (when, futures)

    def _take_results(self, scheduler, *, wait: bool) -> None:
        """Join every in-flight batch that is complete; with `wait`, first wait until one is.
        Batches whose futures this scheduler cannot see are joined (waiting) in turn."""
        while True:
            done = [t for t, (_, futures) in self.in_flight.items()
                    if futures is None or all(f.done() for f in futures)]
            if done or not wait or not self.in_flight:
                break
            time.sleep(0.01)
        for task in done:
            handed_out, _ = self.in_flight.pop(task)
            # MetaSchedule's own join (not overridden: a Python override could not call it)
            results = scheduler.join_running_task(task)
            latencies = [s for s in (_mean_seconds(r) for r in results) if s is not None]
            self.stats[task].record_batch(time.monotonic() - handed_out, len(results),
                                          min(latencies) if latencies else None)

    def _set_clocks(self) -> None:
        """Each live task is expected to get the job's seconds in proportion to its share of
        model time now (Amdahl); its search paces its phases on that, not on the job's clock."""
        shares = allocation.expected_shares(self.stats)
        for task, share in zip(self.stats, shares):
            self.budget.task(task.name).charge(task.seconds, max(share * self.budget.total, task.seconds))

    def _borrow_curves(self, scheduler) -> None:
        for record, task in zip(scheduler.tasks_, self.stats):
            if task.borrowed_improvements:
                continue  # resumed: borrowed in the first run
            try:
                summary = warm_start.workload_summary(record.ctx.mod, task.name)
                near = self.experience.nearest(summary, target_kind=record.ctx.target.kind.name,
                                               mcpu=warm_start.target_mcpu(record.ctx.target))
            except Exception as err:  # noqa: BLE001 - a library problem must not stop tuning
                self._emit("borrow-failed", task=task.name, error=f"{type(err).__name__}: {err}"[:300])
                continue
            task.borrowed_improvements = [allocation.improvement_curve(e.trajectory) for _, e in near]
            if near:
                self._emit("borrowed", task=task.name, entries=[e.id for _, e in near],
                           curves=task.borrowed_improvements)

    def _finish(self, why: str) -> int:
        scheduler = self._outer()
        self._track_handed_out(scheduler)
        while self.in_flight:  # every measured candidate reaches the database and the callbacks
            self._take_results(scheduler, wait=True)
        for index, record in enumerate(scheduler.tasks_):
            if not record.is_terminated:
                scheduler.terminate_task(index)
        self._emit("finish", why=why, budget_spent_s=self.budget.spent,
                   tasks=[vars(t) for t in self.stats])
        return -1  # MetaSchedule's "no task left"

    def _emit(self, event: str, **fields) -> None:
        if self.on_event is not None:
            self.on_event({"event": event, **fields})


@derived_object
class KBBuilder(PyBuilder):
    """Builds candidates in persistent worker processes (TVM imported once per worker, recycled
    after `builds_per_worker` builds), each with its own timeout, to loadable shared libraries
    (nothing is linked per candidate at run time; KBRunner and LocalRunner both load them).
    `stream_to`: a KBRunner that starts timing each candidate as soon as it is built, while the
    rest of the batch still builds (worth it where builds and measurements use different
    hardware, i.e. on a GPU; on a CPU they would share cores and disturb the timings)."""

    def __init__(self, *, workers: int, timeout_s: float = 30.0, builds_per_worker: int = 256,
                 stream_to: KBRunner | None = None) -> None:
        super().__init__()
        _check("stream_to", stream_to, stream_to is None or hasattr(stream_to, "prefetch"),
               "must be a KBRunner or None")
        self.pool = BuildPool(workers_count=workers, timeout_s=timeout_s, builds_per_worker=builds_per_worker)
        self.stream_to = stream_to
        self.last_batch: list = []  # the last batch's Outcomes: seconds and worker per candidate
        # each result's Outcome until the candidate log takes it: with several tasks' batches in
        # flight, the batch joined is not always the last one built
        self.outcomes: dict = {}
        self.cuda_compiler: tuple[str, str] | None = None  # (compiler, why), said once

    def build(self, build_inputs):
        if self.cuda_compiler is None and any(b.target.kind.name == "cuda" for b in build_inputs):
            self.cuda_compiler = cuda_compiler()  # the workers decide the same way
            logging.getLogger("kb_tvm").warning("CUDA kernels compile with %s: %s", *self.cuda_compiler)
        on_built = None
        if self.stream_to is not None:
            self.stream_to.forget_prefetched()  # a batch MetaSchedule never ran

            def on_built(index: int, outcome) -> None:
                if outcome.error is None:
                    signature = argument_signature(built_arguments(build_inputs[index].mod))
                    self.stream_to.prefetch(outcome.value, signature)

        self.last_batch = self.pool.build([(b.mod, b.target) for b in build_inputs], on_built)
        results = [BuilderResult(o.value, None) if o.error is None else BuilderResult(None, o.error)
                   for o in self.last_batch]
        self.outcomes.update(zip(results, self.last_batch))  # TVM objects hash by identity
        return results

    def outcome_of(self, result):
        """The Outcome (seconds, worker) of a BuilderResult this builder returned, once."""
        return self.outcomes.pop(result, None)

    def close(self) -> None:
        self.pool.close()


@derived_object
class KBRunner(PyRunner):
    """Times built candidates in one persistent measuring process for `device` ("cpu" or "cuda",
    index `device_id`), or, given `tracker` (HOST:PORT) and `key`, on every server registered
    there (`measure/remote.py`): arguments allocated once per task, repeats adapted to the latency under
    `policy`, a median per candidate (one record each), and candidates 3x slower than the best
    stopped early (recorded as measured, not failed). A candidate that crashes or hangs fails
    alone: the process is restarted and the tune goes on. `run` returns at once; its futures
    resolve as the candidates are timed, one after another."""

    def __init__(self, *, device: str = "cpu", device_id: int = 0, policy: TimingPolicy | None = None,
                 timeout_s: float = 60.0, tracker: str | None = None, key: str | None = None) -> None:
        super().__init__()
        _check("device", device, device in ("cpu", "cuda"), 'must be "cpu" or "cuda"')
        _check("key", key, (tracker is None) == (key is None), "goes with tracker (HOST:PORT), both or neither")
        if tracker is not None:  # every server under the key at a TVM RPC tracker (raises TrackerError)
            self.measurer = RemoteMeasurer(tracker=tracker, key=key, device_type=device, policy=policy,
                                           hang_s=timeout_s)
        else:
            self.measurer = Measurer(device_type=device, device_id=device_id, policy=policy, timeout_s=timeout_s)
        self._batch: list = []  # the last batch's measurement futures
        self.batches_run = 0
        self._by_artifact: dict[str, object] = {}  # artifact -> its measurement future, until taken
        self._prefetched: dict[str, tuple[tuple, object]] = {}  # artifact -> (signature, future)
        # start the measuring process now: the first batch should not pay TVM's import
        self.measurer.start()

    def prefetch(self, artifact: str, signature: tuple) -> None:
        """Start timing a candidate before `run` asks for it (KBBuilder's streaming)."""
        self._prefetched[artifact] = (signature, self.measurer.submit(artifact, signature))

    def forget_prefetched(self) -> None:
        self._prefetched.clear()

    def run(self, runner_inputs):
        self._batch = []
        for r in runner_inputs:
            artifact, signature = str(r.artifact_path), argument_signature(r.args_info)
            started = self._prefetched.pop(artifact, None)
            if started is not None and started[0] == signature:
                self._batch.append(started[1])
            else:
                self._batch.append(self.measurer.submit(artifact, signature))
            self._by_artifact[artifact] = self._batch[-1]
        self.batches_run += 1
        return [_MeasurementFuture(future) for future in self._batch]

    @property
    def devices(self) -> int:
        """How many devices measure at once: the servers held, or this machine's one."""
        return max(1, self.measurer.live) if isinstance(self.measurer, RemoteMeasurer) else 1

    @property
    def latest_futures(self) -> list:
        """The measurement futures of the batch `run` started last."""
        return list(self._batch)

    @property
    def last_batch(self) -> list:
        """The last batch's Outcomes (waits for them): the worker's report per candidate."""
        return [future.result() for future in self._batch]

    def outcome_of(self, artifact: str):
        """The Outcome (seconds, report, server) of the candidate built to `artifact`, once."""
        future = self._by_artifact.pop(str(artifact), None)
        return None if future is None else future.result()

    def close(self) -> None:
        self.measurer.close()


@derived_object
class _MeasurementFuture(PyRunnerFuture):
    """A candidate being timed by KBRunner's measuring thread, as MetaSchedule's RunnerFuture."""

    def __init__(self, future) -> None:
        super().__init__()
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    def result(self):
        outcome = self.future.result()
        if outcome.error is not None:
            return RunnerResult(run_secs=None, error_msg=outcome.error)
        return RunnerResult(run_secs=[outcome.value["median_s"]], error_msg=None)


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
        _RECORD_DATABASES.add(self)  # MetaSchedule hands strategies a bare handle: find the folder

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


_RECORD_DATABASES: weakref.WeakSet = weakref.WeakSet()


def _workload_key(workload) -> int:
    """The workload's structural hash: the number JSONDatabase writes first in its workload line."""
    from tvm_ffi import structural_hash

    return int(structural_hash(workload.mod))


def _sketches(family, mod, attempts: int = 3) -> list:
    """A family's sketches, or none. TVM 0.27's rules can fail on a random compute location
    (seen: "not a stage pipeline" on a ResNet-50 conv + relu, which ended a stock run); the
    context's random state moves on, so another attempt draws again."""
    for attempt in range(attempts):
        try:
            return list(family.generate_design_space(mod))
        except ScheduleError as err:
            logging.getLogger("kb_tvm").warning("design space attempt %d of %d failed: %s", attempt + 1,
                                                attempts, str(err).strip().splitlines()[0])
    return []


@derived_object
class TensorCoreSpace(PySpaceGenerator):
    """DefaultCUDATensorCore's sketches, plus bf16 WMMA, plus the WMMA sketches again with
    software-pipelined shared-memory loads (TVM's WMMA rule has the pipeline off, so no stock
    sketch overlaps loads with math on fp16/bf16 GEMMs); bf16 staging gets the padding the
    C++ rule gives fp16 only. Stock searches use it too, so that side-by-side runs compare
    searches over one space."""

    def __init__(self):
        self._families = [PostOrderApply(sch_rules=tensor_core_rules(software_pipeline=pipelined),
                                         postprocs="cuda-tensorcore", mutator_probs="cuda-tensorcore")
                          for pipelined in (False, True)]
        # the first family's objects, so that initializing it initializes these
        # (PySpaceGenerator's own initialization leaves its fields alone)
        self.sch_rules = list(self._families[0].sch_rules)
        self.postprocs = list(self._families[0].postprocs)
        self.mutator_probs = dict(self._families[0].mutator_probs)

    def _initialize_with_tune_context(self, context) -> None:
        for family in self._families:
            family._initialize_with_tune_context(context)

    def generate_design_space(self, mod):
        unpipelined, pipelined = (_sketches(family, mod) for family in self._families)
        if not unpipelined and not pipelined:
            raise ScheduleError("no tensor-core design space: every attempt of both sketch families failed")
        # the pipelined family differs only where a WMMA rule applied: a model's other tasks
        # (layer norm, softmax, casts) would get every sketch twice
        spaces = list(unpipelined) + [sch for sch in pipelined if "wmma" in str(sch.trace)]
        for sch in spaces:
            align_bf16_staging(sch)
        return spaces

    def clone(self):
        return TensorCoreSpace()
