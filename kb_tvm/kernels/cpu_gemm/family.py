"""The CPU GEMM template (schedules/cpu_gemm.py: register blocks, packed B, threads over blocks) as
a `KernelFamily`: an fp32 task read as a fused GEMM (fused_gemm.py), its variants in the prior's
order (variants.py)."""

from __future__ import annotations

from ..family import KernelFamily
from ..fused_gemm import FusedGemm, NotAGemm, match_fused_gemm
from .variants import VectorUnit

DTYPES = ("float32",)


def vector_unit(target) -> VectorUnit:
    """The vector unit the llvm target's CPU has, from its features (SSE's where none is named)."""
    from tvm.target.codegen import target_has_features

    if target_has_features("avx512f", target):
        return VectorUnit(lanes=16, registers=32)
    if target_has_features("avx2", target):
        return VectorUnit(lanes=8, registers=16)
    if target_has_features("neon", target):
        return VectorUnit(lanes=4, registers=32)
    return VectorUnit(lanes=4, registers=16)


def match_cpu_gemm(mod) -> FusedGemm:
    """The fp32 fused GEMM `mod`'s "main" computes (a batch of them: one B for all, or attention's
    B for each), or NotAGemm."""
    return match_fused_gemm(mod, input_dtypes=DTYPES, output_dtypes=DTYPES)


class CpuFamily(KernelFamily):
    """What the CPU families share: an llvm target, fp32."""

    # fp32 sums in another order: a right kernel is off by ~1e-6 of the scale, a wrong one by far more
    tolerance = 1e-3

    def applies(self, target, precision: str | None = None) -> str | None:
        if target.kind.name != "llvm":
            return "needs an llvm (CPU) target"
        if precision not in (None, "fp32"):
            return f"precision {precision}: the template computes fp32"
        return None


class CpuGemm(CpuFamily):
    name = "cpu_gemm"
    source = "schedules/cpu_gemm.py"

    def match(self, mod, target) -> FusedGemm:
        return match_cpu_gemm(mod)

    def variants(self, problem: FusedGemm, target, *, constants: frozenset[int] = frozenset()):
        from .variants import VariantSearch

        p = problem.problem
        search = VariantSearch(rows=p.batch * p.m, n=p.n, b_layout=p.b_layout, unit=vector_unit(target),
                               b_constant=problem.gemm_inputs[1] in constants,
                               matrix_rows=p.m if p.b_batched else None)
        if not search.pool:
            raise NotAGemm(f"no register block divides a matrix's {p.m} rows x {p.n} columns (a B for each matrix)")
        return search

    def build(self, problem: FusedGemm, params, target, task: str):
        from ...schedules.cpu_gemm import packing, panels, schedule
        from ..extern import ExternKernel

        symbol = f"kb_cpu_gemm_{task}"
        p = problem.problem
        # a B packed at build is padded there to whole panels (GPT-2's 50257 words)
        columns = -(-p.n // params.cols) * params.cols if params.prepacked and p.n % params.cols else None
        func = schedule(problem.reference(symbol, b_columns=columns), params, p.b_layout)
        shapes, packs = problem.kernel_shapes(), ()
        if params.prepacked:
            b = problem.gemm_inputs[1]
            padded = None if columns is None else p.padded_b_shape(columns)
            pack = packing(p.gemm_shapes[1], panels(p.b_layout, params.cols), padded=padded)
            shapes[b] = tuple(int(d) for d in pack.params[1].ty.shape)  # B's panels (a batch's one after another)
            packs = ((b, pack),)
        return ExternKernel(task=task, symbol=symbol, func=func.with_attr("global_symbol", symbol),
                            shapes=tuple(shapes), pipeline="default", packs=packs)

    def describe(self, params) -> str:
        return params.describe()

    def record(self, params) -> dict:
        return {"tile": {"rows": params.rows, "cols": params.cols, "pack_b": params.pack_b,
                         "prepacked": params.prepacked}}

    def from_record(self, row: dict):
        from ...schedules.cpu_gemm import CpuGemmTile

        return CpuGemmTile(**row["tile"])

    def problem_record(self, problem: FusedGemm) -> dict:
        return problem.problem.record()


FAMILY = CpuGemm()
