"""KBTaskScheduler splitting one budget across a small model's tasks, real builds and runs."""

import pytest

pytestmark = pytest.mark.tuning


def _model():
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class Model:
        @R.function
        def main(x: R.Tensor((256, 256), "float32"), w: R.Tensor((256, 256), "float32"),
                 b: R.Tensor((256,), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.add(y, b)
                out = R.nn.relu(z)
                R.output(out)
            return out

    return Model


def test_the_hot_task_gets_the_seconds_within_one_budget(tmp_path, llvm_target):
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import KBSearch, KBTaskScheduler, TuningBudget, guard_metaschedule_logger
    from kb_tvm.tuning import measurement_pipeline

    budget = TuningBudget("30s")
    events = []
    scheduler = KBTaskScheduler(budget=budget, on_event=events.append)
    # kb's pipeline: with stock's ~16 s of fixed cost per batch on 2 cores, three first batches
    # alone nearly spend the budget, and what is left to allocate depends on the machine's day
    with measurement_pipeline(llvm_target) as (builder, runner), guard_metaschedule_logger():
        ms.relax_integration.tune_relax(
            relax.transform.LegalizeOps()(_model()), params={}, target=llvm_target, work_dir=str(tmp_path),
            max_trials_global=100_000, num_trials_per_iter=8, cost_model="random", builder=builder, runner=runner,
            strategy=KBSearch(budget=budget, seed=1, remeasure_top=0), task_scheduler=scheduler,
        )
    stats = {t.name: t for t in scheduler.stats}
    assert set(stats) == {"matmul", "add", "relu"}
    # on a CPU each task's ceiling is the host's roofline: the matmul's 33.6 MFLOP at the host's
    # FLOP/s (0.3 ms at 100 GFLOP/s), at most its 3 x 256 KB at the host's bandwidth
    assert scheduler.ceiling_source and "numpy matmul" in scheduler.ceiling_source
    assert 1e-6 < stats["matmul"].ceiling_s < 3e-2 and all(t.ceiling_s > 0 for t in stats.values())
    hot = stats["matmul"]
    assert all(hot.seconds > stats[name].seconds for name in ("add", "relu"))
    assert hot.latency is not None and hot.batches >= 2
    assert all(hot.trials > stats[name].trials for name in ("add", "relu"))
    allocations = [e for e in events if e["event"] == "allocate"]
    assert [e["why"].startswith("first batch") for e in allocations[:3]] == [True] * 3
    # trivial ones retire after a first batch as the floor (or their search ran out of distinct
    # schedules: an elementwise op may have one); one comes back only when the matmul got fast
    # enough to make it a bottleneck, and a retired task gets no batch
    retired: set[str] = set()
    for e in events:
        if e["event"] == "retire":
            assert e["why"].startswith(("trivial", "its search stopped", "expected gain")) or e["task"] == "matmul"
            retired.add(e["task"])
        elif e["event"] == "revive":
            assert e["task"] in retired and "the others got faster" in e["why"]
            retired.discard(e["task"])
        elif e["event"] == "allocate":
            assert e["task"] not in retired
    # each elementwise op is about 2% of the model here (the trivial floor): one that is not
    # retired as trivial gets no batch after its first while the matmul pays more
    assert {"add", "relu"} & {e["task"] for e in events if e["event"] == "retire"} or \
        all(e["task"] == "matmul" for e in allocations[3:]), [(e["task"], e["why"]) for e in allocations]
    # the searches paced themselves on their own clocks: seconds of their own batches
    clock = budget.task("matmul")
    assert 0 < clock.own_seconds <= hot.seconds and clock.expected_seconds <= budget.total
    assert events[-1]["event"] == "finish"
    longest_batch = max(s for t in scheduler.stats for s in t.batch_seconds)
    assert budget.spent <= 45.0 + longest_batch + 5.0
    assert sum(t.trials for t in scheduler.stats) == len(ms.database.JSONDatabase(
        work_dir=str(tmp_path)).get_all_tuning_records())
