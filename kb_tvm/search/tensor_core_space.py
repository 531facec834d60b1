"""The tensor-core design space on CUDA: MetaSchedule's own, plus bf16, plus pipelined WMMA sketches.

TVM 0.27 registers WMMA intrinsics for fp16 and int8 only, so stock MetaSchedule has no
tensor-core sketch for a bf16 GEMM and falls back to CUDA cores (15 ms for 4096^3 on the
H200 against 0.68 ms with these). WMMA takes bf16 operands on sm_80 and later with
the same 16x16x16 fragment shape and fp32 accumulation, so kb registers those intrinsics from
TVM's own generators and adds them to the WMMA rule. Everything else is DefaultCUDATensorCore.

TVM's WMMA rule also runs with its software pipeline off, so no stock sketch overlaps a GEMM's
global loads with its tensor-core math (only resident blocks hide the latency); kb's space holds
every WMMA sketch twice, plain and pipelined (TensorCoreSpace, below).
"""

from __future__ import annotations

import logging

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.space_generator import PostOrderApply, PySpaceGenerator
from tvm.s_tir.schedule import ScheduleError

from ..measure.targets import register_tensor_intrinsics, tvmscript_stack_from_linecache
from ..tvm_errors import design_space_failed

# Names carry kb's prefix so that they never collide with intrinsics a later TVM registers.
BF16_WMMA_GROUPS = [
    {"init": "wmma_fill_16x16x16_f32",
     "load_a": "kb_wmma_load_16x16x16_bf16_a_shared_dyn",
     "load_b": "kb_wmma_load_16x16x16_bf16_b_shared_dyn",
     "compute": "kb_wmma_sync_16x16x16_bf16bf16f32",
     "store": "wmma_store_16x16x16_f32_shared_dyn"},
    {"init": "wmma_fill_16x16x16_f32",
     "load_a": "kb_wmma_load_16x16x16_bf16_a_shared_dyn",
     "load_b": "kb_wmma_load_16x16x16_bf16_b_trans_shared_dyn",
     "compute": "kb_wmma_sync_16x16x16_bf16bf16f32_trans",
     "store": "wmma_store_16x16x16_f32_shared_dyn"},
]

# DefaultCUDATensorCore's WMMA groups (src/s_tir/meta_schedule/schedule_rule/schedule_rule.cc)
_STOCK_WMMA_GROUPS = [
    {"init": f"wmma_fill_16x16x16_{acc}",
     "load_a": f"wmma_load_16x16x16_{src}_a_shared_dyn",
     "load_b": f"wmma_load_16x16x16_{src}_b{trans}_shared_dyn",
     "compute": f"wmma_sync_16x16x16_{src}{src}{acc}{trans}",
     "store": f"wmma_store_16x16x16_{acc}_shared_dyn"}
    for src, acc in (("f16", "f32"), ("f16", "f16"), ("s8", "s32"))
    for trans in ("", "_trans")
]


def register_bf16_intrinsics() -> None:
    """Register the bf16 WMMA load and sync intrinsics, once per process. TensorCoreSpace does
    it; a process of your own that replays kb's bf16 records (compile_tir, a database query)
    calls it first. It registers TVM's intrinsics (register_tensor_intrinsics: ~2 s on a 2-core
    machine, where TVM's own import takes 30 s), so nothing on the build path calls it: builds
    take scheduled modules, which name no intrinsic."""
    from tvm.s_tir import TensorIntrin

    wanted = {
        "kb_wmma_load_16x16x16_bf16_a_shared_dyn": ("load", "shared.dyn", False, False),
        "kb_wmma_load_16x16x16_bf16_b_shared_dyn": ("load", "shared.dyn", True, False),
        "kb_wmma_load_16x16x16_bf16_b_trans_shared_dyn": ("load", "shared.dyn", True, True),
        "kb_wmma_sync_16x16x16_bf16bf16f32": ("sync", "float32", False),
        "kb_wmma_sync_16x16x16_bf16bf16f32_trans": ("sync", "float32", True),
    }
    missing = {name: how for name, how in wanted.items() if TensorIntrin.get(name, allow_missing=True) is None}
    if not missing:
        return
    register_tensor_intrinsics()
    from tvm.s_tir.tensor_intrin import cuda as intrin

    with tvmscript_stack_from_linecache():
        for name, (kind, *args) in missing.items():
            parts = (intrin.get_wmma_load_intrin(16, 16, 16, "bfloat16", *args) if kind == "load"
                     else intrin.get_wmma_sync_intrin(16, 16, 16, "bfloat16", *args))
            TensorIntrin.register(name, *parts)


