import math

import numpy as np
import pytest

from kb_tvm.search import decisions, stopping
from kb_tvm.search.decisions import FailureModel, MeasurementCost, RegionStats


def region(name, latencies=(), failures=0, sampled=10):
    return RegionStats(name, sampled=sampled, measured_log_latencies=[math.log(v) for v in latencies],
                       failures=failures)


def test_rank_regions_keeps_the_fastest_and_says_why_the_rest_go():
    ranked = decisions.rank_regions(
        [region("slow", [4.0, 5.0]), region("fast", [1.0, 3.0]), region("mid", [2.0]),
         region("broken", [], failures=3), region("empty", [], sampled=0)],
        keep=2,
    )
    assert [r.name for r, *_ in ranked][:3] == ["fast", "mid", "slow"]
    kept = {r.name: (k, why) for r, _, k, why in ranked}
    assert kept["fast"][0] and kept["mid"][0] and not kept["slow"][0]
    assert "keeping 2" in kept["slow"][1]
    assert not kept["broken"][0] and "no successful measurement" in kept["broken"][1]
    assert not kept["empty"][0] and "no valid sample" in kept["empty"][1]


def test_region_score_discounts_failures_and_uses_predictions():
    clean = region("clean", [1.0, 1.0, 1.0])
    flaky = region("flaky", [1.0], failures=2)
    assert decisions.region_score(clean, 0.0) > decisions.region_score(flaky, 0.0)
    promising = region("promising", [2.0])
    promising.predicted_best_log_latency = math.log(0.5)
    assert decisions.region_score(promising, 0.0) > decisions.region_score(region("plain", [2.0]), 0.0)


def test_expected_improvement_prefers_lower_mean_and_more_uncertainty():
    best = 0.0
    ei = decisions.expected_improvement(np.array([-0.5, 0.0, 0.5, 0.5]), np.array([0.1, 0.1, 0.1, 1.0]), best)
    assert ei[0] > ei[1] > ei[2] >= 0
    assert ei[3] > ei[2]  # same mean, more uncertainty: more to gain
    assert ei[0] == pytest.approx(0.5, abs=0.01)


def test_exploration_shrinks_as_the_budget_runs_out():
    weights = [decisions.exploration_weight(f) for f in (0.0, 0.5, 0.9, 1.0)]
    assert weights == sorted(weights, reverse=True) and weights[-1] > 0


def test_proposal_scores_weigh_gain_failure_and_seconds():
    mu = np.array([-0.2, -0.2, -0.2])
    sigma = np.full(3, 0.1)
    gain, per_second = decisions.score_proposals(mu, sigma, np.array([0.0, 0.0, 0.9]),
                                                 np.array([1.0, 4.0, 1.0]), best=0.0, exploration=1.0)
    assert gain[0] == pytest.approx(gain[1]) and gain[2] < gain[0]
    assert per_second[0] > per_second[1]  # same gain, cheaper
    assert per_second[0] > per_second[2]  # same cost, likely to fail


def test_measurement_cost_learns_fixed_and_per_candidate_seconds():
    cost = MeasurementCost(prior_seconds_per_candidate=2.0)
    assert cost.batch_seconds(10) == pytest.approx(20.0)
    for n, lat in ((16, 0.01), (4, 0.02), (8, 0.005), (12, 0.03)):
        cost.observe_batch(n, lat, 10.0 + 0.5 * n + 100.0 * lat)
    assert cost.per_batch == pytest.approx(10.0, rel=1e-6)
    assert cost.per_candidate == pytest.approx(0.5, rel=1e-6)
    assert cost.per_run_second == pytest.approx(100.0, rel=1e-6)
    # a candidate's share of a batch's fixed cost shrinks with the batch
    assert cost.predict(0.0, batch_size=20) < cost.predict(0.0, batch_size=2)


def test_batch_size_fits_what_is_left():
    cost = MeasurementCost(prior_seconds_per_candidate=1.0)
    assert decisions.batch_size(1000, cost, preferred=64, minimum=4) == 64
    assert decisions.batch_size(40, cost, preferred=64, minimum=4) == 40
    assert decisions.batch_size(2, cost, preferred=64, minimum=4) == 4
    assert stopping.overruns(remaining_seconds=2, batch_seconds=10)
    assert not stopping.overruns(remaining_seconds=6, batch_seconds=10)


def test_failure_model_learns_which_decisions_fail():
    model = FailureModel()
    assert model.probability(["a"]) == 0.0  # nothing seen: no reason to avoid anything
    for _ in range(6):
        model.observe(["tile=(4, 8)", "unroll=16"], failed=True)
        model.observe(["tile=(2, 2)", "unroll=16"], failed=False)
    bad = model.probability(["tile=(4, 8)", "unroll=64"])
    good = model.probability(["tile=(2, 2)", "unroll=64"])
    assert bad > 0.7 and good < bad
    assert model.worst_keys()[0][0] == "tile=(4, 8)"


