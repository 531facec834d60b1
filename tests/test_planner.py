"""The search's planner with plain numbers: no TVM, no schedules."""

import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from kb_tvm.budget import TuningBudget
from kb_tvm.search import decisions
from kb_tvm.search.decisions import MeasurementCost
from kb_tvm.search.options import SearchOptions
from kb_tvm.search.planner import Planner


@dataclass
class Item:
    regions: tuple
    latencies: list = field(default_factory=list)
    failures: int = 0
    keys: list = field(default_factory=list)

    @property
    def measured(self):
        return bool(self.latencies)

    @property
    def latency(self):
        return float(np.median(self.latencies)) if self.latencies else math.inf


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _planner(total=100.0, **options):
    clock = Clock()
    budget = TuningBudget(total, clock=clock).start()
    plan = Planner(options=SearchOptions(**options), budget=budget, trials_per_batch=8, max_trials=1000,
                   num_cores=2, cost=MeasurementCost(1.0))
    return plan, clock


def test_coarse_batches_go_round_robin_over_regions_that_need_measurements_borrowed_first():
    plan, _ = _planner(coarse_trials_per_region=1)
    a = [Item(("s0/a",)) for _ in range(3)]
    b = [Item(("s0/b",)) for _ in range(3)]
    pinned = [Item(("s0/b",))]
    plan.count_samples(a + b + pinned, [])
    batch, left = plan.pick_coarse(a + b, pinned, 3)  # ranked: all of a before any of b
    assert batch == [pinned[0], a[0], b[0]] and left == []  # one of each region, not a's three best
    batch, _ = plan.pick_coarse(a + b, [], 4)  # every region had its turn: the rest by rank
    assert batch == [a[0], b[0], a[1], a[2]]


def test_the_coarse_phase_ends_when_regions_are_measured_or_its_budget_share_is_spent():
    plan, clock = _planner(coarse_trials_per_region=1, coarse_max_fraction=0.25)
    pool = [Item(("s0/a",)), Item(("s0/b",))]
    plan.count_samples(pool, [])
    assert not plan.coarse_done(pool)  # never before a first batch
    pool[0].latencies.append(1e-3)
    plan.tell([pool[0]], [(1e-3, None)], ["sample"], 1.0)
    assert not plan.coarse_done(pool)  # region b has no measurement yet
    clock.now = 30.0  # past 25% of 100 s
    assert plan.coarse_done(pool)


def test_a_resumed_search_does_not_redo_the_coarse_phase_of_an_earlier_run():
    rows = [{"origin": "sample", "regions": ["s0/a"], "measured_ms": 2.0},
            {"origin": "sample", "regions": ["s0/a"], "measured_ms": None, "error": "build: x"},
            {"origin": "remeasure", "regions": ["s0/a"], "measured_ms": 1.0},  # not a region trial
            {"origin": "sample", "regions": ["s0/b"], "measured_ms": 3.0}]
    pool = [Item(("s0/a",)), Item(("s0/b",)), Item(("s0/c",))]
    # the earlier run had measured a and b but was killed before it ranked the regions:
    # only c, which it never measured, still needs coarse batches
    plan, _ = _planner(coarse_trials_per_region=2)
    plan.restore(rows, coarse_finished=False)
    plan.count_samples(pool, [])
    assert (plan.regions["s0/a"].trials, plan.regions["s0/a"].failures) == (2, 1)
    assert plan.regions["s0/a"].best_log_latency == math.log(2e-3)
    assert not plan.coarse_done(pool)
    batch, _ = plan.pick_coarse(pool, [], 2)
    assert batch[0] is pool[2]  # c first: a is done, b has one of two trials
    # ...and it had ranked them: the coarse phase is over before this run measures anything
    plan, _ = _planner(coarse_trials_per_region=2)
    plan.restore(rows, coarse_finished=True, cost={"per_candidate_s": 0.3, "per_batch_s": 4.0, "per_run_second": 2.0})
    plan.count_samples(pool, [])
    assert plan.coarse_done(pool) and plan.batches == 0
    assert (plan.cost.per_candidate, plan.cost.per_batch) == (0.3, 4.0)  # what measuring cost before
    # a fresh search still waits for its first batch
    plan, _ = _planner(coarse_trials_per_region=2)
    plan.count_samples(pool, [])
    assert not plan.coarse_done(pool)


