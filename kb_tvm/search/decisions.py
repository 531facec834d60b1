"""The search's decisions as plain Python: region ranking, proposal scoring, the cost of
a measurement, failure learning and batch sizing (the stop rules: stopping.py). No TVM here.

Latencies are handled as log-seconds, so a gain is a relative improvement:
exp(best - predicted) - 1.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np


# ---------------------------------------------------------------- regions
@dataclass
class RegionStats:
    """What the coarse phase learned about one region (design space x template)."""

    name: str
    sampled: int = 0
    measured_log_latencies: list[float] = field(default_factory=list)
    failures: int = 0
    predicted_best_log_latency: float | None = None  # cost model, over unmeasured samples

    @property
    def trials(self) -> int:
        return len(self.measured_log_latencies) + self.failures

    @property
    def best_log_latency(self) -> float | None:
        return min(self.measured_log_latencies) if self.measured_log_latencies else None


def region_score(stats: RegionStats, overall_best: float) -> float:
    """Expected speed of the region relative to the overall best (1.0 = as fast), discounted
    by its failure rate. Uses the better of measured and predicted best."""
    candidates = [v for v in (stats.best_log_latency, stats.predicted_best_log_latency) if v is not None]
    if not candidates:
        return 0.0
    speed = math.exp(overall_best - min(candidates))
    fail_rate = (stats.failures + 0.5) / (stats.trials + 1.0)
    return speed * (1.0 - fail_rate)


def rank_regions(regions: list[RegionStats], keep: int,
                 won_before: frozenset[str] = frozenset()) -> list[tuple[RegionStats, float, bool, str]]:
    """Regions best first, each with its score, whether it is kept, and why. A region that
    won on similar workloads (`won_before`) is kept too if it measured anything."""
    known = [r.best_log_latency for r in regions if r.best_log_latency is not None]
    overall_best = min(known) if known else 0.0
    scored = sorted(((r, region_score(r, overall_best)) for r in regions), key=lambda p: -p[1])
    ranked = []
    for rank, (region, score) in enumerate(scored):
        if region.sampled == 0:
            kept, why = False, "no valid sample"
        elif not region.measured_log_latencies:
            kept, why = False, f"no successful measurement in {region.trials} trials"
        elif rank < keep:
            kept, why = True, f"rank {rank + 1} of {len(regions)}"
        elif region.name in won_before:
            kept, why = True, f"rank {rank + 1} of {len(regions)}, kept: it won on similar workloads"
        else:
            kept, why = False, f"rank {rank + 1} of {len(regions)}, keeping {keep}"
        ranked.append((region, score, kept, why))
    return ranked


# ---------------------------------------------------------------- proposals
def expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    """Expected improvement (in log-latency, i.e. relative gain) below `best`."""
    sigma = np.maximum(sigma, 1e-9)
    z = (best - mu) / sigma
    cdf = 0.5 * (1.0 + np.array([math.erf(v) for v in (z / math.sqrt(2.0)).ravel()]).reshape(z.shape))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return np.maximum((best - mu) * cdf + sigma * pdf, 0.0)


def exploration_weight(fraction_used: float, start: float = 2.0, end: float = 0.25) -> float:
    """How much the model's uncertainty counts: a lot early, little as the budget runs out."""
    fraction_used = min(max(fraction_used, 0.0), 1.0)
    return end + (start - end) * (1.0 - fraction_used)


