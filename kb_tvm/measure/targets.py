"""Targets that describe the machine a kernel will run on.

A bare `llvm` target makes LLVM emit baseline x86-64 code (no AVX2/AVX-512): the same tuned
gemm-512 schedule ran 6.5 ms that way and 3.75 ms with the host's `mcpu`. So `llvm` means the
host CPU (its `mcpu`, its physical cores) unless the user says otherwise, and `cuda` is read off
the GPU. Whatever a user's JSON target leaves out is filled in from the host the same way.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

# Static shared memory per block: what a kernel without opt-in may use (every arch since sm_20).
# MetaSchedule's CUDA-core rules stage tiles in static `shared`; above 48 KB those fail to build.
STATIC_SHARED_MEMORY_BYTES = 48 * 1024


def build_config(target, mod=None) -> dict:
    """TVM pass options a build of `mod` for `target` runs under: tuning builds, the lowering
    check, re-timing and the deployed library alike, so a tuned schedule builds the same
    everywhere. On CUDA:
    - kernels with tensor-core (WMMA) fragments merge their staged tiles into one shared buffer
      (`tirx.merge_static_smem`): without it TVM 0.27's StorageRewrite rejects ~85% of the
      tensor-core samples that pass postprocessing ("tvm_access_ptr element type must match"),
      with it none, and the kernels compute the same and run as fast (on an H200, at 1024^3 and
      4096^3). Other kernels must not merge: it fails half of the reduction sketches (layer norm,
      softmax) and dlight's default schedules for them ("buffer_byte_offsets").
    - kernels that read or write bool tensors are not vectorized (`tirx.disable_vectorize`): TVM
      0.27's CUDA code reads two bools at once as a `ushort2`, two 2-byte lanes over 1-byte values,
      which gives wrong values (a decoder's causal mask fused into its attention matmul: wrong
      logits) or, at an odd offset, a misaligned address that kills the process.
    Without `mod`: the options of a tensor-core kernel."""
    if target.kind.name != "cuda":
        return {}
    if mod is None:
        return {"tirx.merge_static_smem": True}
    config = {"tirx.merge_static_smem": True} if uses_tensor_cores(mod) else {}
    if uses_bool_buffers(mod):
        config["tirx.disable_vectorize"] = True
    return config


def _prim_funcs(mod) -> list:
    import tvm

    return [mod] if isinstance(mod, tvm.tirx.PrimFunc) else \
        [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]


def uses_bool_buffers(mod) -> bool:
    """Whether a module (or PrimFunc) reads or writes a bool buffer."""
    from tvm.s_tir.analysis import detect_buffer_access_lca

    return any(str(buffer.dtype) == "bool" for func in _prim_funcs(mod) for buffer in detect_buffer_access_lca(func))


def uses_tensor_cores(mod) -> bool:
    """Whether a scheduled module (or PrimFunc) holds WMMA fragments."""
    from tvm.s_tir.analysis import detect_buffer_access_lca

    return any(buffer.scope().startswith("wmma.") for func in _prim_funcs(mod)
               for buffer in detect_buffer_access_lca(func))


MERGE_WHERE_TENSOR_CORES = "kb-merge-shared-memory-where-tensor-cores"


def _tir_pipeline_merging_where_tensor_cores():
    """TVM's default TIR pipeline, run with `build_config` per function: a model's library
    holds tensor-core kernels, which need merged shared memory, and reductions, which break
    under it, and kernels on bool tensors, which must not vectorize; a pass option holds for a
    whole build, so the functions are lowered in groups of the same options."""
    import tvm

    default, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("default")

    @tvm.transform.module_pass(opt_level=0, name="kb.MergeSharedMemoryWhereTensorCores")
    def pipeline(mod, ctx):
        target = tvm.target.Target.current()
        groups: dict[tuple, dict] = {}
        for gvar, func in mod.functions.items():
            config = build_config(target, func) if isinstance(func, tvm.tirx.PrimFunc) else {}
            groups.setdefault(tuple(sorted(config.items())), {})[gvar] = func
        lowered = {}
        for options, funcs in groups.items():
            config = {**dict(ctx.config), "tirx.merge_static_smem": False, **dict(options)}
            with tvm.transform.PassContext(opt_level=ctx.opt_level, config=config):
                part = default(tvm.IRModule(funcs, attrs=mod.attrs))
            for gvar, func in part.functions.items():
                # a group of one function would be marked the module's entry, which it is not
                if len(mod.functions) > 1 and "tirx.is_entry_func" in (func.attrs or {}):
                    func = func.without_attr("tirx.is_entry_func")
                lowered[gvar] = func
        return tvm.IRModule(lowered, attrs=mod.attrs)

    return pipeline, finalize_host, finalize_device


def register_tir_pipeline() -> str:
    """The name under which `relax.build(..., tir_pipeline=NAME)` lowers with `build_config`
    per function."""
    from tvm.tirx import compilation_pipeline

    compilation_pipeline.PIPELINE_MAP[MERGE_WHERE_TENSOR_CORES] = _tir_pipeline_merging_where_tensor_cores
    return MERGE_WHERE_TENSOR_CORES


def register_tensor_intrinsics(*, cpu_only: bool = False) -> None:
    """Register TVM's tensor intrinsics (every backend's), as MetaSchedule's first TuneContext
    would: about 2-5 s on a 2-core CPU, where TVM's own import of them takes 22 s. Each of their
    ~250 TVMScript functions calls `inspect.stack()`, which looks up the module of every frame,
    and a frame of the import machinery (no file on disk) costs a scan of sys.modules. During
    the import, `inspect.stack` reads each frame's line from linecache instead: TVM's parser
    gets the same frames and lines. Called again, it does nothing.

    cpu_only: the CPU backends' alone, without CUDA's (4.1 of 5.1 s on a 2-core CPU). The package
    then stands in sys.modules as imported, so MetaSchedule imports nothing more, and a CUDA tune
    later in the process would miss CUDA's: only a `kb-tvm` command on a CPU target, a process that
    tunes nothing else, asks for it."""
    import importlib
    import importlib.util
    import sys

    package = "tvm.s_tir.tensor_intrin"
    if package in sys.modules:
        return
    with tvmscript_stack_from_linecache():
        if not cpu_only:
            importlib.import_module(package)
            return
        # the package without its __init__, which imports CUDA's first; then what it imports after
        sys.modules[package] = importlib.util.module_from_spec(importlib.util.find_spec(package))
        for backend in CPU_INTRINSICS:
            importlib.import_module(f"{package}.{backend}")


CPU_INTRINSICS = ("arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu")  # tvm/s_tir/tensor_intrin/__init__.py's


@contextmanager
def tvmscript_stack_from_linecache():
    """While TVMScript functions are made in its block (TVM's intrinsics, kb's bf16 ones),
    `inspect.stack` reads each frame's line from linecache, without the module lookups that
    cost TVM's import of its intrinsics 30 s on 2 cores (register_tensor_intrinsics)."""
    import inspect

    stack = inspect.stack
    inspect.stack = _stack_from_linecache
    try:
        yield
    finally:
        inspect.stack = stack


