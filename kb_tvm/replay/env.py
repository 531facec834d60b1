"""The replay environment: a tuning run against a recorded dataset, on a simulated clock.

A policy asks for schedules (`Query`: a sketch and its decisions) in batches; each comes back
with its recorded latency or error. A schedule the dataset does not hold (a mutation's child,
mostly: one changed decision rarely lands on a recorded schedule) is, by default, snapped to the
nearest recorded one of its sketch, so every result is a real measurement; with `snap=False` the
surrogate answers for it instead, and the summary says how many results it gave. Fresh samples
come from the dataset's uniform samples (the "random" runs), as a real search samples the space. A batch advances the clock by what it cost when it was recorded:
the dataset's fixed cost per batch, its builds (in parallel) and its runs; the first batch also
the search's start (`Dataset.start_s`). Every strategy pays that one cost model: the fixed costs
are medians over all recorded batches and runs, whichever search recorded them, so that replays
compare strategies, not recordings. The budget is the same value
object real runs ask (`TuningBudget`), on that clock.
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass

import numpy as np

from ..budget import TuningBudget
from .dataset import Dataset, Point
from .surrogate import NeighbourSurrogate


@dataclass(frozen=True)
class Query:
    sketch: str
    decisions: tuple
    features: np.ndarray | None  # the point's, or its nearest neighbour's where it has none


@dataclass
class Clock:
    """The simulated seconds a replay has spent: one env's own, or shared by the tasks of a model
    (model.py), whose batches then take turns on it."""

    seconds: float = 0.0


@dataclass(frozen=True)
class Outcome:
    latency_s: float | None
    error: str | None
    surrogate: bool  # the dataset does not hold this schedule: the surrogate answered


class ReplayEnv:
    def __init__(self, dataset: Dataset, *, budget: str | float, snap: bool = True,
                 surrogate: NeighbourSurrogate | None = None, clock: Clock | None = None) -> None:
        self.dataset = dataset
        self.snap = snap
        self.per_batch_s = dataset.per_batch_s
        self.measured_keys: set[tuple] = set()  # (sketch, decisions) of every schedule measured
        self.surrogate = surrogate or NeighbourSurrogate(dataset)
        self.clock = clock or Clock()
        self.budget = TuningBudget(budget, clock=lambda: self.clock.seconds).start()
        self.best_s = math.inf
        self.best_from_surrogate = False
        self.trials = 0
        self.failed = 0
        self.surrogate_trials = 0
        self.curve: list[dict] = []

    # ------------------------------------------------------------ what a policy may ask
    def query(self, index: int) -> Query:
        p = self.dataset.points[index]
        return Query(p.sketch, p.decisions, p.features)

    def uniform_indices(self) -> list[int]:
        """Points a uniform sample of the space could give: the random runs' (all, if none)."""
        return self.dataset.uniform_indices

    def lookup(self, sketch: str, decisions: tuple, avoid: Container = frozenset()) -> Query | None:
        """A query for any decisions of a sketch. Not recorded (or in `avoid`, keys of schedules
        the policy has already): snapped to the nearest recorded point not in `avoid` (None when
        none is left), or without snapping the decisions themselves, with the features of their
        nearest recorded neighbour."""
        index = self.dataset.index.get((sketch, decisions))
        if index is not None and (sketch, decisions) not in avoid:
            return self.query(index)
        if self.snap:
            keys, near = self.dataset.keys, self.surrogate.neighbours(sketch, decisions)
            for start in range(0, len(near), 64):  # the nearest free point is often near the front
                for i in near[start:start + 64].tolist():
                    if keys[i] not in avoid:
                        return self.query(i)
            return None
        if (sketch, decisions) in avoid:
            return None
        near = self.surrogate.neighbours(sketch, decisions)[:1]
        return Query(sketch, decisions, self.dataset.points[int(near[0])].features if len(near) else None)

    def measure(self, batch: list[Query]) -> list[Outcome]:
        """Measure a batch: outcomes in order; the clock moves by the batch's recorded cost."""
        if not batch:
            return []
        outcomes, costs = [], []
        for q in batch:
            self.measured_keys.add((q.sketch, q.decisions))
            index = self.dataset.index.get((q.sketch, q.decisions))
            if index is not None:
                p = self.dataset.points[index]
                outcomes.append(Outcome(p.latency_s, p.error, False))
                costs.append(p)
                continue
            latency, near = self.surrogate.predict(q.sketch, q.decisions)
            outcomes.append(Outcome(latency, None if latency is not None else "surrogate: its neighbours failed",
                                    True))
            costs.append(_typical(self.dataset, near))
        # a run's first batch also pays the search's start, as the recorded runs did theirs
        start = self.dataset.start_s if not self.curve else 0.0
        self.clock.seconds += start + self.dataset.batch_seconds(costs, self.per_batch_s)
        for o in outcomes:
            self.trials += 1
            self.failed += o.latency_s is None
            self.surrogate_trials += o.surrogate
            if o.latency_s is not None and o.latency_s < self.best_s:
                self.best_s, self.best_from_surrogate = o.latency_s, o.surrogate
        self.curve.append({"seconds": round(self.seconds, 3), "trials": self.trials,
                           "best_ms": None if math.isinf(self.best_s) else self.best_s * 1e3})
        return outcomes

    @property
    def seconds(self) -> float:
        return self.clock.seconds

    # ------------------------------------------------------------ how the run went
    def best_at(self, seconds: float) -> float | None:
        best = None
        for point in self.curve:
            if point["seconds"] <= seconds and point["best_ms"] is not None:
                best = point["best_ms"]
        return best

    def area_under_curve(self) -> float:
        """Mean over the budget's seconds of (dataset best / best so far): 1.0 = the dataset's
        best from the first second; 0 while nothing has been measured."""
        total, reference = self.budget.total, self.dataset.best_latency_s
        if reference is None:
            return 0.0
        area, last_t, last_q = 0.0, 0.0, 0.0
        for point in self.curve:
            t = min(point["seconds"], total)
            area += last_q * (t - last_t)
            last_t = t
            last_q = 0.0 if point["best_ms"] is None else reference / (point["best_ms"] * 1e-3)
        area += last_q * max(0.0, total - last_t)
        return area / total

    def summary(self) -> dict:
        total = self.budget.total
        return {
            "dataset": self.dataset.name, "budget_s": total, "seconds": round(self.seconds, 3),
            "trials": self.trials, "failed": self.failed,
            "best_ms": None if math.isinf(self.best_s) else self.best_s * 1e3,
            "dataset_best_ms": None if self.dataset.best_latency_s is None else self.dataset.best_latency_s * 1e3,
            "best_ms_at": {f"{q:.0%}": self.best_at(q * total) for q in (0.25, 0.5, 1.0)},
            "area_under_curve": round(self.area_under_curve(), 6),
            "surrogate_trials": self.surrogate_trials,
            "best_from_surrogate": self.best_from_surrogate,
            "surrogate_error": self.surrogate.error,
            "curve": self.curve,
        }


def _typical(dataset: Dataset, near: list[int]) -> Point:
    """What a schedule the dataset lacks costs: its neighbours' median build and run seconds."""
    if not near:
        return Point("", (), [], None, None, None, 0.0, 0.0, 0, ())
    pts = [dataset.points[i] for i in near]
    return Point("", (), [], None, None, None, float(np.median([p.build_s for p in pts])),
                 float(np.median([p.run_s for p in pts])), 0, ())
