"""A model's tuning replayed: its tasks on one clock, each answered from its own dataset, and an
allocation policy that decides which task gets the next batch. A policy is judged by the model's
latency over time: the sum over tasks of weight x the best latency the task has so far (its
default schedule's until tuning beats it).

Each task's search is replayed once per seed on its dataset with the whole model budget (kb's
rules, as KBTaskScheduler runs it: the search sees the job's budget), giving its batches in
order: what each cost and the best after it. An allocation then deals those batches out: giving
a task its next batch moves the clock by that batch's recorded cost. A task whose batches are
all dealt (its dataset spent, or its search stopped itself) gets no more. Known bias: a task's
search runs as if it had every batch from the start, so its exploration schedule does not see
the seconds other tasks took.

Plain Python: `allocation.choose_next` (KBTaskScheduler's rule) is the baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..allocation import TaskStats, apply_choice, choose_next
from .dataset import Dataset
from .env import ReplayEnv


@dataclass(frozen=True)
class Batch:
    seconds: float  # what it cost on the replay's clock
    trials: int
    best_s: float | None  # the task's best after it (None: nothing valid yet)


@dataclass(frozen=True)
class ModelTask:
    """A task of the model: its weight (calls per model run), its default schedule's latency
    (the untuned build's) and its search's batches, in order."""

    name: str
    weight: float
    default_s: float
    batches: tuple[Batch, ...]

    def __post_init__(self) -> None:
        if not (self.weight > 0 and self.default_s > 0):
            raise ValueError(f"task {self.name!r}: weight={self.weight!r}, default_s={self.default_s!r}: "
                             f"both must be positive")


def search_batches(dataset: Dataset, *, budget_s: float, seed: int, policy=None) -> tuple[Batch, ...]:
    """The batches of one task's search (`policy`: a replay policy, kb's rules by default) on
    its dataset, with `budget_s` to spend."""
    from .policies import RulesPolicy

    env = ReplayEnv(dataset, budget=budget_s)
    (policy or RulesPolicy()).run(env, seed=seed)
    batches, seconds, trials = [], 0.0, 0
    for point in env.curve:
        best = point["best_ms"]
        batches.append(Batch(point["seconds"] - seconds, point["trials"] - trials,
                             None if best is None else best / 1e3))
        seconds, trials = point["seconds"], point["trials"]
    return tuple(batches)


# an allocator: (task statistics, seconds left, seconds in all) -> the index of the task that
# gets the next batch, or None to stop; it may retire tasks on their statistics as it goes
Allocator = Callable[[list[TaskStats], float, float], "int | None"]


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


ALLOCATORS: dict[str, Allocator] = {"rule": kb_rule, "round_robin": round_robin, "largest_share": largest_share}


@dataclass
class ModelRun:
    """One allocation's replay: the model's latency after each batch."""

    budget_s: float
    best_possible_s: float  # every task at its best batch's latency
    curve: list[tuple[float, float]] = field(default_factory=list)  # (seconds, model latency s)
    choices: list[str] = field(default_factory=list)

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
        return {"budget_s": self.budget_s, "best_possible_ms": self.best_possible_s * 1e3,
                "latency_ms_at": {f"{q:.0%}": self.latency_at(q * self.budget_s) * 1e3 for q in (0.1, 0.25, 0.5, 1.0)},
                "mean_latency_ms": self.mean_latency() * 1e3, "batches": len(self.choices)}


def replay_model(tasks: list[ModelTask], allocator: Allocator, *, budget_s: float) -> ModelRun:
    """Deal the tasks' batches out as `allocator` chooses until the budget is spent, the
    allocator stops, or no task has a batch left."""
    if budget_s <= 0:
        raise ValueError(f"budget_s={budget_s!r}: must be positive")
    stats = [TaskStats(name=t.name, weight=t.weight, flop=0.0, latency_default=t.default_s) for t in tasks]
    dealt = [0] * len(tasks)
    best_possible = sum(t.weight * min([t.default_s] + [b.best_s for b in t.batches if b.best_s is not None])
                        for t in tasks)
    run = ModelRun(budget_s=budget_s, best_possible_s=best_possible)
    clock = 0.0
    run.curve.append((clock, _model_latency(stats)))
    while clock < budget_s:
        for i, task in enumerate(tasks):
            if dealt[i] == len(task.batches):  # for good: not parked, so no rule revives it
                stats[i].retired, stats[i].parked = stats[i].retired or "its recorded search ended", False
        pick = allocator(stats, budget_s - clock, budget_s)
        if pick is None:
            break
        if stats[pick].retired is not None or dealt[pick] == len(tasks[pick].batches):
            raise ValueError(f"the allocator chose {tasks[pick].name!r}, which has no batch left")
        batch = tasks[pick].batches[dealt[pick]]
        dealt[pick] += 1
        clock += batch.seconds
        stats[pick].record_batch(batch.seconds, batch.trials, batch.best_s)
        run.choices.append(tasks[pick].name)
        run.curve.append((clock, _model_latency(stats)))
    return run


def _model_latency(stats: list[TaskStats]) -> float:
    return sum(t.model_seconds for t in stats)


def model_tasks(spec: dict, *, budget_s: float, seed: int, folders=(), policy=None) -> list[ModelTask]:
    """A model of a models file (datasets/models.json: its "tasks", each a dataset name, a weight
    and default_ms) with each task's batches replayed at `seed`."""
    from .catalog import load

    out = []
    for task in spec["tasks"]:
        _, dataset = load(task["dataset"], folders)
        out.append(ModelTask(name=dataset.task, weight=float(task["weight"]), default_s=task["default_ms"] / 1e3,
                             batches=search_batches(dataset, budget_s=budget_s, seed=seed, policy=policy)))
    return out