def _stack_from_linecache(context: int = 1) -> list:
    """`inspect.stack(context)` without its module lookups: the caller's frames, outermost
    last, each with `context` lines around its current line."""
    import inspect
    import linecache
    import sys

    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        lines = index = None
        if context > 0 and lineno:
            source = linecache.getlines(filename, frame.f_globals)
            if source:
                start = max(0, min(lineno - 1 - context // 2, len(source) - context))
                lines, index = source[start:start + context], lineno - 1 - start
        frames.append(inspect.FrameInfo(frame, filename, lineno, frame.f_code.co_name, lines, index))
        frame = frame.f_back
    return frames


def compile_kernel(mod, target):
    """`tvm.compile` of a scheduled kernel as kb builds it: under `build_config(target, mod)`."""
    import tvm

    with tvm.transform.PassContext(config=build_config(target, mod)):
        return tvm.compile(mod, target=target)


def physical_cores() -> int:
    try:
        import psutil
    except ImportError:
        return os.cpu_count() or 1
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def use_target_cores(target) -> int | None:
    """Make TVM's CPU thread pool run an llvm target's kernels on its num-cores threads; the
    threads it will use (None: not an llvm target). TVM takes every x86 CPU for one of two
    hyperthreads of a core and, unless TVM_NUM_THREADS says otherwise, runs parallel loops on
    half of the CPUs: on a VM whose vCPUs are cores (this 2-vCPU machine, one thread a core) that
    is one thread, where numpy and onnxruntime use two (a GEMM ran at 99 GFLOP/s, and at 198 on
    two threads). TVM_NUM_THREADS is set here, for this process and those it starts, unless the
    user set it; the pool reads it when it starts, at the first parallel kernel run."""
    import tvm

    if target.kind.name != "llvm":
        return None
    cores = int(target.attrs.get("num-cores", 0) or 0)
    if cores > 0:
        os.environ.setdefault("TVM_NUM_THREADS", str(cores))
    return int(tvm.get_global_func("runtime.NumThreads")())


def available_cpus() -> int:
    """CPUs this process may run on (taskset and containers included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cuda_available() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except RuntimeError:  # no CUDA runtime at all (an InternalError is one too); an API change raises
        return False


def host_cpu() -> str:
    """LLVM's name for this machine's CPU ("rocketlake", "sapphirerapids", "znver4", ...)."""
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def host_llvm_spec(given: dict | None = None) -> dict:
    """An llvm target spec for this host: `given` with mcpu and num-cores filled in if absent."""
    spec = {"kind": "llvm", **(given or {})}
    spec.setdefault("mcpu", host_cpu())
    spec.setdefault("num-cores", physical_cores())
    return spec


def device_cuda_spec(given: dict | None = None, device: int = 0) -> dict:
    """A cuda target spec read off GPU `device`: arch, threads, warp, registers; shared memory at
    the static per-block limit (see STATIC_SHARED_MEMORY_BYTES). `given` overrides any of them."""
    import tvm

    dev = tvm.cuda(device)
    major, minor = dev.compute_version.split(".")
    spec = {"kind": "cuda", "arch": f"sm_{major}{minor}", "max_threads_per_block": int(dev.max_threads_per_block),
            "max_shared_memory_per_block": STATIC_SHARED_MEMORY_BYTES, "thread_warp_size": int(dev.warp_size),
            "registers_per_block": 65536, "max_num_threads": int(dev.max_threads_per_block)}
    spec.update(given or {})
    host = spec.get("host")
    spec["host"] = host_llvm_spec(host if isinstance(host, dict) else None)
    return spec


def make_target(spec: str | dict | None):
    """A tvm Target from "llvm", "cuda", a JSON object (string or dict), or None (cuda if a GPU
    is visible, else llvm). What describes the hardware and is not given comes from the host."""
    import tvm

    if spec is None:
        spec = "cuda" if cuda_available() else "llvm"
    if isinstance(spec, str) and spec.strip().startswith("{"):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as err:
            raise ValueError(f"target {spec!r} is not valid JSON ({err.msg})") from None
    if isinstance(spec, str) and spec in ("llvm", "cuda"):
        spec = {"kind": spec}
    if isinstance(spec, str):
        raise ValueError(f"unknown target {spec!r}: use llvm, cuda, or a JSON target like "
                         '\'{"kind": "llvm", "mcpu": "x86-64", "num-cores": 4}\'')
    if not isinstance(spec, dict):
        raise ValueError(f"target {spec!r} is neither a name nor a JSON object")
    if spec.get("kind") == "llvm":
        spec = host_llvm_spec(spec)
    elif spec.get("kind") == "cuda":
        if not cuda_available():
            raise ValueError("target 'cuda' asked for, but no CUDA GPU is visible to TVM")
        spec = device_cuda_spec(spec)
    try:
        return tvm.target.Target(spec)
    except Exception as err:  # noqa: BLE001 - TVM raises many kinds here
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"target {json.dumps(spec)} is not valid: {first}") from None


def describe(target) -> str:
    """One line for progress headers and reports: kind and what describes the hardware."""
    attrs = dict(target.export())
    keys = ("mcpu", "num-cores") if target.kind.name == "llvm" else ("arch", "max_shared_memory_per_block")
    shown = ", ".join(f"{k}={attrs[k]}" for k in keys if k in attrs)
    return f"{target.kind.name} ({shown})" if shown else target.kind.name
