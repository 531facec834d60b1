"""KBSearch inside MetaSchedule on llvm, with real builds and real runs."""

import json

import pytest

from kb_tvm.decision_log import read_log

pytestmark = pytest.mark.tuning


def _tune(workload_name, llvm_target, work_dir, budget, **kwargs):
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import KBBuilder, KBSearch, ProgressRecorder, RecordDatabase, guard_metaschedule_logger
    from kb_tvm.workloads import get_workload

    recorder = ProgressRecorder()
    database = RecordDatabase(work_dir=work_dir)
    search = KBSearch(budget=budget, **{"seed": 1, **kwargs.pop("search", {})})
    # kb's persistent builder: a LocalBuilder worker's first build imports all of TVM's tensor
    # intrinsics, 40 s on a 2-core CI machine, which a 40-s budget cannot pay
    builder = kwargs.pop("builder", None) or KBBuilder(workers=2, timeout_s=60)
    try:
        with guard_metaschedule_logger():  # pytest's capture handlers sit on MetaSchedule's logger
            ms.tune_tir(
                get_workload(workload_name).module(), llvm_target, str(work_dir), database=database,
                max_trials_global=kwargs.pop("max_trials_global", 10_000), num_trials_per_iter=8,
                cost_model="random", strategy=search, builder=builder,
                measure_callbacks=ms.MeasureCallback.create("default") + [recorder], **kwargs,
            )
    finally:
        if isinstance(builder, KBBuilder):
            builder.close()
    return search, database, recorder


@pytest.fixture(scope="module")
def tuned_gemm(tmp_path_factory, llvm_target):
    work_dir = tmp_path_factory.mktemp("kb-gemm")
    search, database, recorder = _tune("gemm-128", llvm_target, work_dir, "20s")
    (log_path,) = (work_dir / "kb_logs").glob("*.jsonl")
    return search, database, recorder, read_log(log_path)


def _remeasures(log) -> int:
    return sum(c["origin"] == "remeasure" for e in log if e["event"] == "batch" for c in e["candidates"])


def test_kbsearch_tunes_through_tune_tir_and_fills_the_database(tuned_gemm, llvm_target):
    from kb_tvm.measure.records import record_latency
    from kb_tvm.workloads import get_workload

    _, database, recorder, log = tuned_gemm
    records = database.get_all_tuning_records()
    assert sum(record_latency(r.run_secs) is not None for r in records) >= 8
    # a re-measured schedule refines its record instead of adding one
    assert _remeasures(log) > 0 and len(records) == recorder.trials - _remeasures(log)
    assert any(len(r.run_secs) > 1 for r in records)
    # the search's best is the record a build deploys: the median of its measurements
    deployed = database.query_tuning_record(get_workload("gemm-128").module(), llvm_target, "main")
    assert log[-1]["best_ms"] == pytest.approx(record_latency(deployed.run_secs) * 1e3, rel=1e-5)


def test_kbsearch_stops_within_budget_plus_one_batch(tuned_gemm):
    search, _, _, log = tuned_gemm
    batches = [e for e in log if e["event"] == "batch"]
    stop = log[-1]
    assert stop["event"] == "stop"
    reason = stop["reason"]
    assert reason in ("budget spent", "tuning ended by the task scheduler") or "gain" in reason or "overrun" in reason
    longest_batch = max(b["seconds"] for b in batches)
    # every batch but the last started before the budget ran out
    assert all(b["budget_spent_s"] - b["seconds"] < 40.0 for b in batches)
    assert stop["budget_spent_s"] <= 40.0 + longest_batch + 2.0
    assert search.budget.spent <= 40.0 + longest_batch + 5.0


