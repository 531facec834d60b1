"""A model's tuning replayed: its tasks on one clock, each answered from its own dataset, and an
allocation policy that decides which task gets the next batch. A policy is judged by the model's
latency over time: the sum over tasks of weight x the best latency the task has so far (its
default schedule's until tuning beats it).

Each task runs kb's search (the rules, as KBTaskScheduler runs it) on its dataset, one batch
each time the allocation gives it one, on the model's clock: its budget is the job's, so that
its exploration follows the seconds the whole job has left, as in a real run. A task whose
search stops (its dataset spent, or its own stop rule) gets no more.

Plain Python: `allocation.choose_next` (KBTaskScheduler's rule) is the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..allocation import TaskStats, apply_choice, choose_next
from .dataset import Dataset
from .env import Clock, ReplayEnv


@dataclass(frozen=True)
class Batch:
    seconds: float  # what it cost on the model's clock
    trials: int
    best_s: float | None  # the task's best after it (None: nothing valid yet)


class Scripted:
    """A task whose batches are given (tests, what-ifs): each moves the clock by its seconds."""

    def __init__(self, batches: list[Batch], clock: Clock) -> None:
        self.batches, self.clock = list(batches), clock
        bests = [b.best_s for b in self.batches if b.best_s is not None]
        self.best_s = min(bests) if bests else None  # of all its batches, those to come and those given

    def step(self, trials: int | None = None) -> Batch | None:
        if not self.batches:
            return None
        batch = self.batches.pop(0)
        self.clock.seconds += batch.seconds
        return batch


class Searched:
    """A task whose batches come from kb's search (or `policy`'s, a replay policy with a
    `search`) on its dataset, on the model's clock with the model's budget."""

    def __init__(self, dataset: Dataset, *, clock: Clock, budget_s: float, seed: int, policy=None) -> None:
        from .policies import RulesPolicy

        self.env = ReplayEnv(dataset, budget=budget_s, clock=clock)
        self.search = (policy or RulesPolicy()).search(self.env, seed=seed)

    @property
    def best_s(self) -> float | None:
        return self.env.dataset.best_latency_s

    def step(self, trials: int | None = None) -> Batch | None:
        """One batch of the search (of at most `trials` candidates where given)."""
        plan = self.search.plan
        usual, plan.trials_per_batch = plan.trials_per_batch, trials or plan.trials_per_batch
        try:
            batch = self.search.next_batch()
        finally:
            plan.trials_per_batch = usual
        if batch is None:
            return None
        seconds_before = self.env.seconds
        outcomes = self.env.measure([c.sch for c in batch])
        self.search.observe([(o.latency_s, o.error) for o in outcomes])
        best = None if math.isinf(self.env.best_s) else self.env.best_s
        return Batch(self.env.seconds - seconds_before, len(batch), best)


@dataclass(frozen=True)
class ModelTask:
    """A task of the model: its weight (calls per model run), its default schedule's latency
    (the untuned build's) and where its batches come from (`Scripted` or `Searched`)."""

    name: str
    weight: float
    default_s: float
    source: Scripted | Searched

    def __post_init__(self) -> None:
        if not (self.weight > 0 and self.default_s > 0):
            raise ValueError(f"task {self.name!r}: weight={self.weight!r}, default_s={self.default_s!r}: "
                             f"both must be positive")


# an allocator: (task statistics, seconds left, seconds in all) -> the index of the task that
# gets the next batch (or (index, candidates in that batch)), or None to stop; it may retire
# tasks on their statistics as it goes
Allocator = Callable[[list[TaskStats], float, float], "int | tuple[int, int] | None"]


def kb_rule(tasks: list[TaskStats], seconds_left: float, seconds_total: float) -> int | None:
    """KBTaskScheduler's choice (`allocation.choose_next`), its retirements applied."""
    choice = choose_next(tasks, seconds_left=seconds_left, seconds_total=seconds_total)
    apply_choice(tasks, choice)
    return choice.task


def round_robin(tasks: list[TaskStats], seconds_left: float, seconds_total: float) -> int | None:
    """Each live task in turn, the fewest batches first."""
    live = [i for i, t in enumerate(tasks) if t.retired is None]
    return min(live, key=lambda i: (tasks[i].batches, i)) if live else None


def largest_share(tasks: list[TaskStats], seconds_left: float, seconds_total: float) -> int | None:
    """The live task with the most model time now (weight x its best so far)."""
    live = [i for i, t in enumerate(tasks) if t.retired is None]
    return max(live, key=lambda i: tasks[i].model_seconds) if live else None


def small_first_batches(trials: int = 4) -> Allocator:
    """KBTaskScheduler's choice, but a task's first batch has `trials` candidates: every task
    leaves its default schedule sooner, each with less to rank its regions by."""

    def allocate(tasks: list[TaskStats], seconds_left: float, seconds_total: float):
        pick = kb_rule(tasks, seconds_left, seconds_total)
        return pick if pick is None or tasks[pick].batches else (pick, trials)

    return allocate


ALLOCATORS: dict[str, Allocator] = {"rule": kb_rule, "round_robin": round_robin, "largest_share": largest_share,
                                    "small_first_batches": small_first_batches()}


@dataclass
class ModelRun:
    """One allocation's replay: the model's latency after each batch."""

    budget_s: float
    best_possible_s: float  # every task at its dataset's best (its default where that is faster)
    curve: list[tuple[float, float]] = field(default_factory=list)  # (seconds, model latency s)
    choices: list[str] = field(default_factory=list)  # the task of each batch
    trials: list[int] = field(default_factory=list)  # the candidates of each batch

    def latency_at(self, seconds: float) -> float:
        """The model's latency at `seconds` (before any batch: every default schedule)."""
        latency = self.curve[0][1]
        for t, value in self.curve:
            if t > seconds:
                break
            latency = value
        return latency

    def mean_latency(self) -> float:
        """The model's latency averaged over the budget's seconds."""
        area, (last_t, last_v) = 0.0, self.curve[0]
        for t, value in self.curve[1:]:
            t = min(t, self.budget_s)
            area += last_v * (t - last_t)
            last_t, last_v = t, value
        area += last_v * max(0.0, self.budget_s - last_t)
        return area / self.budget_s

    def summary(self) -> dict:
        at = {f"{q:.0%}": self.latency_at(q * self.budget_s) * 1e3 for q in (0.1, 0.25, 0.5, 1.0)}
        return {"budget_s": self.budget_s, "best_possible_ms": self.best_possible_s * 1e3, "latency_ms_at": at,
                "mean_latency_ms": self.mean_latency() * 1e3, "batches": len(self.choices)}


def replay_model(tasks: list[ModelTask], allocator: Allocator, *, budget_s: float, clock: Clock) -> ModelRun:
    """Give the tasks batches as `allocator` chooses until the budget is spent on `clock` (the
    one the tasks' sources share), the allocator stops, or no task has a batch left."""
    if budget_s <= 0:
        raise ValueError(f"budget_s={budget_s!r}: must be positive")
    stats = [TaskStats(name=t.name, weight=t.weight, flop=0.0, latency_default=t.default_s) for t in tasks]
    best_possible = sum(t.weight * min(t.default_s, t.source.best_s or math.inf) for t in tasks)
    run = ModelRun(budget_s=budget_s, best_possible_s=best_possible)
    run.curve.append((clock.seconds, _model_latency(stats)))
    while clock.seconds < budget_s:
        pick = allocator(stats, budget_s - clock.seconds, budget_s)
        if pick is None:
            break
        pick, trials = pick if isinstance(pick, tuple) else (pick, None)
        if stats[pick].retired is not None:
            raise ValueError(f"the allocator chose {tasks[pick].name!r}, which is retired ({stats[pick].retired})")
        batch = tasks[pick].source.step(trials)
        if batch is None:  # for good: not parked, so no rule revives it
            stats[pick].retired, stats[pick].parked = "its search stopped", False
            continue
        stats[pick].record_batch(batch.seconds, batch.trials, batch.best_s)
        run.choices.append(tasks[pick].name)
        run.trials.append(batch.trials)
        run.curve.append((clock.seconds, _model_latency(stats)))
    return run


def _model_latency(stats: list[TaskStats]) -> float:
    return sum(t.model_seconds for t in stats)


def load_model(spec: dict, folders=()) -> list[tuple[Dataset, float, float]]:
    """A model of a models file (datasets/models.json: its "tasks", each a dataset name, a weight
    and default_ms): (dataset, weight, default seconds) per task."""
    from .catalog import load

    return [(load(task["dataset"], folders)[1], float(task["weight"]), task["default_ms"] / 1e3)
            for task in spec["tasks"]]


def model_tasks(model: list[tuple[Dataset, float, float]], *, budget_s: float, seed: int,
                policy=None) -> tuple[list[ModelTask], Clock]:
    """A fresh replay of a loaded model (`load_model`): its tasks, each searching its dataset,
    and the clock they share."""
    clock = Clock()
    return [ModelTask(name=data.task, weight=weight, default_s=default_s,
                      source=Searched(data, clock=clock, budget_s=budget_s, seed=seed, policy=policy))
            for data, weight, default_s in model], clock
