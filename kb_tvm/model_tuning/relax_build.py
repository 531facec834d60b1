"""The Relax side: import the ONNX model, prepare it as Relax's tuning pipeline does (the
module tasks are extracted from), and build a VM executable from it and the records."""

from __future__ import annotations

from .layout import layout_moves_removed
from .onnx_input import ModelError, fold_constants
from .precision import apply_math, lower_precision
from .rewrites import empty_loops_removed, integer_powers_as_products, means_of_products_as_one_reduction


def to_relax(model):
    """Relax IRModule of the ONNX model (its shape arithmetic folded first: `fold_constants`),
    weights bound as constants."""
    from tvm.relax.frontend.onnx import from_onnx

    try:
        return from_onnx(fold_constants(model), keep_params_in_input=False)
    except Exception as err:  # noqa: BLE001 - TVM's importer raises many kinds
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelError(f"TVM cannot import this model: {first}") from None


def relax_module(model, target, *, precision: str, math: str, kernels: bool = True):
    """The module a model is tuned and built from: imported, its integer powers written out
    (`rewrites.integer_powers_as_products`), in `precision`, with `math`, a mean of a product one
    reduction (`rewrites.means_of_products_as_one_reduction`), its attention one task where the
    attention family computes it (kernels/attention/rewrite.py), its layout-only kernels taken out
    (layout.py), prepared. The last two are kb's, made only where the job runs the families
    (`kernels`): stock's search alone gets the module as it would without kb."""
    from ..kernels.attention import fuse_attention, takes_attention

    imported = integer_powers_as_products()(to_relax(model))
    mod = means_of_products_as_one_reduction()(apply_math(lower_precision(imported, precision), math))
    if kernels:
        mod = layout_moves_removed()(fuse_attention(mod) if takes_attention(target, precision) else mod)
    return prepare(mod, target)


def prepare(mod, target):
    """The module tasks are extracted from and records are applied to: Relax's own pre-tuning
    steps, as `relax.pipeline.static_shape_tuning_pipeline` runs them before it tunes
    (DecomposeOpsForInference, CanonicalizeBindings, then the zero pipeline: legalize,
    annotate, fold constants, fuse), after the target's library dispatch; then loops of extent 0
    go (`rewrites.empty_loops_removed`). `build` applies the records to this very module, so
    task names and hashes match by construction.

    static_shape_tuning_pipeline itself cannot serve: its MetaScheduleTuneIRMod tunes with
    stock MetaSchedule's task scheduler and search and takes no strategy, scheduler, wall
    budget, builder or runner to hand KBTaskScheduler and KBSearch."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    passes = [*dispatch, relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings(),
              pipeline.zero_pipeline(), empty_loops_removed()]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def model_tasks(mod, target, *, views_left_out: bool = True) -> list:
    """MetaSchedule's tasks of a `prepare`d module; with `views_left_out` (kb's jobs), not those
    whose function only reshapes: the build makes each a view (Relax's RewriteDataflowReshape),
    so no kernel runs it, and tuning it only spent seconds (8 s each on an H100, for the views
    the layout rewrites leave in a ViT)."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    tasks = ms.relax_integration.extract_tasks(mod, target)
    if not views_left_out:
        return list(tasks)
    return [t for t in tasks if not all(relax.analysis.has_reshape_pattern(m["main"]) for m in t.dispatched)]


def build(mod, target, database=None, *, cuda_graph: bool = True, kernels=()):
    """A VM executable of a `prepare`d module: the database's records applied (MetaSchedule's
    MetaScheduleApplyDatabase), default schedules for the rest (dlight's on GPUs; on CPUs
    schedules/cpu_default.py's threads and vectors), then Relax's lowering for the target.
    cuda_graph (CUDA targets only): launch the runs of kernels that touch no model input or
    output as one CUDA graph each, captured on the first call (Relax's RewriteCUDAGraph): a
    BERT forward is 233 launches of ~5 us through the VM. Inputs
    and outputs stay outside the graphs, so a second call with other tensors is still right.
    TIR lowers with `build_config` per function, as each kernel was built when it was tuned: on CUDA a tensor-core record needs merged shared memory
    to lower, and dlight's reductions fail under it. Not `compile_relax`, which
    would fuse the prepared module again before applying the records and so change the
    functions the records were tuned for. kernels: `kernels.extern.ExternKernel`s (a kernel
    family's) that replace their tasks, linked into the executable."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline
    from tvm.s_tir import dlight as dl
    from tvm.s_tir import meta_schedule as ms

    from ..kernels.extern import compile_kernels, use_kernels
    from ..measure.targets import register_tir_pipeline
    from ..schedules.cpu_default import CpuFallback, CpuReduction, Refusable

    database = database if database is not None else ms.database.MemoryDatabase()
    if target.kind.name == "cuda":  # TVM 0.27's backend.cuda does not export its dataflow_lower_passes
        from tvm.relax.backend.cuda import pipeline as cuda

        lower = cuda.dataflow_lower_passes(target) + cuda.finalize_passes(target)  # RewriteCUDAGraph among them
    else:
        try:
            lower = relax_pipeline.dataflow_lower_passes(target) + relax_pipeline.finalize_passes(target)
        except (ValueError, AttributeError):  # targets without their own pipeline: compile_relax's fallback
            t = relax.transform
            lower = [t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(),
                     t.StaticPlanBlockMemory(), t.LowerAllocTensor(), t.KillAfterLastUse(),
                     t.LowerRuntimeBuiltin(), t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol()]
    gpu = relax_pipeline.BackendDispatcher.is_gpu_target(target)

    kernels = list(kernels)
    library = compile_kernels(kernels, target)

    @tvm.transform.module_pass(opt_level=3)
    def tuned_pipeline(mod, _ctx):
        if kernels:  # before the database: their tasks are gone from the module
            mod = use_kernels(mod, kernels)
            mod = mod.with_attr("external_mods", [*((mod.attrs or {}).get("external_mods", [])), library])
        mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
        if gpu:
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                          dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
        elif target.kind.name == "llvm":
            mod = dl.ApplyDefaultSchedule(CpuReduction(), Refusable(CpuFallback()))(mod)
        return tvm.transform.Sequential(lower)(mod)

    config = {"relax.backend.use_cuda_graph": cuda_graph and target.kind.name == "cuda"}
    with target, database, tvm.transform.PassContext(opt_level=3, config=config):
        return relax.build(mod, target=target, relax_pipeline=tuned_pipeline, tir_pipeline=register_tir_pipeline())


def export_library(executable, path) -> None:
    """`executable.export_library(path)`, without the "Scope Saving:" warning TVM 0.27 logs for
    every memory scope it saves (a debug line left in src/runtime/vm/executable.cc: 14-19 lines at
    the end of a small model's tune, none of them about the user's model). TVM writes it to file
    descriptor 2, below Python, so the descriptor is caught for the call; every other line it or
    the linker wrote passes through."""
    import os
    import sys
    import tempfile

    sys.stderr.flush()
    with tempfile.TemporaryFile() as caught:
        stderr = os.dup(2)
        os.dup2(caught.fileno(), 2)
        try:
            executable.export_library(str(path))
        finally:
            os.dup2(stderr, 2)
            os.close(stderr)
            caught.seek(0)
            lines = caught.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if "Warning: Scope Saving:" not in line))
            sys.stderr.flush()