def tensor_core_rules(*, software_pipeline: bool = False) -> list:
    """DefaultCUDATensorCore's rules with the WMMA rule also holding the bf16 groups;
    software_pipeline: the WMMA rule loads the next k1 step's tiles (through registers, into
    double-buffered shared memory) while the current one computes."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.schedule_rule import (
        MultiLevelTilingTensorCore,
        ReuseType,
    )

    register_bf16_intrinsics()
    rules = list(ms.ScheduleRule.create("cuda-tensorcore"))
    if not isinstance(rules[1], MultiLevelTilingTensorCore):
        raise RuntimeError("TVM's cuda-tensorcore rules changed: the WMMA rule is not second")  # noqa: TRY004
    rules[1] = MultiLevelTilingTensorCore(
        intrin_groups=_STOCK_WMMA_GROUPS + BF16_WMMA_GROUPS,
        structure="SSSRRSRS",
        tile_binds=["blockIdx.y", "blockIdx.x", "threadIdx.y"],
        max_innermost_factor=4,
        vector_load_lens=[1, 2, 3, 4, 8, 16],
        reuse_read=ReuseType(req="must", levels=[4], scope="shared.dyn"),
        reuse_write=ReuseType(req="must", levels=[2], scope="shared.dyn"),
        use_software_pipeline=software_pipeline,
    )
    return rules


def align_bf16_staging(sch) -> int:
    """Pad the rows of a sketch's bf16 shared-memory staging buffers as the WMMA rule pads fp16
    ones (StorageAlign 32, 8: rows 16 bytes apart mod 64 to spread banks); the C++ rule pads
    fp16 and int8 only and warns for the rest. Returns how many buffers it padded."""
    padded = 0
    for inst in sch.trace.insts:
        if inst.kind.name != "CacheRead" or str(inst.attrs[1]) != "shared.dyn":
            continue
        block = sch.get(inst.outputs[0])
        if str(block.writes[0].source.dtype) == "bfloat16" and "buffer_dim_align" not in block.annotations:
            sch.storage_align(inst.outputs[0], 0, -2, 32, 8)
            padded += 1
    return padded


def _sketches(family, mod, attempts: int = 3) -> list:
    """A family's sketches, or none. TVM 0.27's rules can fail on a random compute location
    (seen: "not a stage pipeline" on a ResNet-50 conv + relu, which ended a stock run); the
    context's random state moves on, so another attempt draws again. Some fail on every draw
    (`design_space_failed`)."""
    for attempt in range(attempts):
        try:
            return list(family.generate_design_space(mod))
        except (RuntimeError, ValueError, IndexError) as err:
            if not design_space_failed(err):
                raise
            logging.getLogger("kb_tvm").warning("design space attempt %d of %d failed: %s", attempt + 1,
                                                attempts, str(err).strip().splitlines()[0])
    return []


@derived_object
class TensorCoreSpace(PySpaceGenerator):
    """DefaultCUDATensorCore's sketches, plus bf16 WMMA, plus the WMMA sketches again with
    software-pipelined shared-memory loads (TVM's WMMA rule has the pipeline off, so no stock
    sketch overlaps loads with math on fp16/bf16 GEMMs); bf16 staging gets the padding the
    C++ rule gives fp16 only. Stock searches use it too, so that side-by-side runs compare
    searches over one space."""

    def __init__(self):
        self._families = [PostOrderApply(sch_rules=tensor_core_rules(software_pipeline=pipelined),
                                         postprocs="cuda-tensorcore", mutator_probs="cuda-tensorcore")
                          for pipelined in (False, True)]
        # the first family's objects, so that initializing it initializes these
        # (PySpaceGenerator's own initialization leaves its fields alone)
        self.sch_rules = list(self._families[0].sch_rules)
        self.postprocs = list(self._families[0].postprocs)
        self.mutator_probs = dict(self._families[0].mutator_probs)

    def _initialize_with_tune_context(self, context) -> None:
        for family in self._families:
            family._initialize_with_tune_context(context)

    def generate_design_space(self, mod):
        unpipelined, pipelined = (_sketches(family, mod) for family in self._families)
        if not unpipelined and not pipelined:
            raise ScheduleError("no tensor-core design space: every attempt of both sketch families failed")
        # the pipelined family differs only where a WMMA rule applied: a model's other tasks
        # (layer norm, softmax, casts) would get every sketch twice
        spaces = list(unpipelined) + [sch for sch in pipelined if "wmma" in str(sch.trace)]
        for sch in spaces:
            align_bf16_staging(sch)
        return spaces

    def clone(self):
        return TensorCoreSpace()