def test_decision_log_shows_coarse_ranking_then_cost_aware_fine_search(tuned_gemm):
    *_, log = tuned_gemm
    events = [e["event"] for e in log]
    assert events[0] == "start" and events[1] == "coarse-sampled"
    assert events.index("regions") < events.index("proposals")
    sampled = log[1]
    assert sampled["valid"] > 0 and sampled["regions"]
    (regions,) = [e for e in log if e["event"] == "regions"]
    assert any(r["kept"] for r in regions["regions"])
    assert all(r["why"] for r in regions["regions"])
    scores = [r["score"] for r in regions["regions"]]
    assert scores == sorted(scores, reverse=True)
    proposals = [e for e in log if e["event"] == "proposals"]
    # explores early, exploits as the budget runs out (a slow machine may leave one fine batch)
    exploration = [p["exploration"] for p in proposals]
    assert exploration and exploration == sorted(exploration, reverse=True)
    fine_batches = [e for e in log if e["event"] == "batch" and e["phase"] != "coarse"]
    assert fine_batches, "the fine phase never measured anything"
    predicted = [c for b in fine_batches for c in b["candidates"] if c["predicted_ms"] is not None]
    assert predicted and all(c["origin"].startswith(("mutate:", "sample")) for c in predicted)
    for line in log:  # plain JSON: every line round-trips
        assert json.loads(json.dumps(line)) == line


def test_best_never_regresses_and_only_re_measurement_moves_it_up(tuned_gemm):
    *_, log = tuned_gemm
    batches = [e for e in log if e["event"] == "batch" and e["best_ms"] is not None]
    assert len(batches) >= 2 and batches[0]["phase"] == "coarse"
    # the best is the lowest median of any candidate's measurements: a new candidate can only
    # lower it; re-measuring the best can raise its median, never above the new measurement
    for before, batch in zip(batches, batches[1:]):
        remeasured = [c["measured_ms"] for c in batch["candidates"]
                      if c["origin"] == "remeasure" and c["measured_ms"] is not None]
        assert batch["best_ms"] <= max([before["best_ms"], *remeasured]) * (1 + 1e-9)
    assert log[-1]["best_ms"] == pytest.approx(batches[-1]["best_ms"])


def test_the_trial_cap_still_holds(tmp_path, llvm_target):
    _, database, recorder = _tune("gemm-128", llvm_target, tmp_path, "5m", max_trials_global=12)
    assert 0 < len(database.get_all_tuning_records()) <= recorder.trials <= 12


