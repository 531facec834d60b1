"""How long a candidate is timed: plain Python, no TVM."""

import pytest

from kb_tvm.measure.timing import TimingPolicy, calls_per_repeat, median_error, verdict


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


@pytest.mark.parametrize("bad, message", [
    ({"repeat_s": 0}, "repeat_s=0: must be a positive number"),
    ({"min_repeats": 0}, "min_repeats=0: must be an integer >= 1"),
    ({"min_repeats": 9, "max_repeats": 5}, "max_repeats=5: must be >= min_repeats=9"),
])
def test_bad_policies_are_one_line_errors_naming_the_value(bad, message):
    with pytest.raises(ValueError, match=message):
        TimingPolicy(**bad)
