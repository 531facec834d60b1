"""When one task's search stops: every rule, each one function giving the reason (a line for the
decision log) or None to go on. Plain Python, no TVM. The planner keeps the state they read
(rounds below the gain floor, a meta-policy's directive); a model's job retires whole tasks by
its own rule (allocation.choose_next).

In the order a batch meets them: the budget or the trial cap is spent; the design spaces gave
no valid sample; the next batch would overrun the budget; no valid candidate is left to
propose; before a fine batch, a faster kernel outside the space is out of the search's reach,
or a meta-policy stops it; after proposals are scored, what is left of the budget buys too
little at their expected gain."""

from __future__ import annotations

import math

NO_NEW_CANDIDATE = "no new valid candidate could be generated"
# sampled this many times without one schedule that passed the postprocessors, a task's design
# spaces are taken to hold none: a space where 10% pass yields none in 32 with odds of 3%
EMPTY_SPACE_TRIES = 32


def spent(*, exhausted: bool, trials: int, max_trials: int) -> str | None:
    if exhausted:
        return "budget spent"
    if trials >= max_trials:
        return f"trial cap of {max_trials} reached"
    return None


def empty_space(*, tries: int, valid: int, known: int) -> str | None:
    """No sample of the task's design spaces passed MetaSchedule's postprocessors in `tries`,
    and no schedule is known (borrowed, dlight's, measured before): the fine phase's fresh
    samples would fail alike (seen: a GPT-2 QKV split on CUDA sampled for 63 s of a 4-min H100
    job and measured nothing)."""
    if valid or known or tries < EMPTY_SPACE_TRIES:
        return None
    return (f"none of its {tries} samples passed MetaSchedule's postprocessors: its design spaces hold no "
            "schedule to build (it keeps its default)")


def overruns(remaining_seconds: float, batch_seconds: float) -> bool:
    """A batch that would spend more than half of itself past the budget is not started."""
    return remaining_seconds < 0.5 * batch_seconds


def overrun(*, remaining_seconds: float, batch_seconds: float) -> str | None:
    if overruns(remaining_seconds, batch_seconds):
        return (f"the next batch (~{batch_seconds:.0f}s) would overrun the {remaining_seconds:.0f}s left by "
                "more than half")
    return None


def worth_continuing(expected_gain_per_second: float, remaining_seconds: float, min_total_gain: float) -> bool:
    """Spending all that is left at the current rate must still buy `min_total_gain`."""
    return expected_gain_per_second * remaining_seconds >= min_total_gain


def gain_too_small(*, rate: float, remaining_seconds: float, min_total_gain: float, rounds_below: int,
                   patience: int) -> str | None:
    """`rounds_below`: rounds in a row, this one included, whose rate failed worth_continuing."""
    if rounds_below >= patience:
        return (f"expected gain {rate:.2e}/s x {remaining_seconds:.0f}s left < {min_total_gain:.1%} for "
                f"{rounds_below} rounds")
    return None


def pace_toward(trajectory: list[list[float]], bar_s: float, remaining_seconds: float,
                margin: float) -> tuple[float, float] | None:
    """(gain needed, gain in reach), in log-latency, for a search whose best must fall to `bar_s`
    (a kernel outside its space), or None while its trajectory ([own seconds, best s], one
    point a batch) is too short to judge. A search's best falls about linearly in log time, so
    the pace is the fall over the last half of its seconds per log-second, extrapolated over
    the seconds left and multiplied by `margin`: the model's expected gain cannot judge this,
    a bar far below every measurement is a tail its spread does not describe."""
    if len(trajectory) < 2:
        return None
    now, best_now = trajectory[-1]
    needed = math.log(best_now / bar_s)
    then, best_then = next(((t, b) for t, b in reversed(trajectory) if t <= now / 2), trajectory[0])
    if now <= then:
        return None
    per_log_second = math.log(best_then / best_now) / math.log(now / then)
    return needed, margin * per_log_second * math.log((now + max(remaining_seconds, 0.0)) / now)


def behind_bar(*, trajectory: list[list[float]], bar_s: float, remaining_seconds: float, margin: float,
               patience: int) -> str | None:
    """The best's pace would not reach `bar_s` (a faster kernel outside the space) in the seconds
    left; judged after `patience` batches past the first, as the gain rule is."""
    if len(trajectory) <= patience:
        return None
    pace = pace_toward(trajectory, bar_s, remaining_seconds, margin)
    if pace is not None and pace[1] < pace[0]:
        return (f"at its pace (best by log time, x{margin:g}) the space would get {math.exp(pace[1]):.2f}x faster "
                f"in the {remaining_seconds:.0f}s left, not the {math.exp(pace[0]):.2f}x it needs to beat the "
                f"kernel outside ({bar_s * 1e3:.4g} ms)")
    return None


def agent_stopped(why: str) -> str:
    return f"the agent stopped it: {why}" if why else "the agent stopped it"
