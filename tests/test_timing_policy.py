"""How long a candidate is timed: plain Python, no TVM."""

import pytest

from kb_tvm.measure.timing import (
    REPORT_FIELDS,
    TimingPolicy,
    at_least,
    calls_per_repeat,
    first_verdict,
    median_error,
    repeats_next,
    report,
    verdict,
)


def test_a_repeat_lasts_long_enough_for_the_timer_and_no_longer():
    policy = TimingPolicy(repeat_s=0.002)
    assert calls_per_repeat(0.010, policy) == 1  # a 10-ms kernel: one call per repeat
    assert calls_per_repeat(0.0001, policy) == 20  # 100 us: 20 calls make 2 ms
    assert calls_per_repeat(1e-9, policy) == policy.max_number
    assert calls_per_repeat(0.0, policy) == policy.max_number


def test_steady_samples_stop_as_stable_after_the_minimum():
    policy = TimingPolicy(min_repeats=5)
    steady = [1.000e-3, 1.001e-3, 0.999e-3, 1.000e-3]
    assert verdict(steady, 1, None, policy) is None  # not yet the minimum
    assert verdict(steady + [1.002e-3], 1, None, policy) == "stable"


def test_noisy_samples_go_on_until_a_cap():
    policy = TimingPolicy(min_repeats=5, max_repeats=9, max_seconds=100.0)
    noisy = [1e-3, 2e-3, 1e-3, 3e-3, 1.5e-3, 2.5e-3]
    assert median_error(noisy) > policy.stable_within
    assert verdict(noisy, 1, None, policy) is None
    assert verdict(noisy + [1e-3, 2e-3, 3e-3], 1, None, policy) == "capped"


def test_the_seconds_cap_counts_every_call_of_every_repeat():
    policy = TimingPolicy(max_seconds=0.05, min_repeats=5)
    noisy = [1e-3, 3e-3, 1e-3]
    assert verdict(noisy, 9, None, policy) is None  # 45 ms of 50
    assert verdict(noisy, 20, None, policy) == "capped"  # 100 ms is


def test_a_candidate_three_times_slower_than_the_best_is_raced_out():
    policy = TimingPolicy(race_factor=3.0, race_after=3)
    slow = [4e-3, 4.1e-3, 3.9e-3]
    assert verdict(slow[:2], 1, 1e-3, policy) is None  # too few repeats to judge
    assert verdict(slow, 1, 1e-3, policy) == "slow"
    assert verdict(slow, 1, 2e-3, policy) is None  # only 2x slower: keep timing


def test_one_preempted_repeat_does_not_make_a_stable_median_unstable():
    samples = [1e-3] * 8 + [9e-3]
    assert median_error(samples) == 0.0


def test_one_call_far_slower_than_the_best_is_raced_out_at_once_but_a_short_one_is_not():
    policy = TimingPolicy(race_factor=3.0, repeat_s=0.002)
    assert first_verdict(0.010, 0.001, policy) == "slow"  # 10x the best, and a repeat long
    assert first_verdict(0.0005, 0.0001, policy) is None  # 5x, but shorter than a repeat: timer noise
    assert first_verdict(0.010, None, policy) is None  # no best: no race
    assert first_verdict(0.010, 0.005, policy) is None


def test_something_so_slow_that_its_first_repeats_pass_the_cap_is_timed_once():
    policy = TimingPolicy(max_seconds=1.0, race_after=3)
    assert first_verdict(50.0, None, policy) == "capped"  # BERT-base untuned on 2 cores: one call, not 50
    assert first_verdict(0.4, None, policy) == "capped"
    assert first_verdict(0.3, None, policy) is None  # three 0.3-s repeats fit in the second


def test_repeats_come_in_a_racing_batch_then_two_at_a_time():
    policy = TimingPolicy(race_after=3)
    assert repeats_next([], policy) == 3
    assert repeats_next([1e-3] * 3, policy) == 2


def test_at_least_asks_for_more_repeats_and_keeps_the_cap_above_them():
    policy = TimingPolicy(min_repeats=5, max_repeats=41, max_seconds=0.5)
    assert at_least(policy, 10) == TimingPolicy(min_repeats=10, max_repeats=41, max_seconds=0.5)
    assert at_least(policy, 60).max_repeats == 60
    assert at_least(policy, 1).min_repeats == 1
    assert verdict([1e-3] * 9, 1, None, at_least(policy, 10)) is None  # stable, but not 10 yet
    assert verdict([1e-3] * 10, 1, None, at_least(policy, 10)) == "stable"


def test_a_report_is_the_median_and_how_it_was_timed():
    made = report([3e-3, 1e-3, 2e-3], 7, "capped")
    assert tuple(made) == REPORT_FIELDS
    assert made == {"median_s": 2e-3, "repeats": 3, "number": 7, "verdict": "capped"}


@pytest.mark.parametrize("bad, message", [
    ({"repeat_s": 0}, "repeat_s=0: must be a positive number"),
    ({"min_repeats": 0}, "min_repeats=0: must be an integer >= 1"),
    ({"min_repeats": 9, "max_repeats": 5}, "max_repeats=5: must be >= min_repeats=9"),
])
def test_bad_policies_are_one_line_errors_naming_the_value(bad, message):
    with pytest.raises(ValueError, match=message):
        TimingPolicy(**bad)
