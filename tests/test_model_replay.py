"""The model-level replay (kb_tvm/replay/model.py): a model's tasks on one clock, their batches
given out by an allocator, judged by the model's latency over time."""

import pytest
from replay_helpers import bowl, made_up

from kb_tvm.replay.env import Clock
from kb_tvm.replay.model import (
    ALLOCATORS,
    Batch,
    ModelTask,
    Scripted,
    kb_rule,
    load_model,
    model_tasks,
    replay_model,
    round_robin,
)


def scripted(clock, name, weight, default_s, bests, seconds=1.0):
    return ModelTask(name=name, weight=weight, default_s=default_s,
                     source=Scripted([Batch(seconds, 16, best) for best in bests], clock))


def heavy_and_light(clock, *more):
    return [scripted(clock, "heavy", 10, 1.0, [0.5, 0.25, 0.2, 0.1]),
            scripted(clock, "light", 1, 1.0, [0.8, 0.5, 0.5, 0.5]), *more]


def test_the_model_latency_is_the_weighted_sum_of_each_tasks_best_so_far():
    clock = Clock()
    run = replay_model(heavy_and_light(clock), round_robin, budget_s=100, clock=clock)
    assert run.choices == ["heavy", "light"] * 4  # then both searches stop
    assert [v for _, v in run.curve] == pytest.approx([11, 6, 5.8, 3.3, 3.0, 2.5, 2.5, 1.5, 1.5])
    assert run.latency_at(0) == 11 and run.latency_at(2.5) == pytest.approx(5.8)
    assert run.best_possible_s == pytest.approx(10 * 0.1 + 0.5) == run.curve[-1][1]
    # mean over 100 s: 11 for 1 s, 6, 5.8, 3.3, 3.0, 2.5, 2.5 for 1 s each, then 1.5 for 93 s
    assert run.mean_latency() == pytest.approx((11 + 6 + 5.8 + 3.3 + 3.0 + 2.5 + 2.5 + 1.5 * 93) / 100)


def test_a_default_schedule_counts_until_a_batch_beats_it():
    clock = Clock()
    run = replay_model([scripted(clock, "slow", 1, 0.3, [0.6, 0.4, 0.2])], round_robin, budget_s=10, clock=clock)
    assert [v for _, v in run.curve] == pytest.approx([0.3, 0.3, 0.3, 0.2])


def test_the_budget_ends_the_replay_after_the_batch_that_crosses_it():
    clock = Clock()
    run = replay_model(heavy_and_light(clock), round_robin, budget_s=2.5, clock=clock)
    assert len(run.choices) == 3 and run.curve[-1][0] == 3.0


def test_a_stopped_search_retires_its_task_and_choosing_it_again_is_an_error():
    clock = Clock()
    with pytest.raises(ValueError, match="'light', which is retired \\(its search stopped\\)"):
        replay_model(heavy_and_light(clock), lambda tasks, left, total: 1, budget_s=100, clock=clock)


def test_kb_rule_gives_the_heavy_task_more_and_skips_a_trivial_one():
    runs = {}
    for label, allocator in (("rule", kb_rule), ("round_robin", round_robin)):
        clock = Clock()
        tasks = heavy_and_light(clock, scripted(clock, "trivial", 1, 0.001, [0.0005] * 4))
        runs[label] = replay_model(tasks, allocator, budget_s=6, clock=clock)
    assert "trivial" not in runs["rule"].choices  # 0.01% of model time under its default: keeps it
    assert runs["rule"].choices[0] == "heavy"
    assert runs["rule"].choices.count("heavy") > runs["rule"].choices.count("light")
    assert runs["rule"].latency_at(6) < runs["round_robin"].latency_at(6)


def test_searched_tasks_share_the_models_clock_and_budget(tmp_path):
    path = made_up(bowl).save(tmp_path / "made-up.jsonl.gz")
    model = load_model({"tasks": [{"dataset": str(path), "weight": 3, "default_ms": 0.05},
                                  {"dataset": str(path), "weight": 1, "default_ms": 0.05}]})
    for label, allocator in ALLOCATORS.items():
        tasks, clock = model_tasks(model, budget_s=40, seed=0)
        run = replay_model(tasks, allocator, budget_s=40, clock=clock)
        assert run.choices and all(t < 40 for t, _ in run.curve[:-1])  # no batch starts past the budget
        assert [t.source.env.seconds for t in tasks] == [clock.seconds] * 2  # one clock
        assert all(t.source.env.budget.total == 40 for t in tasks)  # each search sees the job's budget
        latencies = [v for _, v in run.curve]
        assert latencies == sorted(latencies, reverse=True) and latencies[-1] >= run.best_possible_s
        if label == "round_robin":
            assert tasks[0].source.env.trials and tasks[1].source.env.trials
        if label == "small_first_batches":
            assert run.trials[0] <= 4 < max(run.trials)  # the first batch small, the next ones not


def test_a_task_needs_a_positive_weight_and_default():
    with pytest.raises(ValueError, match="weight=0"):
        scripted(Clock(), "bad", 0, 1.0, [0.5])