def test_regions_kept_are_the_best_measured_and_failures_count_against_them():
    plan, _ = _planner(keep_regions=1)
    fast, slow = Item(("s0/fast",), [1e-3]), Item(("s0/slow",), [4e-3])
    plan.count_samples([fast, slow], [])
    plan.tell([fast, slow], [(1e-3, None), (4e-3, None)], ["sample", "sample"], 2.0)
    rows = plan.keep_regions({}, ())
    assert plan.kept_regions == ["s0/fast"]
    assert [kept for _, _, kept, _ in rows] == [True, False]


def test_a_faster_region_outside_the_space_takes_a_kept_place_and_a_slower_one_none():
    from kb_tvm.search.decisions import RegionStats

    items = [Item((f"s0/{name}",), [seconds]) for name, seconds in (("a", 1e-3), ("b", 2e-3), ("c", 3e-3))]

    def keep(outside_s):
        plan, _ = _planner(keep_regions=2)
        plan.count_samples(items, [])
        plan.tell(items, [(i.latency, None) for i in items], ["sample"] * 3, 2.0)
        outside = RegionStats(name="template", sampled=1, measured_log_latencies=[math.log(outside_s)])
        rows = plan.keep_regions({}, (), outside)
        return plan.kept_regions, [(r.name, kept) for r, _, kept, _ in rows]

    kept, rows = keep(0.2e-3)  # 5x faster than the space's best: ranked first, one MetaSchedule region left
    assert kept == ["s0/a"] and rows[:2] == [("template", True), ("s0/a", True)]
    kept, rows = keep(50e-3)  # far slower: ranked last, the space keeps both places
    assert kept == ["s0/a", "s0/b"] and rows[-1] == ("template", False)


def test_parents_are_the_best_of_kept_regions_and_fewer_when_refining():
    plan, clock = _planner(elites=3, refine_elites=1, refine_after=0.5)
    plan.kept_regions = ["s0/a"]
    items = [Item(("s0/a",), [t]) for t in (3e-3, 1e-3, 2e-3, 4e-3)] + [Item(("s0/b",), [0.5e-3])]
    assert [p.latency for p in plan.parents(items)] == [0.5e-3, 1e-3, 2e-3]  # overall best always
    assert not plan.refine_due()
    clock.now = 60.0
    assert plan.refine_due() and not plan.refine_due()  # once
    assert [p.latency for p in plan.parents(items)] == [0.5e-3]


def test_exploration_and_fresh_samples_fall_as_the_budget_runs_out():
    plan, clock = _planner(explore_share=0.3, generations=3, proposals_per_trial=6)
    early = plan.proposal_split(48, have_parents=True, model_informed=True)
    clock.now = 80.0
    late = plan.proposal_split(48, have_parents=True, model_informed=True)
    assert early[0] > late[0] >= 0
    assert early[1] == 3 and early[2] * 3 >= 48 - early[0]
    assert plan.proposal_split(48, have_parents=True, model_informed=False)[1] == 1  # no model: one step
    assert plan.proposal_split(48, have_parents=False, model_informed=True) == (48, 0, 0)
    assert plan.exploration() < 2.0


def test_scoring_prefers_gain_per_second_and_avoids_decisions_that_failed():
    plan, _ = _planner()
    bad = ["tile=(64, 64)"]
    for _ in range(3):
        plan.failures.observe(bad, True)
    for _ in range(20):
        plan.failures.observe(["tile=(8, 8)"], False)
    plan.cost.per_run_second = 3.0  # each kernel second costs three in repeats
    mu = np.log(np.array([1e-3, 1e-3, 1e-3]))
    sigma = np.array([0.3, 0.3, 0.3])
    scores = plan.score(mu, sigma, [[], bad, []], np.array([1e-3, 1e-3, 10.0]), math.log(1.1e-3), batch_size=3)
    # same prediction: the one whose decision failed before and the one that runs 10 s rank last
    assert list(scores["order"][:1]) == [0]
    assert scores["per_second"][0] > scores["per_second"][1] and scores["per_second"][0] > scores["per_second"][2]