def test_stop_rule_needs_the_rest_of_the_budget_to_pay():
    assert stopping.worth_continuing(1e-3, 100.0, 0.005)
    assert not stopping.worth_continuing(1e-5, 100.0, 0.005)


def test_the_pace_toward_a_kernel_outside_the_space_extrapolates_the_best_in_log_time():
    from kb_tvm.search.stopping import pace_toward

    # a best that halves with every doubling of the search's seconds: ln 2 of gain per ln 2 of time
    trajectory = [[t, 1e-3 / t] for t in (10.0, 20.0, 40.0)]
    assert pace_toward(trajectory[:1], 1e-6, 100.0, 1.0) is None  # one batch: no pace yet
    needed, in_reach = pace_toward(trajectory, 1e-5, 40.0, 1.0)  # the best, 2.5e-5, must fall 2.5x
    assert needed == pytest.approx(math.log(2.5))
    assert in_reach == pytest.approx(math.log(2.0))  # 40 s more: one more doubling
    assert pace_toward(trajectory, 1e-5, 40.0, 2.0)[1] == pytest.approx(2 * math.log(2.0))
    assert pace_toward(trajectory, 1e-5, 120.0, 1.0)[1] == pytest.approx(math.log(4.0))
    # no progress over the last half of its seconds: nothing is in reach, however long it runs
    stalled = [[10.0, 2e-5], [20.0, 1e-5], [40.0, 1e-5], [80.0, 1e-5]]
    assert pace_toward(stalled, 5e-6, 1e4, 2.0)[1] == 0.0
    # a bar above the best needs no gain (it is beaten already)
    assert pace_toward(stalled, 2e-5, 10.0, 2.0)[0] < 0


def test_one_small_batch_with_a_large_fixed_cost_does_not_inflate_the_per_candidate_cost():
    from kb_tvm.search.decisions import MeasurementCost, batch_size

    # the H200 case: 4 candidates took 55 s, almost all of it the batch's fixed cost
    cost = MeasurementCost(2.2)
    cost.observe_batch(4, 0.002, 55.0)
    assert cost.per_candidate == pytest.approx(2.2) and cost.per_batch == pytest.approx(55.0 - 8.8)
    assert cost.batch_seconds(32) < 120.0  # was 440 s: the task stopped with 62 s left
    # a full batch cheaper per candidate than the prior is taken as it is
    cheap = MeasurementCost(2.0)
    cheap.observe_batch(16, 0.01, 18.0)
    assert cheap.per_candidate == pytest.approx(18.0 / 16) and cheap.per_batch == pytest.approx(0.0)
    assert batch_size(62.0, cost, preferred=32, minimum=4) >= 4


def test_borrowed_schedules_go_alone_when_a_batch_is_cheap_to_start():
    cheap = MeasurementCost(0.3, per_batch=0.5)  # kb's pipeline
    costly = MeasurementCost(1.1, per_batch=45.0)  # stock's on a GPU
    assert decisions.warm_start_batch(4, cheap, remaining_seconds=120, preferred=64) == 4
    assert decisions.warm_start_batch(4, costly, remaining_seconds=120, preferred=64) == 64
    assert decisions.warm_start_batch(4, costly, remaining_seconds=36_000, preferred=64) == 4  # a 10-h job
    assert decisions.warm_start_batch(0, cheap, remaining_seconds=120, preferred=64) == 64  # nothing borrowed
    assert decisions.warm_start_batch(80, cheap, remaining_seconds=120, preferred=64) == 64  # more than a batch


def test_a_region_is_made_and_read_by_its_name_in_one_place():
    from kb_tvm.search.regions import Region

    region = Region(2, "wide-vector")
    assert region.name == "s2/wide-vector" and Region.from_name(region.name) == region
    with pytest.raises(ValueError, match="'outside:hopper_gemm': not of the form s<space>/<template>"):
        Region.from_name("outside:hopper_gemm")


def test_a_design_space_that_gave_no_valid_sample_in_enough_tries_stops_its_task():
    why = stopping.empty_space(tries=34, valid=0, known=0)
    assert why.startswith("none of its 34 samples passed MetaSchedule's postprocessors")
    assert stopping.empty_space(tries=34, valid=1, known=0) is None
    assert stopping.empty_space(tries=34, valid=0, known=1) is None  # a borrowed or measured schedule
    assert stopping.empty_space(tries=stopping.EMPTY_SPACE_TRIES - 1, valid=0, known=0) is None  # too few to say
