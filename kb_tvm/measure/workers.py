"""What runs inside the persistent worker processes (TVM's popen workers): building a candidate
to a loadable shared library, and timing one. Each worker imports TVM and registers the tensor
intrinsics once, not once per batch."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections import OrderedDict

from .timing import TimingPolicy, calls_per_repeat, verdict

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


def build(mod, target, out_dir: str) -> tuple[str, float, int]:
    """Build a scheduled module as MetaSchedule's default builder does, then link it into a
    shared library here, so the measuring process only loads it. (path, seconds, pid)."""
    import tvm
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from .targets import build_config

    started = time.perf_counter()
    if target.kind.name == "cuda":
        cuda_compiler()
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    with tvm.transform.PassContext(config=build_config(target, mod)):
        library = tvm_build(mod, target=target)
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


def activation_like(shape, dtype: str, seed: int = 0):
    """The numbers kb measures and re-times on (a numpy array): floats uniform in [-1, 1), as
    activations and weights are; integers 0, a valid index for any gather. Not TVM's measure fill:
    it draws floats from [1, 10), where erf and tanh saturate, and libm's erf then ran a tuned
    GEMM+GELU 3-4x faster than on data in [-1, 1]."""
    import ml_dtypes  # TVM's own dependency: numpy has no bfloat16
    import numpy as np

    dtype = str(dtype)
    shape = [int(d) for d in shape]
    if dtype.startswith(("int", "uint", "bool")):
        return np.zeros(shape, dtype=dtype)
    values = np.random.default_rng(seed).uniform(-1, 1, size=shape)
    return values.astype(getattr(ml_dtypes, dtype) if hasattr(ml_dtypes, dtype) else dtype)


def arguments(device, signature: tuple, cache: OrderedDict):
    """Arguments for a signature of ("TENSOR", dtype, shape) tuples (`activation_like` data,
    copied to `device`, local or an RPC server's), made once per task and kept in `cache` (a
    few tasks' worth)."""
    import tvm

    key = (device.dlpack_device_type(), device.index, signature)
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    args = []
    for kind, dtype, shape in signature:
        if kind != "TENSOR":
            raise ValueError(f"argument kind {kind!r} cannot be measured (only TENSOR)")
        tensor = tvm.runtime.empty([int(d) for d in shape], dtype=str(dtype), device=device)
        tensor.copyfrom(activation_like(shape, str(dtype), seed=len(args)))
        args.append(tensor)
    cache[key] = args
    while len(cache) > _KEEP_ARGS:
        cache.popitem(last=False)
    return args


def measure(artifact: str, device_type: str, device_id: int, signature: tuple, policy: TimingPolicy,
            best_s: float | None) -> dict:
    """Time one built candidate under `policy`, racing it against `best_s`."""
    import tvm

    started = time.perf_counter()
    module = tvm.runtime.load_module(artifact)
    device = tvm.runtime.device(device_type, device_id)
    args = arguments(device, signature, _ARGS)
    loaded = time.perf_counter()
    report = time_loaded(module, device, args, policy, best_s, cpu=device_type in ("cpu", "llvm"))
    return {**report, "load_s": loaded - started, "timed_s": time.perf_counter() - loaded, "pid": os.getpid()}


def time_loaded(module, device, args: list, policy: TimingPolicy, best_s: float | None, *, cpu: bool) -> dict:
    """Time a loaded candidate (here or through an RPC session) under `policy`: median_s,
    repeats, number and the verdict."""
    flush = "cache_flush_cpu_non_first_arg" if policy.cache_flush and cpu else ""
    entry = module.entry_name
    device.sync()
    first = float(module.time_evaluator(entry, device, number=1, repeat=1, min_repeat_ms=0, f_preproc=flush)(*args).mean)
    number = calls_per_repeat(first, policy)
    samples: list[float] = []
    why = None
    if best_s is not None and first > policy.race_factor * best_s and first >= policy.repeat_s:
        # one call (after a warm-up) already says "slow": a 1-s kernel costs 2 s here, not 6
        samples, why = [first], "slow"
    elif first * policy.race_after > policy.max_seconds:
        samples, why = [first], "capped"  # so slow that the first repeats alone would pass the cap
    while why is None:  # the first chunk is long enough to race, the next ones two repeats each
        timer = module.time_evaluator(entry, device, number=number, repeat=2 if samples else policy.race_after,
                                      min_repeat_ms=0, f_preproc=flush)
        samples.extend(float(s) for s in timer(*args).results)
        why = verdict(samples, number, best_s, policy)
    return {"median_s": statistics.median(samples), "repeats": len(samples), "number": number, "verdict": why}


def pid() -> int:
    return os.getpid()
