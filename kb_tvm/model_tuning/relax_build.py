"""The Relax side: import the ONNX model, fuse it the way `compile_relax` does (so tuned
tasks carry the names the build looks up), and build a VM executable from the records."""

from __future__ import annotations

from .onnx_input import ModelError


def to_relax(model):
    """Relax IRModule of the ONNX model, weights bound as constants."""
    from tvm.relax.frontend.onnx import from_onnx

    try:
        return from_onnx(model, keep_params_in_input=False)
    except Exception as err:  # noqa: BLE001 - TVM's importer raises many kinds
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelError(f"TVM cannot import this model: {first}") from None



def fuse(mod, target):
    """The module as compile_relax prepares it (dispatch, legalize, fuse) before applying
    records: tasks extracted from this one have the names and bodies compile_relax looks up."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    passes = [*dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()]
    with target, tvm.transform.PassContext(opt_level=3):
        once = tvm.transform.Sequential(passes)(mod)
        # compile_relax runs these passes again on what it is given; the second run only
        # re-annotates the fused functions, and a third changes nothing: tune what it builds
        return tvm.transform.Sequential(passes)(once)


def build(mod, target, database=None):
    """A VM executable; functions without a tuned record get TVM's default schedules.

    MetaSchedule's `compile_relax`, step for step (fuse as tasks were extracted, apply the
    records, dlight for the rest), but under `build_config(target)`: compile_relax opens a
    PassContext of its own, and a CUDA tensor-core record tuned under merged shared memory
    would not lower without it."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline
    from tvm.s_tir import dlight as dl
    from tvm.s_tir import meta_schedule as ms

    from ..measure.targets import build_config

    database = database if database is not None else ms.database.MemoryDatabase()
    try:
        dispatch = relax_pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    try:
        lower = relax_pipeline.dataflow_lower_passes(target) + relax_pipeline.finalize_passes(target)
    except (ValueError, AttributeError):  # targets without their own pipeline (llvm): compile_relax's fallback
        t = relax.transform
        lower = [t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(),
                 t.StaticPlanBlockMemory(), t.LowerAllocTensor(), t.KillAfterLastUse(), t.LowerRuntimeBuiltin(),
                 t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol()]
    gpu = relax_pipeline.BackendDispatcher.is_gpu_target(target)

    @tvm.transform.module_pass(opt_level=3)
    def tuned_pipeline(mod, _ctx):
        mod = tvm.transform.Sequential([
            *dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()])(mod)
        mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
        if gpu:
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                          dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
        return tvm.transform.Sequential(lower)(mod)

    with target, database, tvm.transform.PassContext(opt_level=3, config=build_config(target)):
        return relax.build(mod, target=target, relax_pipeline=tuned_pipeline)
