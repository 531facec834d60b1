"""The replay environment on small made-up datasets (no TVM, no measurements) and on a shipped
recorded one through the CLI."""

import gzip
import itertools
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from replay_helpers import TILES, UNROLL, bowl, made_up, trace_of

from kb_tvm.cli import main
from kb_tvm.replay import (
    POLICIES,
    Dataset,
    NeighbourSurrogate,
    ReplayEnv,
    build_dataset,
    catalog,
)
from kb_tvm.replay.dataset import decision_key


def test_the_clock_advances_by_the_recorded_costs_of_each_batch():
    """16 per batch (llvm): 1 s fixed + 16 x 0.5 s of builds over 2 builders + 16 x 0.25 s of runs."""
    env = ReplayEnv(made_up(bowl), budget=20)
    POLICIES["random"]().run(env, seed=0)
    assert [p["seconds"] for p in env.curve] == [9.0, 18.0, 27.0]  # the third starts at 18 s, before 20
    assert env.trials == 48 and env.budget.spent == 27.0 and env.budget.exhausted
    # a dataset that recorded its runs' starts charges one before the first batch
    started = made_up(bowl)
    started.start_s = 4.0
    env = ReplayEnv(started, budget=20)
    POLICIES["random"]().run(env, seed=0)
    assert [p["seconds"] for p in env.curve] == [13.0, 22.0]


def test_a_mutation_not_measured_is_proposed_again_in_a_later_round():
    """Only what was measured is spent. kb's search ranks several mutations per measurement and
    drops those it does not choose (it keeps its samples): when each proposal was spent, the
    recorded space ran out and most held-out replays ended early."""
    from kb_tvm.replay.policies import ReplayFactory

    env = ReplayEnv(made_up(bowl), budget=60)
    factory = ReplayFactory(env, rng=np.random.default_rng(0))

    def keys(cands):
        return {(c.sch.sketch, c.sch.decisions) for c in cands}

    parents = factory.sample(0, 2)
    env.measure([parents[0].sch])
    children = factory.mutate(parents[:1], 6, small_steps=False, deadline=math.inf)
    assert len(children) == 6 and not keys(children) & keys(parents)  # a sample is the search's to keep
    assert not keys(children) & keys(factory.mutate(parents[:1], 6, small_steps=False, deadline=math.inf))
    env.measure([children[0].sch])  # the next round: the five not measured may come again
    again = factory.mutate(parents[:1], env.dataset.size, small_steps=False, deadline=math.inf)
    assert keys(children[1:]) & keys(again) and not keys(children[:1]) & keys(again)


@pytest.mark.parametrize("policy", ["rules", "evolutionary", "random"])
def test_a_replay_is_the_same_for_the_same_seed(policy):
    runs = []
    for _ in range(2):
        env = ReplayEnv(made_up(bowl), budget=40)
        POLICIES[policy]().run(env, seed=3)
        runs.append(env.summary())
    assert runs[0] == runs[1] and runs[0]["trials"] > 0


def test_the_rules_take_the_batch_size_they_are_given():
    from kb_tvm.replay.policies import RulesPolicy

    sizes = {}
    for batch in (None, 4):
        env = ReplayEnv(made_up(bowl), budget=30)
        RulesPolicy(trials_per_batch=batch).run(env, seed=0)
        sizes[batch] = [b - a for a, b in zip([0] + [p["trials"] for p in env.curve], [p["trials"] for p in env.curve])]
    assert max(sizes[None]) == 16 and sizes[4] and max(sizes[4]) == 4  # 16: tune-op's on llvm
    with pytest.raises(ValueError, match="trials_per_batch=0: at least 1"):
        RulesPolicy(trials_per_batch=0)


def test_kbs_rules_run_their_own_phases_and_find_the_bottom_of_thebowl():
    env = ReplayEnv(made_up(bowl), budget=60)
    policy = POLICIES["rules"]()
    policy.run(env, seed=0)
    events = [e["event"] for e in policy.events]
    assert events[:2] == ["coarse-sampled", "batch"] and "regions" in events and "proposals" in events
    assert events[-1] == "stop"
    assert env.best_s <= 1.1e-5 * 1.0001  # 144 schedules; the best is 1.0e-5 and its neighbours 1.1e-5
    assert env.surrogate_trials == 0


