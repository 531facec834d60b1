"""One record per schedule. A schedule measured again (KBSearch re-measures its best few, whose
first measurement may have been lucky) refines its record instead of adding another: the
record's run_secs hold one value per measurement, and it ranks by their median. MetaSchedule's
own JSONDatabase keeps every measurement as a record of its own and ranks by each one's mean,
so it deploys the luckiest single measurement. Plain Python: `RecordDatabase` (`database.py`) applies it.
"""

from __future__ import annotations

import statistics

FAILED_S = 1e10  # MetaSchedule's run_secs for a candidate that failed to build or run


def valid_seconds(run_secs) -> list[float]:
    """The measurements that are latencies (not MetaSchedule's failure marker)."""
    return [float(s) for s in run_secs or () if 0 < float(s) < FAILED_S]


def merged_seconds(before, new) -> list[float]:
    """run_secs of a schedule measured before (`before`) and now (`new`): every latency of both,
    or the failure marker when neither has one (a failed re-measure never hides a good one)."""
    seconds = valid_seconds(before) + valid_seconds(new)
    return seconds or [FAILED_S]


def record_latency(run_secs) -> float | None:
    """What a record's schedule takes: the median of its measurements; None if all failed."""
    seconds = valid_seconds(run_secs)
    return statistics.median(seconds) if seconds else None


def mean_seconds(result) -> float | None:
    """A MetaSchedule RunnerResult's mean seconds; None if it failed or holds none."""
    if result.error_msg is not None or not result.run_secs:
        return None
    return sum(float(s) for s in result.run_secs) / len(result.run_secs)
