"""Which tuning tasks the Hopper GEMM template (schedules/hopper_gemm.py) can compute, read off the
task's TIR: one reduction block C[i, j] += A[i, k] * B[k, j] (or B[j, k]) over fp16 or bf16
inputs, nothing fused before or after it. A task it cannot compute is refused with the reason,
so that a user (and, next, the search) sees why a matmul keeps MetaSchedule's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedules.hopper_gemm import INPUT_DTYPES, OUTPUT_DTYPES

SPATIAL, REDUCE = 0, 2  # TVM's IterVar kinds (DataPar, CommReduce)


class NotAHopperGemm(ValueError):
    """The task is not a GEMM the template computes; the message says why."""


@dataclass(frozen=True)
class GemmProblem:
    m: int
    n: int
    k: int
    dtype: str  # of A and B
    out_dtype: str
    b_layout: str  # "kn": B[K, N]; "nk": B[N, K]


def _indices(region) -> list[str]:
    return [str(r.min) for r in region.region]


def match_gemm(mod) -> GemmProblem:
    """The GEMM `mod` ("main", a MetaSchedule task or workload) computes, or NotAHopperGemm."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    blocks = [sch.get(rv) for rv in sch.get_child_blocks(sch.get_sblock("root"))]

    def kinds_of(block):
        return sorted(int(iv.iter_type) for iv in block.iter_vars)

    if len(blocks) != 1:
        gemms = [b for b in blocks if kinds_of(b) == [SPATIAL, SPATIAL, REDUCE]]
        if len(gemms) == 1:
            raise NotAHopperGemm(f"a GEMM with {len(blocks) - 1} fused block(s) before or after it "
                                 "(the template has no fused epilogues yet)")
        raise NotAHopperGemm(f"{len(blocks)} blocks, not one GEMM")
    block = blocks[0]
    kinds = kinds_of(block)
    if kinds != [SPATIAL, SPATIAL, REDUCE]:
        spatial = kinds.count(SPATIAL)
        raise NotAHopperGemm(f"{spatial} spatial and {kinds.count(REDUCE)} reduction axes (a GEMM has 2 and 1"
                             + ("; batched matmuls are not in the template yet)" if spatial == 3 else ")"))
    i, j, r = (str(iv.var) for iv in block.iter_vars)
    if len(block.reads) != 2 or len(block.writes) != 1:
        raise NotAHopperGemm(f"reads {len(block.reads)} and writes {len(block.writes)} buffers (a GEMM: 2 and 1)")
    (a, b), c = block.reads, block.writes[0]
    if _indices(c) != [i, j] or _indices(a) != [i, r]:
        raise NotAHopperGemm(f"indexed as {c.source.name}{_indices(c)} = {a.source.name}{_indices(a)} x ...: "
                             "the template computes C[i, j] from A[i, k]")
    if _indices(b) == [r, j]:
        b_layout = "kn"
    elif _indices(b) == [j, r]:
        b_layout = "nk"
    else:
        raise NotAHopperGemm(f"B indexed as {_indices(b)}: the template reads B[k, j] or B[j, k]")
    dtype, b_dtype, out_dtype = str(a.source.dtype), str(b.source.dtype), str(c.source.dtype)
    if dtype != b_dtype or dtype not in INPUT_DTYPES:
        raise NotAHopperGemm(f"inputs {dtype} and {b_dtype}: the template takes {' or '.join(INPUT_DTYPES)}")
    if out_dtype not in OUTPUT_DTYPES:
        raise NotAHopperGemm(f"output {out_dtype}: the template writes {', '.join(OUTPUT_DTYPES)}")
    m, k = (int(d) for d in a.source.shape)
    n = int(c.source.shape[1])
    return GemmProblem(m=m, n=n, k=k, dtype=dtype, out_dtype=out_dtype, b_layout=b_layout)