def _small_relax_model():
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class Model:
        @R.function
        def main(x: R.Tensor((64, 64), "float32"), w: R.Tensor((64, 64), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.nn.relu(y)
                out = R.add(z, x)
                R.output(out)
            return out

    return Model


def test_kbsearch_works_in_tune_relax_with_one_shared_budget(tmp_path, llvm_target):
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import KBBuilder, KBSearch, TuningBudget, guard_metaschedule_logger

    mod = relax.transform.LegalizeOps()(_small_relax_model())
    budget = TuningBudget("15s")
    builder = KBBuilder(workers=2, timeout_s=60)  # as _tune's: LocalBuilder's workers start slowly
    try:
        with guard_metaschedule_logger():
            ms.relax_integration.tune_relax(
                mod, params={}, target=llvm_target, work_dir=str(tmp_path), max_trials_global=10_000,
                num_trials_per_iter=8, cost_model="random", strategy=KBSearch(budget=budget, seed=2), builder=builder,
            )
    finally:
        builder.close()
    logs = sorted((tmp_path / "kb_logs").glob("*.jsonl"))
    assert len(logs) >= 2  # one decision log per task
    stops = [read_log(p)[-1] for p in logs]
    assert all(s["event"] == "stop" for s in stops)
    assert budget.spent < 15.0 + 30.0  # one budget for all tasks, at most a batch over
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    assert len(database.get_all_tuning_records()) > 0


def test_evolution_reaches_children_of_children_the_model_chose_without_measuring(tmp_path, llvm_target):
    from pipeline_helpers import build_and_run
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.budget import TuningBudget
    from kb_tvm.decision_log import DecisionLog
    from kb_tvm.measure.builder import KBBuilder
    from kb_tvm.measure.runner import KBRunner
    from kb_tvm.search import SearchOptions, TaskSearch
    from kb_tvm.search.task import FinePhase
    from kb_tvm.templates import load_templates
    from kb_tvm.workloads import get_workload

    context = ms.TuneContext(mod=get_workload("gemm-128").module(), target=llvm_target, space_generator="post-order-apply",
                             task_name="gemm-128", num_threads=2, rand_state=1)
    task = TaskSearch(context=context, design_spaces=context.generate_design_space(), templates=load_templates("llvm"),
                      budget=TuningBudget("1h").start(), max_trials=10_000, trials_per_batch=8,
                      options=SearchOptions(seed=1, repeatable=True, coarse_samples_per_space=16, generations=3),
                      log=DecisionLog.for_task(str(tmp_path), "gemm-128", None))
    builder, runner = KBBuilder(workers=2, timeout_s=60), KBRunner(device="cpu", timeout_s=30)
    try:
        for _ in range(2):  # two coarse batches, built and timed for real, train the model
            batch = task.next_batch()
            results = build_and_run(builder, runner, [c.sch.mod["main"] for c in batch], llvm_target)
            task.observe([(float(r.run_secs[0]), None) if r.error_msg is None else (None, r.error_msg)
                          for r in results])
    finally:
        builder.close()
        runner.close()
    assert task.model.informed
    phase = FinePhase()
    proposals = phase._evolve(task, 48)
    assert phase.generations_run == 3
    deepest_parent = max(c.generation for c in task.measured)
    # two steps past every measured candidate: its parent was a child nobody measured, kept by the model
    assert max(c.generation for c in proposals) >= deepest_parent + 2
    task.stop("test over")


def test_the_sampler_draws_as_many_as_asked_each_time(tmp_path, llvm_target):
    """MetaSchedule's ReplayTrace draws the count its pre_tuning got at every call: a sampler
    made for a first chunk of 2 gave 2 ever after, and the 10 missing of 12 counted as failed."""
    import numpy as np
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.decision_log import DecisionLog
    from kb_tvm.search import CandidateFactory, SearchOptions
    from kb_tvm.templates import load_templates
    from kb_tvm.workloads import get_workload

    context = ms.TuneContext(mod=get_workload("gemm-128").module(), target=llvm_target, space_generator="post-order-apply",
                             task_name="gemm-128", num_threads=2, rand_state=1)
    factory = CandidateFactory(context=context, design_spaces=context.generate_design_space(),
                               templates=load_templates("llvm"), options=SearchOptions(seed=1),
                               rng=np.random.default_rng(1), log=DecisionLog.for_task(str(tmp_path), "gemm-128", None))
    try:
        counts = [len(factory.sample(0, n)) for n in (2, 12, 12, 5)]
    finally:
        factory.close()
    assert counts == [2, 12, 12, 5]  # every sample of this space is valid: none dropped
    assert factory.dropped == {"postproc": 0, "duplicate": 0, "verify": 0}


def test_a_weight_packed_by_rewrite_layout_is_measured_in_its_packed_shape(tmp_path, llvm_target):
    """On CPUs MetaSchedule's RewriteLayout packs layout-free weights (TOPI's NHWC conv marks
    its filter so): the built function takes the packed weight, and kb's candidates must say
    so to the runner. They gave the task's shape, and 517 of 532 candidates of a 90-s tune of
    this conv failed ("expected 6")."""
    _, database, _ = _tune("conv2d-nhwc-56x56x64", llvm_target, tmp_path, "10s")
    (log_path,) = (tmp_path / "kb_logs").glob("*.jsonl")
    log = read_log(log_path)
    measured = [c for e in log if e["event"] == "batch" for c in e["candidates"]]
    assert measured and not [c["error"] for c in measured if c["error"]]
    packed = [r for r in database.get_all_tuning_records() if len(r.args_info[1].as_json()[2]) != 4]
    assert packed  # some schedule did pack the 4-D filter


def test_a_second_run_on_the_same_database_starts_from_the_first_runs_best(tmp_path, llvm_target):
    _tune("gemm-128", llvm_target, tmp_path, "8s")
    (log_path,) = (tmp_path / "kb_logs").glob("*.jsonl")
    first = read_log(log_path)
    log_path.rename(log_path.with_suffix(".first"))  # the second run writes a log of its own
    _tune("gemm-128", llvm_target, tmp_path, "6s")
    second = read_log(next((tmp_path / "kb_logs").glob("*.jsonl")))
    (loaded,) = [e for e in second if e["event"] == "from-database"]
    assert loaded["applied"] >= 1
    # the first run's best as it ended (a median of its measurements: re-measuring moves it)
    first_best = next(e["best_ms"] for e in reversed(first) if e["event"] == "stop")
    # not measured again, yet the best from the first batch on: the database's
    assert loaded["best_ms"] <= first_best * 1.0001
    assert next(e for e in second if e["event"] == "batch")["best_ms"] <= loaded["best_ms"]


def test_bad_options_are_clear_errors():
    from kb_tvm import KBSearch

    with pytest.raises(ValueError, match="keep_regions=0: must be an integer >= 1"):
        KBSearch(budget="1m", keep_regions=0)
    with pytest.raises(ValueError, match="refine_after=1.5: must be a fraction"):
        KBSearch(budget="1m", refine_after=1.5)
    with pytest.raises(TypeError, match="unknown KBSearch option"):
        KBSearch(budget="1m", population_size=10)
    with pytest.raises(ValueError, match="generations=0: must be an integer >= 1"):
        KBSearch(budget="1m", generations=0)
    with pytest.raises(ValueError, match=r"explore_share=-0.1: must be a fraction in \[0, 1\]"):
        KBSearch(budget="1m", explore_share=-0.1)
    with pytest.raises(ValueError, match='"1h30m"'):
        KBSearch(budget="soon")
    with pytest.raises(ValueError, match=r"outside_best=\{'gemm': 0\}: must map task names to seconds > 0"):
        KBSearch(budget="1m", outside_best={"gemm": 0})
    with pytest.raises(ValueError, match=r"bar_margin=0.5: must be >= 1"):
        KBSearch(budget="1m", bar_margin=0.5)
    assert KBSearch(budget=90).budget.total == 90.0  # a number is seconds


def test_a_repeatable_seed_proposes_the_same_first_batch(tmp_path, llvm_target):
    def first_batch(seed, name):
        options = {"seed": seed, "repeatable": True, "coarse_samples_per_space": 16}
        _, database, _ = _tune("gemm-128", llvm_target, tmp_path / name, "5m", max_trials_global=4, search=options)
        return [str(r.trace) for r in database.get_all_tuning_records()]

    first = first_batch(5, "a")
    assert len(first) == 4
    assert first_batch(5, "b") == first
    assert first_batch(6, "c") != first


def test_repeatable_is_a_flag():
    from kb_tvm import KBSearch

    with pytest.raises(ValueError, match="repeatable='yes': must be True or False"):
        KBSearch(budget="1m", repeatable="yes")


def test_a_batch_whose_every_build_times_out_is_said_once_not_hidden(tmp_path, llvm_target, caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="kb_tvm")
    from tvm.s_tir import meta_schedule as ms

    _tune("gemm-128", llvm_target, tmp_path, "10s", max_trials_global=16,
          builder=ms.builder.LocalBuilder(max_workers=2, timeout_sec=1))
    (log_path,) = (tmp_path / "kb_logs").glob("*.jsonl")
    log = read_log(log_path)
    told = [e for e in log if e["event"] == "builds-timed-out"]
    assert len(told) == 1 and "timeout_sec=120" in told[0]["why"] and "Timeout" in told[0]["why"]
    assert sum("every build of batch" in r.getMessage() for r in caplog.records) == 1
    first = next(e for e in log if e["event"] == "batch")
    assert first["failed"] == len(first["candidates"]) and "timed out" in told[0]["why"]