def test_when_evolution_finds_nothing_new_the_search_samples_and_stops_only_when_the_space_is_spent(monkeypatch):
    """Mutation can come back empty (every child seen before, or a busy machine out of proposing
    time before one was new): kb's search samples instead of stopping the task, refining too,
    and says it found no candidate only once the space has none left."""
    from kb_tvm.replay.policies import ReplayFactory, RulesPolicy
    from kb_tvm.search.options import SearchOptions

    monkeypatch.setattr(ReplayFactory, "mutate", lambda self, parents, count, **_: [])
    options = SearchOptions(min_total_gain=0.0)  # no stop for want of gain: this is about candidates
    # 60 s: refining from 51 s (no fresh samples planned), with most of the 144 schedules unmeasured
    env = ReplayEnv(made_up(bowl), budget=60)
    policy = RulesPolicy(options=options)
    policy.run(env, seed=0)
    assert any(e["event"] == "phase" and e["phase"] == "refine" for e in policy.events)
    assert policy.events[-1]["reason"] != "no new valid candidate could be generated"
    assert env.budget.exhausted or "overrun" in policy.events[-1]["reason"]
    refined = [c for e in policy.events if e["event"] == "batch" and e["phase"] == "refine" for c in e["candidates"]]
    assert any(c["origin"] == "sample" for c in refined)

    spent = ReplayEnv(made_up(bowl), budget=10_000)
    policy = RulesPolicy(options=options)
    policy.run(spent, seed=0)
    assert [e["event"] for e in policy.events][-2:] == ["widened", "stop"]
    assert policy.events[-1]["reason"] == "no new valid candidate could be generated"
    assert not spent.budget.exhausted and spent.best_s == pytest.approx(1e-5)
    remeasured = sum(c["origin"] == "remeasure" for e in policy.events if e["event"] == "batch" for c in e["candidates"])
    assert spent.trials - remeasured == spent.dataset.size  # fresh samples not chosen were kept for later


def test_a_schedule_the_dataset_lacks_snaps_to_a_recorded_one_or_asks_the_surrogate():
    data = made_up(bowl)
    data.points = [p for p in data.points if p.decisions != ((2, TILES[3]), (4, TILES[2]), (7, UNROLL[2]))]
    data = Dataset(**{k: getattr(data, k) for k in ("name", "workload", "task", "target", "points", "per_batch_s",
                                                      "builders")})
    missing = ((2, TILES[3]), (4, TILES[2]), (7, UNROLL[2]))
    snapped = ReplayEnv(data, budget=10)
    q = snapped.lookup("a", missing)
    assert q.decisions != missing and sum(a != b for a, b in zip(q.decisions, missing)) == 1
    assert snapped.measure([q])[0].surrogate is False and snapped.surrogate_trials == 0
    assert snapped.lookup("a", missing, avoid={("a", q.decisions)}).decisions not in (missing, q.decisions)

    asked = ReplayEnv(data, budget=10, snap=False)
    q = asked.lookup("a", missing)
    assert q.decisions == missing
    outcome = asked.measure([q])[0]
    neighbours = [data.points[i].latency_s for i in asked.surrogate.neighbours("a", missing)[:5]]
    assert outcome.surrogate and outcome.latency_s == pytest.approx(math.exp(np.mean(np.log(neighbours))))
    summary = asked.summary()
    assert summary["surrogate_trials"] == 1 and summary["best_from_surrogate"]


def test_the_surrogates_error_is_measured_on_the_dataset():
    smooth = NeighbourSurrogate(made_up(bowl)).error
    rng = np.random.default_rng(0)
    noise = {key: float(rng.uniform(1e-5, 1e-4)) for key in itertools.product(range(6), range(6), range(4))}
    random = NeighbourSurrogate(made_up(lambda *key: noise[key])).error
    assert smooth["median_relative_error"] < random["median_relative_error"]
    assert smooth["rank_correlation"] > 0.5 > random["rank_correlation"]
    failing = NeighbourSurrogate(made_up(bowl, fail=lambda key: key[0] == 0)).error
    assert 0.8 < failing["failure_agreement"] <= 1.0


