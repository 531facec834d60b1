"""kb's persistent build-and-measure path on llvm, with real builds and real runs: processes that
live across batches, faults that fail one candidate alone, one record per candidate."""

import pytest
from pipeline_helpers import build_and_run

pytestmark = pytest.mark.tuning


def _kernels():
    """Three 16-element kernels: one that adds, one that never ends, one that stores far out of
    bounds (a segfault in the measuring process)."""
    from tvm.script import tirx as T

    @T.prim_func
    def adds(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
        for i in range(16):
            b[i] = a[i] + T.float32(1)

    @T.prim_func
    def hangs(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
        while T.bool(True):
            b[0] = b[0] + a[0]

    @T.prim_func
    def crashes(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
        for i in range(16):
            b[T.int64(1099511627776) + i * T.int64(268435456)] = a[i]

    return adds, hangs, crashes


@pytest.fixture(scope="module")
def pipeline():
    from kb_tvm.measure.builder import KBBuilder
    from kb_tvm.measure.runner import KBRunner

    builder, runner = KBBuilder(workers=2, timeout_s=60), KBRunner(device="cpu", timeout_s=5)
    yield builder, runner
    builder.close()
    runner.close()


def test_workers_live_across_batches_and_a_hang_or_crash_fails_its_candidate_alone(pipeline, llvm_target):
    builder, runner = pipeline
    adds, hangs, crashes = _kernels()
    first = build_and_run(builder, runner, [adds, adds], llvm_target)
    assert all(r.error_msg is None and len(r.run_secs) == 1 and float(r.run_secs[0]) > 0 for r in first)
    build_pids, measure_pid = builder.pool.worker_pids(), runner.measurer.pid()
    assert len(build_pids) == 2

    faulty = build_and_run(builder, runner, [adds, hangs, adds, crashes, adds], llvm_target)
    errors = [r.error_msg for r in faulty]
    assert errors[0] is None and errors[2] is None and errors[4] is None  # the ones after a fault too
    assert "timeout, killed after 5 s" in errors[1]
    assert "died" in errors[3]
    assert runner.measurer.restarts == 2
    # a hang held the device for its timeout; a crash's seconds no one saw
    assert [o.seconds for o in runner.last_batch][1:4:2] == [5.0, None]

    again = build_and_run(builder, runner, [adds] * 4, llvm_target)
    assert all(r.error_msg is None for r in again)
    assert builder.pool.worker_pids() == build_pids  # no build worker was respawned
    assert runner.measurer.pid() != measure_pid  # the measuring process was replaced after the faults


def test_a_report_is_a_median_of_adapted_repeats(pipeline, llvm_target):
    builder, runner = pipeline
    adds, _, _ = _kernels()
    build_and_run(builder, runner, [adds], llvm_target)
    (outcome,) = runner.last_batch
    report = outcome.value
    assert report["verdict"] in ("stable", "capped", "slow")
    assert report["repeats"] >= 3 and report["number"] > 1  # a ~10-ns kernel: many calls per repeat
    assert report["median_s"] < 1e-4


def test_stock_evolutionary_search_runs_on_kb_builder_and_runner_with_one_record_per_candidate(
        pipeline, llvm_target, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import guard_metaschedule_logger
    from kb_tvm.workloads import get_workload

    builder, runner = pipeline
    with guard_metaschedule_logger():
        database = ms.tune_tir(get_workload("gemm-128").module(), llvm_target, str(tmp_path), max_trials_global=16,
                               num_trials_per_iter=8, builder=builder, runner=runner, cost_model="random")
    records = database.get_all_tuning_records()
    assert len(records) == 16
    assert len({str(r.trace) for r in records}) == 16  # one record per candidate
    assert all(r.run_secs is not None and len(r.run_secs) == 1 for r in records)  # its median


def test_a_streaming_builder_hands_each_candidate_to_the_runner_once(llvm_target):
    """kb's GPU default: each library goes to the measuring thread as soon as it is built; the
    runner then waits for those measurements instead of starting new ones."""
    from kb_tvm.measure.builder import KBBuilder
    from kb_tvm.measure.runner import KBRunner

    runner = KBRunner(device="cpu", timeout_s=5)
    builder = KBBuilder(workers=2, timeout_s=60, stream_to=runner)
    try:
        adds, hangs, _ = _kernels()
        results = build_and_run(builder, runner, [adds, hangs, adds, adds], llvm_target)
        assert [r.error_msg is None for r in results] == [True, False, True, True]
        assert "timeout" in results[1].error_msg  # a hang still fails alone, streamed or not
        assert runner.measurer.measured == 4  # measured once each, though build and run both asked
        again = build_and_run(builder, runner, [adds] * 3, llvm_target)
        assert all(r.error_msg is None for r in again) and runner.measurer.measured == 7
    finally:
        builder.close()
        runner.close()


def test_streaming_in_a_real_tune_times_each_candidate_once(llvm_target, tmp_path):
    """MetaSchedule's own loop around a streaming builder: the runner receives each candidate
    with the arguments the builder guessed, so nothing is timed twice."""
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import ProgressRecorder, guard_metaschedule_logger
    from kb_tvm.measure.builder import KBBuilder
    from kb_tvm.measure.runner import KBRunner
    from kb_tvm.workloads import get_workload

    runner = KBRunner(device="cpu", timeout_s=30)
    builder = KBBuilder(workers=2, timeout_s=60, stream_to=runner)
    recorder = ProgressRecorder()
    try:
        with guard_metaschedule_logger():
            ms.tune_tir(get_workload("gemm-128").module(), llvm_target, str(tmp_path), max_trials_global=16,
                        num_trials_per_iter=8, builder=builder, runner=runner, cost_model="random",
                        measure_callbacks=ms.MeasureCallback.create("default") + [recorder])
    finally:
        builder.close()
        runner.close()
    assert recorder.trials == 16 and recorder.failed < recorder.trials
    assert recorder.trials - recorder.failed <= runner.measurer.measured <= recorder.trials


def _unrolled(n: int):
    """A kernel whose build time grows with n (LLVM compiles n unrolled statements): 16000 took
    4 s here, 16 takes tens of ms."""
    from tvm.script import tirx as T

    @T.prim_func
    def unrolled(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32")):
        for i in T.unroll(n):
            b[i] = a[i] * a[(i * 7) % n] + T.float32(1)

    return unrolled


def test_a_build_far_slower_than_those_that_succeeded_or_past_the_budget_is_cut(llvm_target):
    import tvm

    from kb_tvm.measure.pipeline import BuildPool

    left = [1e6]  # seconds left in the job's budget
    pool = BuildPool(workers_count=1, timeout_s=60, floor_s=1, slow_factor=5, seconds_left=lambda: left[0])
    try:
        assert pool.limit_s == 60  # nothing built yet: a cold machine gets the whole allowance
        left[0] = 2.0
        assert pool.limit_s == 3.0  # ... but no more than the budget left, and a second's grace
        left[0] = 1e6
        quick = tvm.IRModule({"main": _unrolled(16)})
        [first] = pool.build([(quick, llvm_target)])
        assert first.error is None
        assert pool.limit_s == max(1.0, 5 * first.seconds) < 60

        limit = pool.limit_s
        slow, after = pool.build([(tvm.IRModule({"main": _unrolled(16000)}), llvm_target), (quick, llvm_target)])
        assert slow.error == f"build: timeout, killed after {limit:g} s"
        assert after.error is None  # the worker was replaced and built the next one
        assert pool.limit_s == limit  # a failure does not raise the limit

        left[0] = 0.25  # the budget nearly spent: no build runs past it (and its grace)
        [cut] = pool.build([(tvm.IRModule({"main": _unrolled(16000)}), llvm_target)])
        assert cut.error == f"build: timeout, killed after {min(limit, 1.25):g} s"
    finally:
        pool.close()


def _gathers():
    """out[i] = table[index[i]]: an index outside the table reads far out of bounds."""
    from tvm.script import tirx as T

    @T.prim_func
    def gathers(table: T.Buffer((64,), "float32"), index: T.Buffer((16,), "int64"), out: T.Buffer((16,), "float32")):
        for i in range(16):
            out[i] = table[index[i]] + T.float32(0)

    return gathers


def test_kernels_are_measured_on_activation_like_numbers_so_a_gather_runs_and_erf_is_not_saturated(pipeline,
                                                                                                   llvm_target):
    """TVM's measure fill draws integers anywhere (an index out of bounds) and floats from [1, 10)
    (erf saturated); kb measures on floats in [-1, 1) and integer zeros, and re-times on the same."""
    from collections import OrderedDict

    import numpy as np
    import tvm

    from kb_tvm.measure.timer import activation_like
    from kb_tvm.measure.workers import arguments

    builder, runner = pipeline
    [result] = build_and_run(builder, runner, [_gathers()], llvm_target)
    assert result.error_msg is None and float(result.run_secs[0]) > 0

    signature = (("TENSOR", "float32", (1000,)), ("TENSOR", "int64", (16,)), ("TENSOR", "bfloat16", (8,)))
    floats, ints, halves = (a.numpy() for a in arguments(tvm.cpu(0), signature, OrderedDict()))
    assert -1 <= floats.min() < -0.9 and 0.9 < floats.max() < 1
    assert not ints.any()
    assert np.abs(halves.astype("float32")).max() <= 1
    np.testing.assert_array_equal(floats, activation_like((1000,), "float32", seed=0))  # what time_best uses


def test_a_build_tvm_rejects_fails_alone_but_an_api_error_ends_the_batch(llvm_target):
    import tvm
    from tvm.script import tirx as T

    from kb_tvm.measure.pipeline import BuildPool

    @T.prim_func
    def unbound(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
        for i in T.thread_binding(16, thread="threadIdx.x"):  # a GPU thread on a CPU target: TVM refuses it
            b[i] = a[i]

    pool = BuildPool(workers_count=1, timeout_s=60)
    try:
        [rejected, built] = pool.build([(tvm.IRModule({"main": unbound}), llvm_target),
                                        (tvm.IRModule({"main": _unrolled(16)}), llvm_target)])
        assert rejected.error.startswith("build: InternalError") and built.error is None
        assert rejected.seconds is None and built.seconds > 0  # a failure's seconds are not made up
        with pytest.raises(TypeError):  # not a module: our bug, never a failed candidate
            pool.build([("not a module", llvm_target)])
    finally:
        pool.close()


def test_a_search_is_told_how_many_candidates_its_builder_builds_at_once():
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import KBBuilder
    from kb_tvm.tuning import parallel_builds

    builder = KBBuilder(workers=3, timeout_s=60)
    try:
        assert parallel_builds(builder) == 3
    finally:
        builder.close()
    assert parallel_builds(ms.builder.LocalBuilder(max_workers=5)) == 5
    assert parallel_builds(object()) is None  # a builder that does not say: one build per core
