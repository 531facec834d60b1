"""kb's measuring process on a GPU, with real builds and runs: a candidate that breaks the CUDA
context (an illegal address) or never ends fails alone; the process is replaced and the next
candidates are timed. Skipped where there is no CUDA GPU (CI); run on the H200."""

import pytest
from pipeline_helpers import build_and_run

from kb_tvm.measure.targets import cuda_available

pytestmark = [pytest.mark.tuning, pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")]


def _kernels():
    from tvm.script import tirx as T

    @T.prim_func
    def adds(a: T.Buffer((1024,), "float32"), b: T.Buffer((1024,), "float32")):
        for i in T.thread_binding(1024, thread="threadIdx.x"):
            b[i] = a[i] + T.float32(1)

    @T.prim_func
    def faults(a: T.Buffer((1024,), "float32"), b: T.Buffer((1024,), "float32")):
        for i in T.thread_binding(1024, thread="threadIdx.x"):
            b[T.int64(1099511627776) + T.Cast("int64", i) * T.int64(268435456)] = a[i]

    @T.prim_func
    def hangs(a: T.Buffer((1024,), "float32"), b: T.Buffer((1024,), "float32")):
        for i in T.thread_binding(1024, thread="threadIdx.x"):
            while b[0] < T.float32(1e30):
                b[i] = b[i] * T.float32(0.5) + a[i] * T.float32(0)

    return adds, faults, hangs


def test_a_kernel_that_breaks_the_cuda_context_or_hangs_fails_alone():
    from kb_tvm.measure.builder import KBBuilder
    from kb_tvm.measure.runner import KBRunner
    from kb_tvm.measure.targets import make_target

    target = make_target("cuda")
    runner = KBRunner(device="cuda", timeout_s=10)
    builder = KBBuilder(workers=4, timeout_s=120, stream_to=runner)
    try:
        adds, faults, hangs = _kernels()
        results = build_and_run(builder, runner, [adds, faults, adds, hangs, adds], target)
        errors = [r.error_msg for r in results]
        assert errors[0] is None and errors[2] is None and errors[4] is None, errors
        assert errors[1] and errors[3] and "timeout" in errors[3], errors
        assert runner.measurer.restarts == 2
        again = build_and_run(builder, runner, [adds] * 3, target)
        assert all(r.error_msg is None and float(r.run_secs[0]) > 0 for r in again)
    finally:
        builder.close()
        runner.close()
