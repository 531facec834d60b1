"""The search strategies: `KBSearch`, the budget-aware coarse-to-fine search (its logic is the rest
of `search/`: planner, candidate factory, phases), and `TimeCappedSearch`, stock MetaSchedule's
search stopped when a wall budget is spent (the baseline of side-by-side runs)."""

from __future__ import annotations

import os
from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy, SearchStrategy

from .. import warm_start
from ..arguments import check_option
from ..budget import TuningBudget
from ..decision_log import DecisionLog, earlier_events
from ..experience import Experience
from ..measure.database import RECORD_DATABASES
from ..measure.records import mean_seconds, record_latency
from ..measure.targets import register_tensor_intrinsics
from ..templates import load_templates
from .candidates import FEATURE_VERSION, CandidateFactory
from .options import validated_options
from .task import TaskSearch


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
    outside MetaSchedule's space (a kernel family's kernel); its search spends seconds only
    where it expects to beat them. `outside_names`: task name -> what found that kernel (the
    family's name), the name of its region in the decision log. `build_workers`: the builds the
    builder runs at once (kb's tunes set it from their builder; None: one per core), so that
    first batches are whole rounds of them. Other options: `SearchOptions`.
    """

    def __init__(self, *, budget: str | float | TuningBudget, templates_dir: str | None = None,
                 log_dir: str | None = None, on_event: Callable[[dict], None] | None = None,
                 experience: Experience | None = None, agent=None,
                 outside_best: dict[str, float] | None = None, outside_names: dict[str, str] | None = None,
                 build_workers: int | None = None, **options) -> None:
        check_option("experience", experience, experience is None or isinstance(experience, Experience),
                     "must be a kb_tvm.Experience or None")
        # the agent wing sits above the search: asked for by what it does (a task -> a macro-action), not imported
        check_option("agent", agent, agent is None or callable(agent),
                     "must be a kb_tvm.agent.MacroPolicy (a callable: task -> macro-action) or None")
        check_option("outside_best", outside_best, outside_best is None or (isinstance(outside_best, dict) and all(
            isinstance(v, (int, float)) and v > 0 for v in outside_best.values())),
                     "must map task names to seconds > 0, or be None")
        self.outside_best = dict(outside_best or {})
        self.outside_names = dict(outside_names or {})
        check_option("build_workers", build_workers,
                     build_workers is None or (isinstance(build_workers, int) and build_workers >= 1),
                     "must be an integer >= 1, or None")
        self.build_workers = build_workers
        self.experience = experience
        self.agent = agent
        self.budget = budget if isinstance(budget, TuningBudget) else TuningBudget(budget)
        self.options = validated_options(**options)
        self.templates_dir = templates_dir
        self.log_dir = log_dir
        self.on_event = on_event
        self.context = None
        self.task: TaskSearch | None = None
        register_tensor_intrinsics()  # before MetaSchedule's first TuneContext, which takes 10x as long

    def _initialize_with_tune_context(self, context) -> None:
        self.context = context

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None):
        target_kind = self.context.target.kind.name
        templates = load_templates(target_kind, self.templates_dir)
        log_dir = self.log_dir
        if log_dir is None:
            # a database whose TVM object is gone (an earlier tune's, not yet collected) is no candidate
            path = getattr(database, "path_workload", None) or next(
                (d.path_workload for d in list(RECORD_DATABASES)
                 if (outer := d._outer()) is not None and outer.same_as(database)), None)
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
            options = validated_options(**{**vars(options), "seed": int(self.context.rand_state)})
        check_option("repeatable", options.repeatable, options.seed is not None or not options.repeatable,
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
                               prior=prior, steer=self.agent, outside_best_s=self.outside_best.get(task_name),
                               outside_name=self.outside_names.get(task_name), build_workers=self.build_workers)
        log.write("start", task=self.context.task_name, target=str(self.context.target.export()),
                  budget_s=self.budget.total, budget_spent_s=self.budget.spent, max_trials=int(max_trials),
                  trials_per_batch=int(num_trials_per_iter), build_workers=self.task.plan.build_workers,
                  design_spaces=len(design_spaces),
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
        self.task.observe([(mean_seconds(r), _result_error(r)) for r in results])

    def clone(self) -> SearchStrategy:
        # clones (one per task) share the budget: it counts seconds of the whole job
        return KBSearch(budget=self.budget, templates_dir=self.templates_dir, log_dir=self.log_dir,
                        on_event=self.on_event, experience=self.experience, agent=self.agent,
                        outside_best=self.outside_best, outside_names=self.outside_names,
                        build_workers=self.build_workers, **vars(self.options))


@derived_object
class TimeCappedSearch(PySearchStrategy):
    """Stock MetaSchedule search (evolutionary by default) that stops when the budget is spent.
    Only a baseline: it does nothing budget-aware beyond stopping."""

    def __init__(self, *, budget: str | float | TuningBudget, inner: str | SearchStrategy = "evolutionary"):
        self.budget = budget if isinstance(budget, TuningBudget) else TuningBudget(budget)
        self.inner = SearchStrategy.create(inner) if isinstance(inner, str) else inner
        register_tensor_intrinsics()

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
