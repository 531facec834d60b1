"""How KBTaskScheduler splits one wall-clock budget across a model's tasks. Plain Python.

Each task is worth weight x latency (its share of model time). Bottleneck analysis first: the
latency of each task's default schedule (timed in the untuned build) gives its share before
any tuning; trivial tasks keep the default schedule (their floor) and get no batch, the rest
get a first batch each, hottest first. Without those timings, the first batch of every task
gives the latencies and trivial tasks retire after it. After that the next batch goes to the
task with the highest expected gain per second:

    weight x latency x predicted relative improvement of its next batch / predicted seconds

where the predicted improvement blends the search's own recent improvements with what similar
tasks' searches gained at the same point: tasks of the model (a similarity graph, networkx) and
similar workloads tuned before (the experience library). A search behind the latency the model
runs now (a default schedule or a kernel family's kernel) gains the model only what falls
below it: its rate is that of catching up, over the batches it would take (catch_up_gain).

Shares are re-computed from every task's current best latency before each choice (Amdahl): a
task retired as trivial comes back when the others have got fast enough that it is not.

The pace of a search alone does not say how far a kernel is from what the machine can do: a
task whose best is below half its ceiling (the least time the machine's peak FLOP/s and
bandwidth allow, `measure.ceiling`) is not retired for its pace while more than a tenth of the
budget is left; it is held, and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import networkx as nx

# what a batch is taken to cost a task that never ran one (revived before its first batch):
# about one batch of 16 candidates on a CPU
UNTIMED_BATCH_SECONDS = 10.0
TRIVIAL = "trivial"  # how a retirement by share of model time reads (revocable: `parked`)


@dataclass
class TaskStats:
    name: str
    weight: float  # calls per model run
    flop: float
    seconds: float = 0.0
    trials: int = 0
    latency_default: float | None = None  # its default schedule (untuned build), seconds
    latency_before: float | None = None  # default schedule, else best of the first batch, seconds
    latency: float | None = None  # best so far (a tuned record or the default), seconds
    # relative gain of the search's own best in each batch after the first (the model gains
    # only what falls below `latency`: catch_up_gain)
    improvements: list[float] = field(default_factory=list)
    batch_seconds: list[float] = field(default_factory=list)
    retired: str | None = None  # why it gets no more seconds
    # retired as trivial (by its share of model time): it keeps its search and comes back if its share grows
    parked: bool = False
    revivals: int = 0  # times it came back from a trivial retirement
    best_tuned: float | None = None  # the search's best, seconds, even where the default is faster
    # improvement curves of similar workloads tuned before (experience library)
    borrowed_improvements: list[list[float]] = field(default_factory=list)
    ceiling_s: float | None = None  # the least seconds per call the machine allows (None: unknown)

    @property
    def batches(self) -> int:
        return len(self.batch_seconds)

    @property
    def of_ceiling(self) -> float | None:
        """Its best latency's fraction of what the machine allows (1: at the ceiling)."""
        latency = self.latency if self.latency is not None else self.latency_default
        return None if latency is None or not self.ceiling_s else self.ceiling_s / latency

    @property
    def model_seconds(self) -> float | None:
        latency = self.latency if self.latency is not None else self.latency_default
        return None if latency is None else self.weight * latency

    def record_batch(self, seconds: float, trials: int, best_latency: float | None) -> None:
        self.seconds += seconds
        self.trials += trials
        self.batch_seconds.append(seconds)
        if best_latency is None:
            if self.best_tuned is not None:
                self.improvements.append(0.0)
            return
        if self.best_tuned is not None:
            self.improvements.append(max(0.0, (self.best_tuned - best_latency) / self.best_tuned))
        self.best_tuned = best_latency if self.best_tuned is None else min(self.best_tuned, best_latency)
        if self.latency is None:
            # the build keeps the default schedule where tuning has not beaten it yet
            self.latency_before = self.latency_default if self.latency_default is not None else best_latency
            self.latency = min(best_latency, self.latency_before)
            return
        self.latency = min(self.latency, best_latency)

    @property
    def behind(self) -> float:
        """The search's best over the latency the model runs now (1: the search leads; 3: the
        default schedule or a kernel family's kernel is 3x faster than anything it found)."""
        if self.best_tuned is None or not self.latency:
            return 1.0
        return max(1.0, self.best_tuned / self.latency)


def expected_shares(tasks: list[TaskStats]) -> list[float]:
    """Each task's expected share of the job's seconds: its share of model time among the
    tasks still tuned (0 for retired ones; equal shares while nothing is timed yet)."""
    live = [t.retired is None for t in tasks]
    times = [t.model_seconds if (alive and t.model_seconds is not None) else 0.0 for t, alive in zip(tasks, live)]
    total = sum(times)
    if total <= 0:
        count = sum(live) or 1
        return [1.0 / count if alive else 0.0 for alive in live]
    return [time / total for time in times]


