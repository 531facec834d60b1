"""schedules/flash_attention.py as a `KernelFamily`: it takes the `kb_attention` tasks that
rewrite.py makes of a model's attention (their PrimFunc carries the problem), on an sm_90 GPU in
fp16 or bf16, and searches its tiles in the order below."""

from __future__ import annotations

import numpy as np

from ..family import KernelFamily, NotApplicable, PatientSearch
from ..hopper_gemm.family import ARCH, on_hopper_in
from .rewrite import ATTR, AttentionShape

# (bm, bn, vector reads) in the order to measure: 64-key tiles first (on the H200 the fastest for
# the decoder's and ViT's attention, with 4 or 8 warps by the sequence), each also with K and V
# read plainly (the vector and ldmatrix reads were 1.1-3.6x faster on the H200 but for ViT's
# 197 keys, where they tie), then the rest
TILE_ORDER = ((64, 64, True), (128, 64, True), (64, 64, False), (128, 64, False), (64, 32, True),
              (64, 128, True), (128, 32, True), (128, 128, True))
# skip_masked (a causal mask's hidden key tiles skipped) is not searched: on the H200 it computed
# right but ran 1.27-1.42x slower on every masked shape (each tile's mask is scanned first)


def takes_attention(target, precision: str | None) -> bool:
    """Whether the rewrite to one attention task pays here: the family computes it."""
    return FAMILY.applies(target, precision) is None


class FlashAttention(KernelFamily):
    name = "flash_attention"
    source = "schedules/flash_attention.py"
    shows_refusals_of = "kb_attention"
    # MetaSchedule schedules kb_attention's TIR as five kernels with the scores in memory between
    # them: on the H200 its first batch of a decoder's attention took 98 s of a 4-minute budget
    # and did not beat the family's kernel, so the task is not searched once the family has one
    metaschedule_competes = False

    def applies(self, target, precision: str | None = None) -> str | None:
        return on_hopper_in(target, precision)

    def match(self, mod, target) -> AttentionShape:
        func = mod["main"]
        if func.attrs is None or ATTR not in func.attrs:
            raise NotApplicable("not an attention task (the model's attention becomes one kb_attention task)")
        return AttentionShape.from_attrs(func.attrs[ATTR])

    def variants(self, problem: AttentionShape, target, *, constants: frozenset[int] = frozenset()):
        from ...schedules.flash_attention import DTYPES, AttentionTile

        if problem.dtype not in DTYPES:
            raise NotApplicable(f"dtype {problem.dtype}: the kernel takes {', '.join(DTYPES)}")
        pool = [tile for tile in (AttentionTile(bm=bm, bn=bn, v_ldmatrix=fast, k_vectors=fast)
                                  for bm, bn, fast in TILE_ORDER)
                if not tile.fits(problem.d, problem.d_v)]
        if not pool:
            raise NotApplicable(f"no tile takes heads of d={problem.d}, d_v={problem.d_v}")
        return PatientSearch(pool, patience=3, what=f"attention {problem.seq}x{problem.seq_kv}x{problem.d}")

    def check_inputs(self, problem: AttentionShape, arrays: list, seed: int) -> list:
        """Random biases mask nothing, so the second set (the one timed) gets the mask a model
        has: causal where the bias spans queries and keys (a decoder's), so masked scores are
        checked and a tile skip (skip_masked) that drops a wrong tile fails; the first set
        masks a padding bias's last quarter of keys (BERT's, which its runs mostly leave unmasked)."""
        if problem.bias_dims is None:
            return arrays
        bias = arrays[3].copy()
        lowest = np.finfo(np.float32).min
        if problem.bias_dims[2] > 1 and seed == 1:
            bias[..., np.triu(np.ones((problem.seq, problem.seq_kv), bool), 1 + problem.seq_kv - problem.seq)] = lowest
        elif problem.bias_dims[2] == 1 and seed == 0:
            bias[..., -(problem.seq_kv // 4):] = lowest
        return [*arrays[:3], bias, *arrays[4:]]

    def build(self, problem: AttentionShape, params, target, task: str):
        from ...schedules.flash_attention import attention
        from ..extern import ExternKernel

        symbol = f"kb_attention_{task}"
        p = problem
        heads = p.batch * p.heads
        kv_heads = heads // p.kv_group
        shapes = [(heads * p.seq, p.d), (kv_heads * p.d, p.seq_kv), (kv_heads * p.seq_kv, p.d_v)]
        if p.bias_dims is not None:
            shapes.append(tuple(p.bias_dims))
        shapes.append((heads * p.seq, p.d_v))
        return ExternKernel(task=task, symbol=symbol, func=attention(p, params, symbol), shapes=tuple(shapes),
                            arch=ARCH)

    def describe(self, params) -> str:
        return params.describe()

    def record(self, params) -> dict:
        return {"tile": {"bm": params.bm, "bn": params.bn, "v_ldmatrix": params.v_ldmatrix,
                         "k_vectors": params.k_vectors, "skip_masked": params.skip_masked}}

    def from_record(self, row: dict):
        from ...schedules.flash_attention import AttentionTile

        return AttentionTile(**row["tile"])

    def problem_record(self, problem: AttentionShape) -> dict:
        return {"seq": problem.seq, "seq_kv": problem.seq_kv, "d": problem.d, "heads": problem.batch * problem.heads,
                "kv_group": problem.kv_group, "dtype": problem.dtype, "out_layout": problem.out_layout}


FAMILY = FlashAttention()
