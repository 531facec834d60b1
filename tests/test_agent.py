"""The agent trained offline in the replay environment, on made-up datasets (no TVM)."""

import numpy as np
import pytest
from replay_helpers import bowl, made_up

from kb_tvm.agent import FEATURES, MacroPolicy, collect, fit
from kb_tvm.replay import ReplayEnv, RulesPolicy


@pytest.fixture(scope="module")
def trained():
    """Trained where every schedule is as fast as the next (nothing to gain) and on a bowl with
    a 30% gain to find; seconds are dear (a whole budget of them costs 0.5 in log-latency).
    16 episodes each: with 8, what the agent learnt of the first state changed with the seed."""
    flat, curved = made_up(lambda i, j, u: 2e-5), made_up(bowl)
    transitions = collect([flat, curved], budget=60, episodes=16, seed=0, seconds_cost=0.5, jobs=2)
    return fit(transitions, source="made-up"), flat, curved


def _first_macro(policy, dataset):
    env = ReplayEnv(dataset, budget=60)
    run = RulesPolicy(steer=policy)
    run.run(env, seed=1)
    return next(e for e in run.events if e["event"] == "macro"), env


def test_the_agent_learns_to_stop_where_gains_vanish(trained):
    policy, flat, curved = trained
    first, env = _first_macro(policy, flat)
    assert first["action"] == "stop" and first["source"] == "policy"
    assert env.seconds < 10  # one coarse batch (9 s) and no more, of a 60-s budget
    first, env = _first_macro(policy, curved)
    # where there is a gain to find it goes on past the coarse batch (how far, the reward decides)
    assert first["action"] != "stop" and env.seconds > 10


def test_the_rules_take_over_out_of_distribution(trained):
    policy = trained[0]
    state = (policy.low + policy.high) / 2
    state[FEATURES.index("failure_rate")] = 50.0  # never seen in training
    action, why = policy.choose(state)
    assert action is None and why["source"] == "fallback" and "failure_rate" in why["why"]


def test_a_saved_agent_decides_as_the_trained_one(trained, tmp_path):
    policy = trained[0]
    loaded = MacroPolicy.load(policy.save(tmp_path / "agent.json"))
    states = np.stack([policy.low, (policy.low + policy.high) / 2, policy.high])
    assert np.allclose(loaded.mean_values(states), policy.mean_values(states))
    assert [loaded.choose(s)[0] for s in states] == [policy.choose(s)[0] for s in states]
    (tmp_path / "bad.json").write_text('{"schema": "other"}')
    with pytest.raises(ValueError, match="not an agent of schema"):
        MacroPolicy.load(tmp_path / "bad.json")


def test_a_wider_margin_hands_more_decisions_to_the_rules_and_is_kept_when_saved(trained, tmp_path):
    policy = trained[0]
    rng = np.random.default_rng(0)
    states = policy.low + rng.uniform(0, 1, size=(200, len(FEATURES))) * (policy.high - policy.low)

    def chosen(margin):
        wide = MacroPolicy(models=policy.models, low=policy.low, high=policy.high, margin=margin)
        return sum(wide.choose(s)[0] is not None for s in states), wide

    bold, _ = chosen(0.0)
    careful, wide = chosen(50.0)
    assert careful < bold  # an action the ensemble barely prefers goes back to the rules
    assert MacroPolicy.load(wide.save(tmp_path / "wide.json")).margin == 50.0
    with pytest.raises(ValueError, match="margin=-1"):
        MacroPolicy(models=policy.models, low=policy.low, high=policy.high, margin=-1)


@pytest.mark.tuning
def test_the_shipped_agent_steers_a_real_tune(tmp_path):
    """llvm, real builds and runs: every fine-phase batch of `tune-op --strategy agent` was
    chosen by the agent or handed back to the rules, and the decision log says which and why."""
    import json

    from click.testing import CliRunner

    from kb_tvm.cli import main
    from kb_tvm.decision_log import read_log

    out = tmp_path / "result.json"
    # a layer norm, which no kernel family takes: on a GEMM (batched ones too, since the CPU GEMM
    # family takes attention's) the family's kernel is the bar, and MetaSchedule's search stops
    # before its fine phase when it cannot pass it. Not the softmax: some of its deep-unroll
    # schedules take LLVM 15 s to build before they are cut, which made this test 29-60 s long.
    # A trial cap, not a tight budget, ends the run: its coarse phase ends once every region is
    # measured (~36 trials), and a slow machine whose first batch eats a 20 s budget still
    # reaches the fine phase
    result = CliRunner().invoke(main, ["tune-op", "layernorm-128x768", "--strategy", "agent", "--budget",
                                       "90s", "--max-trials", "44", "--target", "llvm", "--seed", "1",
                                       "--trials-per-batch", "4", "--no-experience", "--work-dir", str(tmp_path / "w"),
                                       "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["strategy"] == "agent"
    (log_path,) = (tmp_path / "w" / "kb_logs").glob("*.jsonl")
    events = read_log(log_path)
    macros = [e for e in events if e["event"] == "macro"]
    fine = [e for e in events if e["event"] == "proposals"]
    assert fine and len(macros) >= len(fine), result.output
    for e in macros:
        assert e["action"] in ("explore", "exploit", "refine", "stop", "rules") and e["why"]
        assert set(e["state"]) == set(FEATURES) and e["source"] in ("policy", "fallback")