def op_kind(task_name: str) -> str:
    """"fused_matmul_add3" -> "matmul": the first operator in a fused task's name."""
    parts = [p for p in re.split(r"[_\d]+", task_name.lower()) if p and p != "fused"]
    return parts[0] if parts else task_name


def similarity_graph(tasks: list[TaskStats]) -> nx.Graph:
    """Tasks of the same operator kind within 4x in FLOPs are neighbours."""
    graph = nx.Graph()
    graph.add_nodes_from(range(len(tasks)))
    for i, a in enumerate(tasks):
        for j in range(i + 1, len(tasks)):
            b = tasks[j]
            small, large = sorted((max(a.flop, 1.0), max(b.flop, 1.0)))
            if op_kind(a.name) == op_kind(b.name) and large / small <= 4.0:
                graph.add_edge(i, j)
    return graph


def improvement_curve(trajectory: list) -> list[float]:
    """Relative gain of each batch after the first, from a [seconds, best latency] trajectory."""
    bests = [point[1] for point in trajectory]
    return [max(0.0, (a - b) / a) for a, b in zip(bests, bests[1:]) if a > 0]


def predicted_improvement(task: TaskStats, neighbour_curves: list[list[float]], prior: float = 0.3,
                          ahead: int = 0) -> float:
    """Relative improvement of the search's best that the task's next batch (`ahead` batches
    after it) should buy. neighbour_curves: improvement curves of similar tasks (of this
    model, or tuned before)."""
    at = len(task.improvements) + ahead  # the index of the improvement that batch would add
    seen = [curve[at] for curve in neighbour_curves if len(curve) > at]
    # early batches gain a lot, later ones less; similar tasks say how fast it fades. The prior
    # counts as one of them: neighbours that happened to gain nothing at this point must not
    # make it 0 (a 40%-of-model-time task was dropped after 20 trials that way); a light one
    # (a tenth of a neighbour), so that real curves still lead
    expected = (sum(seen) + 0.1 * prior / (1.0 + at)) / (len(seen) + 0.1)
    if not task.improvements:
        return expected
    recent = task.improvements[-2:]
    own = sum(recent) / len(recent)
    trust = at / (at + 2.0)
    return trust * own + (1.0 - trust) * expected


# how many batches ahead a task behind its current latency is judged over (catch_up_gain)
CATCH_UP_BATCHES = 8


def catch_up_gain(behind: float, improvements: list[float]) -> tuple[float, int]:
    """(relative model gain per batch, over how many batches) for a search whose best is
    `behind` x the latency the model runs now, and improves by `improvements[k]` in its
    next batches: the model gains only what falls below that latency, so a search 3x behind
    a kernel family's kernel is worth a batch only if it can catch up (the best rate over the
    batches it would take), not for its own progress (seen: 157 s of a 4-min H200 decoder tune
    on MetaSchedule GEMMs that never came near the Hopper kernels)."""
    best, batches, level = 0.0, 1, behind
    for k, improvement in enumerate(improvements, 1):
        level *= 1.0 - improvement
        if (1.0 - level) / k > best:
            best, batches = (1.0 - level) / k, k
    return best, batches


def default_unbeaten(task: TaskStats, batches: int = 2) -> bool:
    """A task that came back from a trivial retirement and whose search has not matched its
    default schedule in `batches` batches: small memory-bound kernels (casts, reshapes, layer
    norms) whose default is already near their floor; more seconds there buy nothing (seen:
    61 s of a 3-min CPU run on such tasks, none beating its default)."""
    return (task.revivals > 0 and task.batches >= batches and task.best_tuned is not None
            and task.latency_default is not None and task.best_tuned >= task.latency_default)


@dataclass(frozen=True)
class Choice:
    task: int | None  # None: nothing is worth more seconds
    why: str
    gain_per_second: dict[int, float]
    retired: dict[int, str]
    revived: dict[int, str] = field(default_factory=dict)  # trivial before, a bottleneck now
    parked: frozenset[int] = frozenset()  # those of `retired` retired as trivial (revocable)
    held: dict[int, str] = field(default_factory=dict)  # not retired for their pace: far below their ceiling


def apply_choice(tasks: list[TaskStats], choice: Choice) -> None:
    """The choice's revivals and retirements, on the tasks' statistics."""
    for index in choice.revived:
        tasks[index].retired, tasks[index].parked = None, False
        tasks[index].revivals += 1
    for index, why in choice.retired.items():
        tasks[index].retired, tasks[index].parked = why, index in choice.parked


