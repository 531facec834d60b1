"""What TVM rejects is an invalid candidate, dropped and counted; what our code or a changed TVM
API raises ends the search. The first half replays schedules TVM 0.27 really rejects (with the
class it raises them as: kb_tvm.tvm_errors); the second injects Python errors where TVM is
called: counted as invalid candidates, they ended a broken search quietly."""

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


def _factory(workload_name, target, log=None):
    from kb_tvm.search import CandidateFactory, SearchOptions
    from kb_tvm.workloads import get_workload

    mod = get_workload(workload_name).module() if isinstance(workload_name, str) else workload_name
    return CandidateFactory.outside_tune(mod, target, options=SearchOptions(seed=1), log=log, task_name="t",
                                         generate_spaces=target.kind.name == "llvm")


@pytest.fixture(scope="module")
def gemm(llvm_target):
    factory = _factory("gemm-128", llvm_target)
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def cuda_target():
    import tvm

    from tensor_core_helpers import H200

    return tvm.target.Target(H200)


def _trace(workload_name, llvm_target):
    """The first design space's trace of a workload on llvm, its decisions sampled."""
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.workloads import get_workload

    context = ms.TuneContext(mod=get_workload(workload_name).module(), target=llvm_target,
                             space_generator="post-order-apply", task_name=workload_name, num_threads=2, rand_state=1)
    return context.generate_design_space()[0].trace


def _wmma_schedule():
    """A tensor-core schedule of batch_matmul-12x128x128x64-fp16 that MetaSchedule's mutators made
    in a CUDA search and its postprocessors passed, but that TVM's lowering fails on (an ICHECK
    on a WMMA fragment: InternalError). Its trace, postprocessing included, is stored."""
    import tvm
    import tvm.s_tir.tensor_intrin.cuda  # noqa: F401 - the trace tensorizes with TVM's WMMA intrinsics
    from tvm.s_tir.schedule import Schedule, Trace

    from kb_tvm.workloads import get_workload

    sch = Schedule(get_workload("batch_matmul-12x128x128x64-fp16").module())
    Trace.apply_json_to_schedule(tvm.ir.load_json((DATA / "wmma_trace_failing_lowering.json").read_text()), sch)
    return sch


