"""Targets describe the machine: llvm gets the host's CPU and cores unless the user says otherwise."""

import pytest

from kb_tvm.measure.targets import cuda_available, describe, host_cpu, make_target, physical_cores


def test_the_default_llvm_target_carries_the_host_cpu_and_its_physical_cores():
    target = make_target("llvm")
    assert host_cpu() not in ("", "generic")
    assert target.attrs["mcpu"] == host_cpu()
    assert int(target.attrs["num-cores"]) == physical_cores()
    assert describe(target) == f"llvm (mcpu={host_cpu()}, num-cores={physical_cores()})"


def test_a_user_target_overrides_what_it_names_and_the_host_fills_the_rest():
    generic = make_target('{"kind": "llvm", "mcpu": "x86-64"}')
    assert generic.attrs["mcpu"] == "x86-64" and int(generic.attrs["num-cores"]) == physical_cores()
    two = make_target({"kind": "llvm", "num-cores": 2})
    assert two.attrs["mcpu"] == host_cpu() and int(two.attrs["num-cores"]) == 2


def test_the_host_target_has_the_vector_units_a_bare_llvm_one_leaves_out():
    from tvm.target import Target, codegen

    host = make_target("llvm")
    if not codegen.llvm_cpu_has_features(["avx2"], host):
        pytest.skip("the host CPU has no AVX2: nothing wider than baseline to check")
    assert not codegen.llvm_cpu_has_features(["avx2"], Target({"kind": "llvm"}))  # what a bare target got


@pytest.mark.skipif(cuda_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU is visible"):
        make_target("cuda")


def test_cuda_tensor_core_builds_merge_shared_memory_and_cpu_builds_use_tvms_defaults():
    import tvm

    from kb_tvm import build_config
    from kb_tvm.workloads import get_workload

    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    assert build_config(cuda) == {"tirx.merge_static_smem": True}  # a tensor-core kernel's options
    assert build_config(cuda, get_workload("softmax-128x768").module()) == {}  # no WMMA fragments
    assert build_config(tvm.target.Target("llvm")) == {}
    with tvm.transform.PassContext(config=build_config(tvm.target.Target("cuda"))):  # TVM knows the option
        assert bool(tvm.transform.PassContext.current().config["tirx.merge_static_smem"])


def test_the_tensor_intrinsics_are_registered_once_and_inspect_is_left_as_it_was():
    """In a fresh process, as `kb-tvm tune` runs: every backend's intrinsics are registered
    (MetaSchedule's CPU rules name x86's, its tensor-core rules CUDA's), `inspect.stack` is the
    standard library's again afterwards, and a second call registers nothing twice."""
    import subprocess
    import sys

    script = """
import inspect, tvm
from tvm.s_tir import TensorIntrin
from kb_tvm.measure.targets import register_tensor_intrinsics
stack = inspect.stack
register_tensor_intrinsics()
register_tensor_intrinsics()  # TensorIntrin.register would raise on a name registered twice
print(TensorIntrin.get("dot_16x4_vnni") is not None, TensorIntrin.get("wmma_sync_16x16x16_f16f16f32") is not None,
      inspect.stack is stack)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]


def test_a_cpu_commands_process_registers_the_cpu_intrinsics_alone():
    """`kb-tvm tune` and `tune-op` on a CPU target: x86's intrinsics (MetaSchedule's CPU rules name
    them), not CUDA's, and MetaSchedule finds the package imported."""
    import subprocess
    import sys

    script = """
import sys, tvm
from tvm.s_tir import TensorIntrin
from kb_tvm.measure.targets import register_tensor_intrinsics
register_tensor_intrinsics(cpu_only=True)
register_tensor_intrinsics()  # the package stands imported: nothing more
import tvm.s_tir.tensor_intrin  # as MetaSchedule's TuneContext does
print(TensorIntrin.get("dot_16x4_vnni") is not None,
      TensorIntrin.get("wmma_sync_16x16x16_f16f16f32", allow_missing=True) is None,
      "tvm.s_tir.tensor_intrin.cuda" not in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]


@pytest.mark.parametrize("context", [0, 1, 3])
def test_the_stack_read_from_linecache_is_inspect_s_stack(context):
    import inspect

    from kb_tvm.measure.targets import _stack_from_linecache

    def both():  # one line: both see this frame at the same line
        return inspect.stack(context), _stack_from_linecache(context)

    standard, ours = both()
    assert [tuple(f) for f in ours] == [tuple(f) for f in standard] and len(ours) > 3


@pytest.mark.parametrize("user_threads, expected", [(None, 2), ("1", 1)])
def test_an_llvm_target_runs_on_its_cores_unless_the_user_said_otherwise(user_threads, expected):
    # TVM's own default is half the CPUs of an x86 machine: one thread on this 2-vCPU VM, where
    # the target has two cores
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    if user_threads is not None:
        env["TVM_NUM_THREADS"] = user_threads
    code = ("import tvm; from kb_tvm.measure.targets import make_target, use_target_cores; "
            "print(use_target_cores(make_target({'kind': 'llvm', 'num-cores': 2})), "
            "use_target_cores(tvm.target.Target({'kind': 'cuda', 'arch': 'sm_90'})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(expected), "None"]