def choose_next(
    tasks: list[TaskStats],
    *,
    default_batch_seconds: float = UNTIMED_BATCH_SECONDS,
    seconds_left: float,
    floor_share: float = 0.02,
    min_gain_left: float = 0.005,
    busy: frozenset[int] = frozenset(),
    seconds_total: float | None = None,
    far_below: float = 0.5,
    hold_share: float = 0.1,
) -> Choice:
    """The task to give the next batch, and the tasks to retire now (with why).

    floor_share: a task under this share of model time gets no more: no batch at all when its
    default schedule's timing says so, else none after its first.
    min_gain_left: a task retires when the seconds left, spent at its expected gain per second,
    would buy less than this fraction of the model's current time. A rate that does not pay
    with a minute left pays with ten (seen: a 40%-of-model-time task retired at 9.4e-5/s with
    500 s of 600 left under a fixed per-second floor). 0.5%, not 1%: at 1% a 10-min CPU run
    retired the QKV matmuls with 399 s left at 3.8 us, where stock's search went on to 1.5 us.
    busy: tasks with a batch in flight (several devices): neither chosen nor retired until its
    results are in; their latencies still count in the model's time.
    far_below, hold_share: a task under `far_below` of its ceiling is not retired for its pace
    while more than `hold_share` of `seconds_total` is left (seen: a CPU FFN matmul, the model's
    largest task, retired with 161 s of 300 left at ~62 GFLOP/s on a CPU that does ~190).
    """
    measured = [t.model_seconds for t in tasks if t.model_seconds is not None]
    model_time = sum(measured) or 1.0
    # Amdahl: as the hot tasks get faster, a task skipped as trivial can become a bottleneck
    revived = {i: f"now {t.model_seconds / model_time:.1%} of model time (floor {floor_share:.0%}): "
                  f"the others got faster"
               for i, t in enumerate(tasks)
               if t.parked and t.model_seconds is not None
               and t.model_seconds / model_time >= floor_share}
    live = [i for i, t in enumerate(tasks) if (t.retired is None or i in revived) and i not in busy]
    retired: dict[int, str] = {}
    held: dict[int, str] = {}
    parked: set[int] = set()
    untried = [i for i in live if tasks[i].batches == 0]
    for i in untried:
        if tasks[i].latency_default is not None and tasks[i].model_seconds / model_time < floor_share:
            retired[i] = (f"{TRIVIAL}: {tasks[i].model_seconds / model_time:.1%} of model time under its default "
                          f"schedule (floor {floor_share:.0%}), keeps it")
            parked.add(i)
    untried = [i for i in untried if i not in retired]
    if untried:  # one batch each first, the most model time (or FLOPs, untimed) first
        pick = max(untried, key=lambda i: (tasks[i].model_seconds or 0.0, tasks[i].weight * tasks[i].flop))
        return Choice(pick, "first batch: measuring its latency", {}, retired, revived, frozenset(parked), held)
    graph = similarity_graph(tasks)
    gains: dict[int, float] = {}
    for i in live:
        if i in retired:
            continue
        task = tasks[i]
        if task.model_seconds is None:
            retired[i] = "no candidate built and ran in its first batch"
            continue
        share = task.model_seconds / model_time
        if share < floor_share:
            retired[i] = f"{TRIVIAL}: {share:.1%} of model time (floor {floor_share:.0%}), kept its first batch"
            parked.add(i)
            continue
        if default_unbeaten(task):
            retired[i] = (f"its default schedule is unbeaten after {task.batches} batches (best tuned "
                          f"{task.best_tuned / task.latency_default:.2f}x its time): keeps it")
            continue
        neighbours = [tasks[j].improvements for j in graph.neighbors(i)] + task.borrowed_improvements
        seconds = sum(task.batch_seconds[-3:]) / len(task.batch_seconds[-3:]) if task.batch_seconds \
            else default_batch_seconds
        ahead = max(1, min(CATCH_UP_BATCHES, int(seconds_left / max(seconds, 1e-3)))) if task.behind > 1.0 else 1
        per_batch, _ = catch_up_gain(task.behind, [predicted_improvement(task, neighbours, ahead=k)
                                                   for k in range(ahead)])
        gain = task.model_seconds * per_batch / max(seconds, 1e-3)
        gains[i] = gain / model_time  # fraction of model time gained per second
        if gains[i] * seconds_left < min_gain_left:
            pace = (f"expected gain {gains[i]:.1e} of model time per second buys "
                    f"{gains[i] * seconds_left:.2%} in the {seconds_left:.0f} s left (< {min_gain_left:.1%})")
            of_ceiling = task.of_ceiling
            if (of_ceiling is not None and of_ceiling < far_below and seconds_total
                    and seconds_left > hold_share * seconds_total):
                held[i] = f"{pace}, but it runs at {of_ceiling:.0%} of its ceiling: kept"
            else:
                retired[i] = pace
    candidates = {i: g for i, g in gains.items() if i not in retired}
    if not candidates:
        return Choice(None, "no task is worth more seconds", gains, retired, revived, frozenset(parked), held)
    pick = max(candidates, key=candidates.get)
    return Choice(pick, f"highest expected gain per second ({candidates[pick]:.2e} of model time/s)",
                  gains, retired, revived, frozenset(parked), held)