def _dynamic_fp16_matmul():
    import tvm
    from tvm import te, tirx

    rows = tirx.Var("n", "int64")
    a = te.placeholder((rows, 64), "float16", name="A")
    b = te.placeholder((64, 64), "float16", name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((rows, 64), lambda i, j: te.sum(a[i, k].astype("float32") * b[k, j].astype("float32"), axis=k),
                   name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


# ------------------------------------------------------------ what TVM rejects is dropped
def test_a_borrowed_trace_of_another_operator_does_not_apply(llvm_target):
    from tvm.error import InternalError
    from tvm.s_tir.schedule import Schedule, ScheduleError

    from kb_tvm.warm_start import replay_adapted
    from kb_tvm.workloads import get_workload

    trace = _trace("gemm-128", llvm_target)
    for name, raised in (("conv2d-56x56x64", ScheduleError),  # no block "C" to get
                         ("batch_matmul-12x128x128x64", InternalError)):  # 3 loops split as if 4
        mod = get_workload(name).module()
        with pytest.raises(raised):
            trace.apply_to_schedule(Schedule(mod), remove_postproc=True)
        assert replay_adapted(trace, mod, seed=1) is None


def test_a_trace_tvm_rejects_is_dropped_and_counted(gemm, llvm_target):
    conv_trace = _trace("conv2d-56x56x64", llvm_target)  # replayed on gemm-128: ScheduleError
    before = dict(gemm.dropped)
    assert gemm.realize([(conv_trace, 0, "database:0")]) == []
    assert gemm.dropped["postproc"] == before["postproc"] + 1


def test_a_schedule_whose_lowering_fails_is_dropped_by_verification(cuda_target):
    import tvm
    from tvm.error import InternalError

    from kb_tvm.measure.targets import build_config
    from kb_tvm.search import lowers_cleanly

    sch = _wmma_schedule()
    with pytest.raises(InternalError):
        pipeline = tvm.tirx.get_default_tir_pipeline(cuda_target)[0]
        pipeline(tvm.tirx.transform.BindTarget(cuda_target.with_host(cuda_target.host))(sch.mod))
    assert not lowers_cleanly(sch.mod, cuda_target, build_config(cuda_target, sch.mod))
    factory = _factory("batch_matmul-12x128x128x64-fp16", cuda_target)
    try:
        assert factory._verify(sch) == (None, "verify")
    finally:
        factory.close()


def test_dlight_failing_on_a_dynamic_shape_gives_no_known_good_candidate_and_says_why(cuda_target):
    from kb_tvm.decision_log import DecisionLog

    events = []
    factory = _factory(_dynamic_fp16_matmul(), cuda_target, log=DecisionLog(None, listener=events.append))
    try:
        assert factory.known_good() == []
    finally:
        factory.close()
    (failed,) = [e for e in events if e["event"] == "known-good-failed"]
    assert failed["error"].startswith("InternalError: ")  # mixed int32/int64 indices


# ------------------------------------------------------------ what we (or an API change) raise propagates
def test_a_type_error_from_a_mutator_call_ends_the_search(gemm, monkeypatch):
    import time

    from tvm.s_tir.meta_schedule import _ffi_api

    parents = gemm.sample(0, 2)
    assert parents

    def changed_api(mutator, trace, seed):
        raise TypeError("Mismatched type on argument #2")

    monkeypatch.setattr(_ffi_api, "MutatorApply", changed_api)
    with pytest.raises(TypeError, match="Mismatched type"):
        gemm.mutate(parents, 4, small_steps=False, deadline=time.monotonic() + 60)


def test_a_type_error_from_replaying_a_trace_ends_the_search(gemm, llvm_target, monkeypatch):
    from tvm.s_tir.schedule import Trace

    trace = _trace("gemm-128", llvm_target)

    def changed_api(self, sch, remove_postproc, decision_provider=None):
        raise TypeError("apply_to_schedule() got an unexpected keyword argument")

    monkeypatch.setattr(Trace, "apply_to_schedule", changed_api)
    before = dict(gemm.dropped)
    with pytest.raises(TypeError, match="unexpected keyword"):
        gemm.realize([(trace, 0, "sample")])
    assert gemm.dropped == before


def test_our_error_in_a_decision_provider_comes_back_as_runtime_error_and_ends_the_search(gemm, llvm_target):
    """Fewer tiles than the trace samples: StopIteration in our callback, which crosses TVM's FFI
    as a plain RuntimeError (an unregistered class), so RuntimeError is not caught as invalid."""
    from kb_tvm.tvm_errors import invalid_schedule_errors

    trace = _trace("gemm-128", llvm_target)  # three SamplePerfectTile
    with pytest.raises(RuntimeError) as raised:
        gemm.realize([(trace, 0, "sample")], tiles=[[[1, 1, 128, 1]]])
    assert not isinstance(raised.value, invalid_schedule_errors())


def test_a_categorical_pick_out_of_range_is_our_bug_not_an_invalid_sample(gemm, llvm_target):
    trace = _trace("gemm-128", llvm_target)
    (index,) = [k for k, inst in enumerate(trace.insts) if inst.kind.name == "SampleCategorical"]
    with pytest.raises(ValueError, match="Wrong decision value"):
        gemm.realize([(trace, 0, "sample")], picks=[{index: 7}])  # 4 candidates


def test_a_type_error_from_lowering_is_not_a_failed_lowering(gemm, cuda_target, monkeypatch):
    import tvm

    from kb_tvm.search import lowers_cleanly

    def changed_api(target):
        raise TypeError("get_default_tir_pipeline() missing 1 required positional argument")

    monkeypatch.setattr(tvm.tirx, "get_default_tir_pipeline", changed_api)
    sch = gemm.sample(0, 1)[0].sch
    with pytest.raises(TypeError, match="missing 1 required"):
        lowers_cleanly(sch.mod, cuda_target)


def test_a_type_error_from_dlight_is_not_a_shape_it_fails_on(cuda_target, monkeypatch):
    from tvm.s_tir import dlight

    def changed_api(self, func, target, tunable):
        raise TypeError("apply() takes 3 positional arguments but 4 were given")

    monkeypatch.setattr(dlight.gpu.Matmul, "apply", changed_api)
    factory = _factory("gemm-128", cuda_target)
    try:
        with pytest.raises(TypeError, match="positional arguments"):
            factory.known_good()
    finally:
        factory.close()


def test_our_error_while_adapting_a_borrowed_trace_ends_the_search(llvm_target, monkeypatch):
    from kb_tvm import warm_start
    from kb_tvm.workloads import get_workload

    trace = _trace("gemm-128", llvm_target)

    def broken(factors, extent, max_innermost=None):
        raise KeyError("a bug of ours")

    monkeypatch.setattr(warm_start, "adapt_tile", broken)
    with pytest.raises(KeyError, match="a bug of ours"):
        warm_start.replay_adapted(trace, get_workload("gemm-512").module(), seed=1)
