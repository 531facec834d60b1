"""`KBTaskScheduler`: splits one wall-clock budget across a model's tasks (its policy, plain
Python, is `allocation.py`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

from .. import allocation, warm_start
from ..arguments import check_option
from ..budget import TuningBudget
from ..experience import Experience
from ..measure.records import mean_seconds
from ..measure.targets import register_tensor_intrinsics

if TYPE_CHECKING:
    from ..measure.runner import KBRunner


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
    `ceilings` (task name -> the least seconds per call the machine allows, `measure.ceiling`):
    a task far below its ceiling is not retired for its pace while a tenth of the budget is
    left; `ceiling_source` says in the decision log which ceiling that was. Without them, the
    host's ceiling on CPU targets (`measure.ceiling.host_ceiling`); `use_ceiling=False`: none.
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
                 experience: Experience | None = None, runner: KBRunner | None = None,
                 ceilings: dict[str, float] | None = None, ceiling_source: str | None = None,
                 use_ceiling: bool = True) -> None:
        check_option("experience", experience, experience is None or isinstance(experience, Experience),
                     "must be a kb_tvm.Experience or None")
        self.experience = experience
        check_option("floor_share", floor_share, 0.0 <= floor_share < 1.0, "must be a fraction in [0, 1)")
        check_option("min_gain_left", min_gain_left, 0.0 <= min_gain_left < 1.0, "must be a fraction in [0, 1)")
        # each task's search reads its own clock (TaskClock), which this scheduler keeps
        self.budget = (budget if isinstance(budget, TuningBudget) else TuningBudget(budget)).share_among_tasks()
        self.floor_share = floor_share
        self.min_gain_left = min_gain_left
        self.on_event = on_event
        self.stats: list[allocation.TaskStats] = []
        self.earlier = {t.name: t for t in earlier or []}  # a resumed job's tasks, by name
        self.default_latency = dict(default_latency or {})
        self.ceilings = dict(ceilings) if ceilings is not None else None  # None: the host's, at the start
        self.ceiling_source = ceiling_source
        self.use_ceiling = use_ceiling
        self.held: set[str] = set()  # tasks held once already: each hold is logged once
        check_option("runner", runner, runner is None or hasattr(runner, "latest_futures"),
                     "must be a KBRunner or None")
        self.runner = runner
        self.handed_out: tuple[int, float, int] | None = None  # (task, when, the runner's batch count then)
        self.in_flight: dict[int, tuple[float, list | None]] = {}  # task -> (handed out at, its futures)
        register_tensor_intrinsics()  # before MetaSchedule's first TuneContext, which takes 10x as long

    def next_task_id(self) -> int:
        scheduler = self._outer()
        if not self.stats:
            self.budget.start()
            self.stats = [self.earlier.get(str(r.ctx.task_name)) or allocation.TaskStats(
                name=str(r.ctx.task_name), weight=float(r.task_weight), flop=float(r.flop),
                latency_default=self.default_latency.get(str(r.ctx.task_name))) for r in scheduler.tasks_]
            if self.experience is not None:
                self._borrow_curves(scheduler)
            if self.use_ceiling and self.ceilings is None:
                self._host_ceilings(scheduler)
            for task in self.stats:
                task.ceiling_s = (self.ceilings or {}).get(task.name) if self.use_ceiling else None
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
            choice = allocation.choose_next(self.stats, seconds_left=self.budget.remaining,
                                            floor_share=self.floor_share, min_gain_left=self.min_gain_left,
                                            busy=frozenset(self.in_flight), seconds_total=self.budget.total)
            allocation.apply_choice(self.stats, choice)
            for index, why in choice.held.items():
                name = self.stats[index].name
                if name not in self.held:
                    self._emit("hold", task=name, why=why, ceiling=self.ceiling_source,
                               ceiling_ms=self.stats[index].ceiling_s * 1e3)
                self.held.add(name)
            for index, why in choice.revived.items():
                self._emit("revive", task=self.stats[index].name, why=why)
            for index, why in choice.retired.items():
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
            latencies = [s for s in (mean_seconds(r) for r in results) if s is not None]
            self.stats[task].record_batch(time.monotonic() - handed_out, len(results),
                                          min(latencies) if latencies else None)

    def _set_clocks(self) -> None:
        """Each live task is expected to get the job's seconds in proportion to its share of
        model time now (Amdahl); its search paces its phases on that, not on the job's clock."""
        shares = allocation.expected_shares(self.stats)
        for task, share in zip(self.stats, shares):
            self.budget.task(task.name).charge(task.seconds, max(share * self.budget.total, task.seconds))

    def _host_ceilings(self, scheduler) -> None:
        from ..measure.ceiling import host_ceiling, task_ceilings

        targets = {r.ctx.target.kind.name for r in scheduler.tasks_}
        ceiling = host_ceiling(scheduler.tasks_[0].ctx.target) if targets == {"llvm"} else None
        self.ceilings = task_ceilings(ceiling, {str(r.ctx.task_name): r.ctx.mod for r in scheduler.tasks_})
        self.ceiling_source = ceiling and ceiling.describe()

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
