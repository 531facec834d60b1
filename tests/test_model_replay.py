"""The model-level replay (kb_tvm/replay/model.py): a model's tasks on one clock, their batches
dealt out by an allocator, judged by the model's latency over time."""

import pytest

from kb_tvm.replay.model import (
    ALLOCATORS,
    Batch,
    ModelTask,
    kb_rule,
    model_tasks,
    replay_model,
    round_robin,
    search_batches,
)

from replay_helpers import bowl, made_up


def task(name, weight, default_s, bests, seconds=1.0):
    return ModelTask(name=name, weight=weight, default_s=default_s,
                     batches=tuple(Batch(seconds, 16, best) for best in bests))


HEAVY = task("heavy", 10, 1.0, [0.5, 0.25, 0.2, 0.1])
LIGHT = task("light", 1, 1.0, [0.8, 0.5, 0.5, 0.5])


def test_the_model_latency_is_the_weighted_sum_of_each_tasks_best_so_far():
    run = replay_model([HEAVY, LIGHT], round_robin, budget_s=100)
    assert run.choices == ["heavy", "light"] * 4  # then no batch is left
    assert [v for _, v in run.curve] == pytest.approx([11, 6, 5.8, 3.3, 3.0, 2.5, 2.5, 1.5, 1.5])
    assert run.latency_at(0) == 11 and run.latency_at(2.5) == pytest.approx(5.8)
    assert run.best_possible_s == pytest.approx(10 * 0.1 + 0.5) == run.curve[-1][1]
    # mean over 100 s: 11 for 1 s, 6, 5.8, 3.3, 3.0, 2.5, 2.5 for 1 s each, then 1.5 for 93 s
    assert run.mean_latency() == pytest.approx((11 + 6 + 5.8 + 3.3 + 3.0 + 2.5 + 2.5 + 1.5 * 93) / 100)


def test_a_default_schedule_counts_until_a_batch_beats_it():
    slow_search = task("slow", 1, 0.3, [0.6, 0.4, 0.2])
    run = replay_model([slow_search], round_robin, budget_s=10)
    assert [v for _, v in run.curve] == pytest.approx([0.3, 0.3, 0.3, 0.2])


def test_the_budget_ends_the_replay_after_the_batch_that_crosses_it():
    run = replay_model([HEAVY, LIGHT], round_robin, budget_s=2.5)
    assert len(run.choices) == 3 and run.curve[-1][0] == 3.0


def test_an_allocator_that_picks_a_task_with_no_batch_left_is_an_error():
    with pytest.raises(ValueError, match="'light', which has no batch left"):
        replay_model([HEAVY, LIGHT], lambda tasks, left, total: 1, budget_s=100)


def test_kb_rule_gives_the_heavy_task_more_and_skips_a_trivial_one():
    trivial = task("trivial", 1, 0.001, [0.0005] * 4)
    run = replay_model([HEAVY, LIGHT, trivial], kb_rule, budget_s=6)
    assert "trivial" not in run.choices  # 0.01% of model time under its default: keeps it
    assert run.choices[0] == "heavy" and run.choices.count("heavy") > run.choices.count("light")
    assert run.latency_at(6) < replay_model([HEAVY, LIGHT, trivial], round_robin, budget_s=6).latency_at(6)


def test_model_tasks_replay_each_dataset_once_and_every_allocator_deals_the_same_batches(tmp_path):
    data = made_up(bowl)
    path = data.save(tmp_path / "made-up.jsonl.gz")
    batches = search_batches(data, budget_s=30, seed=0)
    assert batches and sum(b.seconds for b in batches[:-1]) < 30  # no batch starts after the budget
    bests = [b.best_s for b in batches if b.best_s is not None]
    assert bests == sorted(bests, reverse=True) and bests[-1] >= data.best_latency_s
    spec = {"tasks": [{"dataset": str(path), "weight": 3, "default_ms": 0.05}]}
    tasks = model_tasks(spec, budget_s=30, seed=0)
    assert tasks[0].batches == batches and tasks[0].weight == 3 and tasks[0].default_s == pytest.approx(5e-5)
    for label, allocator in ALLOCATORS.items():
        run = replay_model(tasks, allocator, budget_s=30)
        dealt = batches[:len(run.choices)]
        assert run.curve[-1][1] == pytest.approx(3 * min([5e-5] + [b.best_s for b in dealt if b.best_s]))
        assert len(dealt) == len(batches) or label == "rule"  # the rule may retire it for its pace


def test_a_task_needs_a_positive_weight_and_default():
    with pytest.raises(ValueError, match="weight=0"):
        task("bad", 0, 1.0, [0.5])
