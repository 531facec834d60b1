"""What runs inside the persistent worker processes (TVM's popen workers): building a candidate
to a loadable shared library, and timing one. Each worker imports TVM and registers the tensor
intrinsics once, not once per batch."""

from __future__ import annotations

import os
import tempfile
import time
from collections import OrderedDict

from .timer import device_arguments, time_function
from .timing import TimingPolicy

_ARGS: OrderedDict = OrderedDict()  # (device, argument signature) -> arguments, a few tasks' worth
_KEEP_ARGS = 4


def warm_up() -> int:
    """Import what every build needs; the PID. Not TVM's tensor intrinsics: a candidate comes
    tensorized already, and registering them took 15 workers 53 s on the H200 host, against
    8 s without (and the same candidates built the same)."""
    import tvm.driver  # noqa: F401
    import tvm.s_tir.transform  # noqa: F401

    return os.getpid()


def cuda_compiler() -> tuple[str, str]:
    """Which CUDA compiler TVM will use in this process, and why. TVM 0.27 defaults to NVRTC
    (tens of ms a kernel, no process start), which needs the cuda-bindings package; without it
    every build would fail, so this process falls back to nvcc."""
    chosen = os.environ.get("TVM_CUDA_COMPILE_MODE")
    if chosen:
        return chosen.lower(), "TVM_CUDA_COMPILE_MODE is set"
    try:
        import cuda.bindings.nvrtc  # noqa: F401
    except ImportError:
        os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
        return "nvcc", "cuda-bindings is not installed (pip install 'kb-tvm[cuda]' for NVRTC)"
    return "nvrtc", "cuda-bindings is installed"


def compile_candidate(mod, target):
    """A scheduled module built as MetaSchedule's default builder builds it, in this process."""
    import tvm
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from .targets import build_config

    if target.kind.name == "cuda":
        cuda_compiler()
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    with tvm.transform.PassContext(config=build_config(target, mod)):
        return tvm_build(mod, target=target)


def build(mod, target, out_dir: str) -> tuple[str, float, int]:
    """Build a scheduled module as MetaSchedule's default builder does, then link it into a
    shared library here, so the measuring process only loads it. (path, seconds, pid)."""
    started = time.perf_counter()
    library = compile_candidate(mod, target)
    # a folder each: MetaSchedule's RemoveBuildArtifact callback deletes the artifact's folder
    path = os.path.join(tempfile.mkdtemp(dir=out_dir), "candidate.so")
    library.export_library(path)
    return path, time.perf_counter() - started, os.getpid()


def built_arguments(mod) -> list:
    """MetaSchedule ArgInfos of a scheduled module's function as `build` builds it: without the
    weight-layout preprocessing block, so a weight RewriteLayout packed takes its packed shape."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return ArgInfo.from_entry_func(mod, remove_preproc=True)


def argument_signature(args_info) -> tuple:
    """MetaSchedule ArgInfos as a hashable key: ("TENSOR", dtype, shape) each."""
    return tuple((kind, str(dtype), tuple(int(d) for d in shape)) for kind, dtype, shape in
                 (a.as_json() for a in args_info))


def arguments(device, signature: tuple, cache: OrderedDict):
    """`timer.device_arguments` for a signature, made once per task and kept in `cache` (a few
    tasks' worth)."""
    key = (device.dlpack_device_type(), device.index, signature)
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    cache[key] = device_arguments(device, signature)
    while len(cache) > _KEEP_ARGS:
        cache.popitem(last=False)
    return cache[key]


def measure(artifact: str, device_type: str, device_id: int, signature: tuple, policy: TimingPolicy,
            best_s: float | None) -> dict:
    """Time one built candidate under `policy`, racing it against `best_s`."""
    import tvm

    started = time.perf_counter()
    module = tvm.runtime.load_module(artifact)
    device = tvm.runtime.device(device_type, device_id)
    args = arguments(device, signature, _ARGS)
    loaded = time.perf_counter()
    report = time_function(module, module.entry_name, device, args, policy, best_s,
                           cpu=device_type in ("cpu", "llvm"))
    return {**report, "load_s": loaded - started, "timed_s": time.perf_counter() - loaded, "pid": os.getpid()}


def pid() -> int:
    return os.getpid()