def score_proposals(
    mu: np.ndarray,
    sigma: np.ndarray,
    p_fail: np.ndarray,
    seconds: np.ndarray,
    best: float,
    exploration: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(expected relative gain, expected gain per second) of each proposal."""
    gain = expected_improvement(mu, sigma * exploration, best) * (1.0 - p_fail)
    return gain, gain / np.maximum(seconds, 1e-3)


# ---------------------------------------------------------------- measurement cost
class MeasurementCost:
    """Seconds a measurement batch costs, learned from whole batches as

        batch_seconds ~= per_batch + per_candidate * n + per_run_second * sum(latency)

    per_batch is the fixed cost of a round (worker pools start per batch in MetaSchedule's
    local builder and runner), per_candidate the build + load + search work of one candidate,
    per_run_second the repeats the runner makes of each kernel."""

    def __init__(self, prior_seconds_per_candidate: float = 2.0, *, per_batch: float = 0.0,
                 per_run_second: float = 0.0) -> None:
        # the priors (a guess, or what a similar workload cost) hold until this task's own
        # batches are enough to fit
        self.per_batch = per_batch
        self.per_candidate = self.prior_per_candidate = prior_seconds_per_candidate
        self.per_run_second = per_run_second
        self._batches: list[tuple[int, float, float]] = []

    def observe_batch(self, n_candidates: int, sum_latency_seconds: float, seconds: float) -> None:
        if n_candidates <= 0 or seconds <= 0:
            return
        self._batches.append((n_candidates, sum_latency_seconds, seconds))
        batches = self._batches[-20:]
        n = np.array([b[0] for b in batches], dtype=float)
        lat = np.array([b[1] for b in batches], dtype=float)
        sec = np.array([b[2] for b in batches], dtype=float)
        for columns in ((np.ones_like(n), n, lat), (np.ones_like(n), n)):
            design = np.stack(columns, axis=1)
            if len(batches) <= design.shape[1] or np.linalg.matrix_rank(design) < design.shape[1]:
                continue
            coef, *_ = np.linalg.lstsq(design, sec, rcond=None)
            if np.all(coef >= 0) and coef[1] > 0:
                self.per_batch, self.per_candidate = float(coef[0]), float(coef[1])
                self.per_run_second = float(coef[2]) if len(coef) > 2 else 0.0
                return
        # too few (or same-size) batches to split fixed from per-candidate cost: above the
        # prior per-candidate cost, the rest is taken as fixed, so one small batch with a large
        # fixed cost (~45 s on a GPU) cannot make the next full batch look unaffordable
        self.per_candidate = float(min(sec.sum() / n.sum(), self.prior_per_candidate))
        self.per_batch = float(max(0.0, np.mean(sec - self.per_candidate * n)))
        self.per_run_second = 0.0

    def predict(self, latency_seconds: np.ndarray | float, batch_size: int = 1) -> np.ndarray:
        """Seconds one candidate costs, its share of the per-batch cost included."""
        latency = np.asarray(latency_seconds, dtype=float)
        return self.per_batch / max(batch_size, 1) + self.per_candidate + self.per_run_second * latency

    def batch_seconds(self, n_candidates: int) -> float:
        return self.per_batch + self.per_candidate * n_candidates


# ---------------------------------------------------------------- failures
class FailureModel:
    """Which sampled decisions and schedule properties go with build/run failures.

    Each candidate is described by keys ("decision 3 = (4, 8)", "threads_per_block ~ 512");
    its failure probability is the highest smoothed failure rate among its keys seen at
    least twice (so one bad decision is enough to steer away from it).
    """

    def __init__(self, prior_failures: float = 0.5, prior_trials: float = 2.0) -> None:
        self._prior = (prior_failures, prior_trials)
        self._counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # key -> [fails, trials]
        self.failures = 0
        self.trials = 0

    def observe(self, keys: list[str], failed: bool) -> None:
        self.trials += 1
        self.failures += int(failed)
        for key in keys:
            counts = self._counts[key]
            counts[0] += int(failed)
            counts[1] += 1

    def base_rate(self) -> float:
        a, b = self._prior
        return (self.failures + a) / (self.trials + b)

    def probability(self, keys: list[str]) -> float:
        a, b = self._prior
        rate = self.base_rate() if self.trials else 0.0
        for key in keys:
            fails, trials = self._counts.get(key, (0, 0))
            if trials >= 2:
                rate = max(rate, (fails + a) / (trials + b))
        return min(rate, 1.0)

    def worst_keys(self, limit: int = 5) -> list[tuple[str, int, int]]:
        bad = [(k, c[0], c[1]) for k, c in self._counts.items() if c[1] >= 2 and c[0] == c[1]]
        return sorted(bad, key=lambda t: -t[2])[:limit]


# ---------------------------------------------------------------- pacing
def batch_size(remaining_seconds: float, cost: MeasurementCost, preferred: int, minimum: int) -> int:
    """Full batches while they fit in what is left (a batch has a fixed cost, so small ones
    waste it); the last one shrinks to fit, never below `minimum`."""
    n = preferred
    while n > minimum and cost.batch_seconds(n) > remaining_seconds:
        n -= 1
    return max(1, n)


def whole_rounds(n: int, workers: int, *, at_least: int = 0) -> int:
    """`n` cut to whole rounds of `workers` parallel builds where it is more than one round,
    never below `at_least`: a first batch waits for its slowest build, and on a GPU, where
    each candidate is timed as soon as it is built, a second round of builds for one or a few
    candidates costs as much as the first."""
    if n > workers:
        n -= n % workers
    return max(n, at_least)


def warm_start_batch(borrowed: int, cost: MeasurementCost, remaining_seconds: float, preferred: int) -> int:
    """Size of the first batch when similar workloads lent schedules: those alone when a batch's
    fixed cost is small (at most 5% of what is left: kb's pipeline), so their gain shows at
    once and steers the next batch; else a full batch, not to pay a large fixed cost (stock's
    pipeline: ~45 s on a GPU) for a handful of candidates."""
    if 0 < borrowed < preferred and cost.per_batch <= 0.05 * remaining_seconds:
        return borrowed
    return preferred