def test_the_best_few_are_remeasured_up_to_a_limit():
    plan, _ = _planner(remeasure_top=2, remeasure_times=2, remeasure_share=0.25)
    items = [Item(("r",), [t]) for t in (1e-3, 2e-3, 3e-3)]
    items[1].latencies.append(2e-3)  # measured twice already
    assert plan.remeasure(items, 8) == [items[0]]


def test_a_search_stops_when_the_budget_is_spent_a_batch_would_overrun_or_gains_dry_up():
    plan, clock = _planner(total=100.0, patience=2, min_total_gain=0.01)
    assert plan.why_stop() is None and plan.batch_size(0) == 8
    plan.batches = 1
    plan.cost.per_batch, plan.cost.per_candidate = 40.0, 1.0
    clock.now = 80.0  # 20 s left, a batch costs >= 44 s
    assert plan.batch_size(0) is None and "overrun" in plan.stop_reason
    plan, _ = _planner(patience=2, min_total_gain=0.01)
    plan.check_worth(1e-9, model_trained=True)
    assert plan.stop_reason is None
    plan.check_worth(1e-9, model_trained=True)
    assert "expected gain" in plan.stop_reason
    plan, clock = _planner(total=10.0)
    clock.now = 11.0
    assert plan.why_stop() == "budget spent"


def test_with_a_faster_kernel_outside_the_space_the_first_batch_only_probes():
    plan, _ = _planner(total=100.0)
    assert plan.batch_size(0, probe=True) == 2  # a quarter of 8, no fewer than the 2 cores
    plan.batches = 1
    assert plan.batch_size(0, probe=True) == 8  # later batches are full
    plan, _ = _planner(total=100.0)
    assert plan.batch_size(0) == 8


def test_a_first_batch_measures_what_ranking_the_regions_needs_not_the_whole_pool():
    plan, _ = _planner(total=100.0, coarse_trials_per_region=2)
    plan.count_samples([Item((f"s0/{name}",)) for name in "abc" for _ in range(20)], [])
    assert plan.batch_size(0) == 6  # two for each of three regions, of a batch of 8
    assert plan.batch_size(7) == 7  # borrowed schedules waiting all go first
    plan.batches = 1
    assert plan.batch_size(0) == 8  # later batches are full
    plan, _ = _planner(total=100.0, coarse_trials_per_region=2)
    plan.count_samples([Item(("s0/a",)) for _ in range(20)], [])
    assert plan.batch_size(0) == 2  # one region: no fewer than the 2 cores
    plan.restore([], coarse_finished=True)  # an earlier run ranked them: a full batch
    assert plan.batch_size(0) == 8


def test_a_first_batch_is_cut_to_whole_rounds_of_the_builders_parallel_builds():
    # a ViT job's numbers on an H100: 64 a batch, 16 cores, 15 build workers; a layer norm's
    # 12 regions want 24, a GEMM's probe a quarter batch
    def gpu_planner():
        return Planner(options=SearchOptions(coarse_trials_per_region=2), budget=TuningBudget(300.0).start(),
                       trials_per_batch=64, max_trials=1000, num_cores=16, cost=MeasurementCost(1.0),
                       build_workers=15)

    plan = gpu_planner()
    plan.count_samples([Item((f"s0/r{i}",)) for i in range(12) for _ in range(5)], [])
    assert plan.batch_size(0) == 15  # one round, not 24: the coarse phase goes on in the next batch
    assert plan.batch_size(20) == 20  # borrowed schedules waiting all go first
    assert gpu_planner().batch_size(0, probe=True) == 15  # a quarter of 64 is 16: a 16th build waits
    plan.batches = 1
    assert plan.batch_size(0) == 64  # later batches are full
    # two build workers (a 2-core CPU): whole rounds of two, as ranking the regions wants
    assert decisions.whole_rounds(24, 2) == 24 and decisions.whole_rounds(7, 2, at_least=7) == 7
    assert decisions.whole_rounds(5, 15) == 5  # less than a round is kept whole