def test_a_dataset_merges_the_runs_of_one_workload(tmp_path):
    from kb_tvm.measure.candidate_log import CandidateLog, CandidateRow

    target = json.dumps({"kind": "llvm", "num-cores": 2})

    def row(decisions, latency, *, batch, job_s, strategy, workload="w1", error=None):
        return CandidateRow(task="t1" if workload == "w1" else "t2", workload=workload, target=target, sketch="a",
                            trace=trace_of(decisions), latency_s=None if latency is None else [latency, latency],
                            error=error, build_s=0.4, run_s=0.1, run_verdict=None, job_s=job_s, batch=batch,
                            features=[1.0, 2.0], strategy=strategy)

    same, other, bad = ((2, "[1,4]"),), ((2, "[2,2]"),), ((2, "[4,1]"),)
    first, second = CandidateLog(tmp_path / "kb.jsonl"), CandidateLog(tmp_path / "random.jsonl.gz")
    first.append([row(same, 2e-5, batch=0, job_s=3.0, strategy="kb"), row(bad, None, batch=0, job_s=3.0,
                  strategy="kb", error="build: no"), row(other, 5e-5, batch=1, job_s=6.0, strategy="kb"),
                  row(same, 9e-5, batch=1, job_s=6.0, strategy="kb", workload="w2")])
    with gzip.open(tmp_path / "random.jsonl.gz", "wt") as f:
        f.write(json.dumps({**vars(row(same, 4e-5, batch=0, job_s=2.0, strategy="random")), "kind": "candidate",
                            "schema": "kb-tvm/candidates/1"}) + "\n")
    with pytest.raises(ValueError, match="2 workloads"):
        build_dataset([first.path, second.path], name="d")
    data = build_dataset([first.path, second.path], name="d", workload="w1")
    assert data.size == 3 and data.task == "t1"
    merged = data.points[data.index[("a", decision_key(trace_of(same)))]]
    assert merged.latency_s == pytest.approx(3e-5) and merged.strategies == ("kb", "random")
    failed = data.points[data.index[("a", decision_key(trace_of(bad)))]]
    assert failed.latency_s is None and failed.error == "build: no"
    # kb's batch 1 came 3 s after batch 0, and its two candidates (both workloads) cost 0.4 / 2 + 0.1 each
    assert data.per_batch_s == pytest.approx(3.0 - 2 * 0.3) and data.per_batch_by_strategy == {"kb": data.per_batch_s}
    # the runs' starts: kb's first batch ended at 3 s after 0.6 s of work, random's at 2 s after 0.3
    assert data.start_s == pytest.approx(((3.0 - 0.6) + (2.0 - 0.3)) / 2)
    assert data.uniform_indices == [data.index[("a", decision_key(trace_of(same)))]]
    saved = Dataset.load(data.save(tmp_path / "d.jsonl.gz"))
    assert saved.header() == data.header() and saved.keys == data.keys


def test_replay_from_the_command_line_on_a_shipped_dataset(tmp_path):
    shipped = catalog.entries()
    assert shipped, "kb_tvm/replay/data holds at least one dataset"
    listed = CliRunner().invoke(main, ["replay", "--list"])
    assert listed.exit_code == 0 and all(e.name in listed.output for e in shipped)
    out = tmp_path / "replay.json"
    result = CliRunner().invoke(main, ["replay", shipped[0].name, "--policy", "evolutionary", "--budget", "30s",
                                       "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())
    assert summary["policy"] == "evolutionary" and summary["seconds"] >= 30 and summary["curve"]
    assert 0 < summary["area_under_curve"] <= 1 and summary["best_ms"] >= summary["dataset_best_ms"]
    wrong = CliRunner().invoke(main, ["replay", "no-such-dataset"])
    assert wrong.exit_code == 1 and "no dataset 'no-such-dataset'" in wrong.output
    assert len(wrong.output.strip().splitlines()) == 1


def test_a_faster_kernel_outside_the_space_stops_the_search_once_beating_it_no_longer_pays():
    """tune-op's Hopper template region: MetaSchedule's regions are ranked and measured as ever, then
    searched only while they are expected to beat the template's kernel."""
    from kb_tvm.replay.policies import RulesPolicy

    runs = {}
    for outside in (None, 2e-5, 3e-6):  # none; slower than the space's best (1e-5); far faster
        env = ReplayEnv(made_up(bowl), budget=200)
        policy = RulesPolicy(outside_best_s=outside)
        policy.run(env, seed=0)
        runs[outside] = (env.seconds, env.trials, policy.events, env.best_s)
    # a kernel outside makes the first batch a probe (a quarter batch), as one region's coarse
    # need (two, no fewer than that quarter) makes it without; a slower kernel outside changes
    # nothing else: the same best is found
    first = [len(next(e["candidates"] for e in run[2] if e["event"] == "batch")) for run in runs.values()]
    assert first == [4, 4, 4]
    assert runs[None][3] == runs[2e-5][3] == pytest.approx(1e-5)
    seconds, trials, events, _ = runs[3e-6]
    # the coarse phase ranked the kernel outside beside the space's regions, first
    ranking = next(e["regions"] for e in events if e["event"] == "regions")
    assert ranking[0]["region"] == "outside" and ranking[0]["kept"]
    assert ranking[0]["best_ms"] == pytest.approx(3e-3)
    slower = next(e["regions"] for e in runs[2e-5][2] if e["event"] == "regions")
    assert [r["region"] for r in slower] == ["s0/sketch", "outside"]
    assert seconds < runs[None][0] and trials < runs[None][1]
