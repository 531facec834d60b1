"""How long to time a candidate: repeats that adapt to its latency, and a race against the best.

MetaSchedule's LocalRunner times every candidate with number=3, repeat=1 and a 100-ms floor:
one averaged sample, and at least 100 ms even for a 10-us kernel. Here a candidate is timed in
repeats of `number` calls each (a repeat lasts at least `repeat_s`), until the median is stable,
the time cap is reached, or the candidate is clearly slower than the best so far (it is then
recorded as measured-slow, with the median of what was timed: a real latency, not a failure).
A candidate whose first call (at least a repeat's length) is already that much slower stops there,
and so does one so slow that its first repeats alone would pass the time cap.
Plain Python: `timer.time_function` applies it (for every latency kb reports), the tests check it
without TVM.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

# what a timing report says: the median and the protocol behind it (logs and result files show it)
REPORT_FIELDS = ("median_s", "repeats", "number", "verdict")


@dataclass(frozen=True)
class TimingPolicy:
    repeat_s: float = 0.002  # one repeat lasts at least this: far above the timer's resolution
    min_repeats: int = 5
    max_repeats: int = 41
    max_seconds: float = 1.0  # of timed calls per candidate
    stable_within: float = 0.01  # the median's relative standard error that counts as stable
    race_factor: float = 3.0  # after race_after repeats, this much slower than the best: stop
    race_after: int = 3
    max_number: int = 10_000  # calls per repeat, for kernels of a few nanoseconds
    cache_flush: bool = False  # CPU: flush caches before each repeat (weights cold, as in a model)

    def __post_init__(self) -> None:
        for name in ("repeat_s", "max_seconds", "stable_within", "race_factor"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name}={value!r}: must be a positive number")
        for name in ("min_repeats", "max_repeats", "race_after", "max_number"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name}={value!r}: must be an integer >= 1")
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"max_repeats={self.max_repeats}: must be >= min_repeats={self.min_repeats}")


def at_least(policy: TimingPolicy, repeats: int) -> TimingPolicy:
    """`policy` with a median of at least `repeats` repeats (unless its seconds run out first)."""
    return replace(policy, min_repeats=max(1, int(repeats)), max_repeats=max(policy.max_repeats, int(repeats)))


def calls_per_repeat(first_call_s: float, policy: TimingPolicy) -> int:
    """Calls in one repeat so that it lasts at least policy.repeat_s."""
    if first_call_s <= 0:
        return policy.max_number
    return max(1, min(policy.max_number, math.ceil(policy.repeat_s / first_call_s)))


def median_error(samples: list[float]) -> float:
    """Relative standard error of the median, from the median absolute deviation (robust to the
    odd preempted repeat): 1.4826 MAD estimates sigma, 1.2533 sigma/sqrt(n) the median's error."""
    if len(samples) < 2:
        return math.inf
    median = statistics.median(samples)
    if median <= 0:
        return math.inf
    mad = statistics.median(abs(s - median) for s in samples)
    return 1.2533 * 1.4826 * mad / math.sqrt(len(samples)) / median


def verdict(samples: list[float], number: int, best_s: float | None, policy: TimingPolicy) -> str | None:
    """After the repeats so far (seconds per call each): None to go on, else why to stop:
    "slow" (raced out by the best), "stable", or "capped" (repeats or seconds used up)."""
    n = len(samples)
    median = statistics.median(samples) if samples else math.inf
    if best_s is not None and n >= policy.race_after and median > policy.race_factor * best_s:
        return "slow"
    if n >= policy.min_repeats and median_error(samples) <= policy.stable_within:
        return "stable"
    if n >= policy.max_repeats or sum(samples) * number >= policy.max_seconds:
        return "capped"
    return None


def first_verdict(first_s: float, best_s: float | None, policy: TimingPolicy) -> str | None:
    """After one timed call (itself after a warm-up): None to go on to repeats, else why to stop
    there. "slow": that call, at least a repeat long, is already raced out (a 1-s kernel then costs
    2 s, not 6); "capped": so slow that the first repeats alone would pass the time cap."""
    if best_s is not None and first_s > policy.race_factor * best_s and first_s >= policy.repeat_s:
        return "slow"
    if first_s * policy.race_after > policy.max_seconds:
        return "capped"
    return None


def repeats_next(samples: list[float], policy: TimingPolicy) -> int:
    """Repeats in the next batch of timed calls: enough to race first, then two at a time."""
    return 2 if samples else policy.race_after


def report(samples: list[float], number: int, why: str) -> dict:
    """The timing report: the median of `samples` (seconds per call) and how it was timed."""
    return dict(zip(REPORT_FIELDS, (statistics.median(samples), len(samples), number, why)))


def keep_best(best_s: dict, key, report: dict) -> None:
    """The race's reference for `key` after a timing report: candidates raced out early
    ("slow") hold a partial median and never set it."""
    if report["verdict"] != "slow":
        best_s[key] = min(report["median_s"], best_s.get(key, math.inf))