def test_a_search_stops_when_its_pace_would_not_reach_a_faster_kernel_outside_its_space():
    # a 90-s tune-op of gemm-4096-fp16 on an H200: the template's kernel at
    # 0.2335 ms in 7 s, MetaSchedule's best after each batch (own seconds); the model's
    # expected gain stayed above its floor and the regions spent the whole budget
    trajectory = [[10.8, 0.9604e-3], [20.0, 0.7177e-3], [28.9, 0.5108e-3], [37.4, 0.49e-3]]
    plan, clock = _planner(total=90.0)
    clock.now = 58.0
    plan.check_bar(trajectory[:3], 0.2335e-3)  # too few batches to judge a pace
    assert plan.stop_reason is None
    plan.check_bar(trajectory, None)  # no kernel outside
    plan.check_bar(trajectory, 0.6e-3)  # beaten already
    assert plan.stop_reason is None
    plan.direct("explore")
    plan.check_bar(trajectory, 0.2335e-3)  # the agent decides when to stop
    assert plan.stop_reason is None
    plan.direct(None)
    plan.check_bar(trajectory, 0.2335e-3)
    assert plan.stop_reason.startswith("at its pace") and "2.10x it needs" in plan.stop_reason
    plan, clock = _planner(total=240.0)  # the same search with 240 s: 182 s left, keep going
    clock.now = 58.0
    plan.check_bar(trajectory, 0.2335e-3)
    assert plan.stop_reason is None


def test_a_task_first_scheduled_late_in_a_shared_budget_paces_on_its_own_clock():
    # the job is 90% spent when this task starts: on the job's clock it would skip straight
    # to refining; on its own (0 of the 40 s its share says it gets) it is at the start
    clock = Clock()
    job = TuningBudget(400.0, clock=clock).share_among_tasks().start()
    clock.now = 360.0
    task = job.task("fused_matmul")
    task.charge(0.0, expected_seconds=40.0)
    plan = Planner(options=SearchOptions(coarse_trials_per_region=1, coarse_max_fraction=0.25), budget=task,
                   trials_per_batch=8, max_trials=1000, num_cores=2, cost=MeasurementCost(1.0))
    assert not plan.refine_due() and plan.exploration() > 1.0
    pool = [Item(("s0/a",)), Item(("s0/b",))]
    plan.count_samples(pool, [])
    pool[0].latencies.append(1e-3)
    plan.tell([pool[0]], [(1e-3, None)], ["sample"], 1.0)
    clock.now = 390.0  # the job's clock moves (other tasks' batches): not this task's coarse phase
    assert not plan.coarse_done(pool)
    task.charge(12.0, expected_seconds=40.0)  # its own batches took 30% of its share
    assert plan.coarse_done(pool)
    task.charge(36.0, expected_seconds=40.0)
    assert plan.refine_due()
    assert plan.budget.remaining == 10.0  # the hard limit stays the job's


def test_a_meta_policy_directs_the_fine_phase_in_place_of_the_rules():
    plan, clock = _planner(explore_share=0.3, generations=3, proposals_per_trial=6, patience=1)
    clock.now = 90.0  # the rules would refine now, with no fresh samples and no exploration
    plan.direct("explore")
    assert not plan.refine_due() and not plan.refining
    assert plan.proposal_split(48, have_parents=True, model_informed=True)[0] > 0
    assert plan.exploration() == 2.0
    plan.check_worth(0.0, model_trained=True)  # the agent, not the gain rule, decides when to stop
    assert plan.stop_reason is None
    plan.direct("exploit")
    assert plan.proposal_split(48, have_parents=True, model_informed=True)[0] == 0
    assert plan.exploration() == plan.opt.min_exploration
    plan.direct("refine")
    assert plan.refining and plan.exploration() == 0.0
    plan.direct(None)  # back to the rules: they stop a search whose gains dried up
    plan.check_worth(0.0, model_trained=True)
    assert "expected gain" in plan.stop_reason
    plan, _ = _planner()
    plan.direct("stop")
    assert plan.stop_reason == "the agent stopped it" and plan.why_stop() == "the agent stopped it"
    with pytest.raises(ValueError, match="macro-action 'wander'"):
        plan.direct("wander")
