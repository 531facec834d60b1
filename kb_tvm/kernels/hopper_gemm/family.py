"""The Hopper GEMM template (schedules/hopper_gemm.py, TMA + wgmma on sm_90a) as a `KernelFamily`:
a task read as a fused GEMM over fp16 or bf16 (fused_gemm.py), its variants in order of expected
gain (variants.py)."""

from __future__ import annotations

from ...schedules.hopper_gemm import INPUT_DTYPES, OUTPUT_DTYPES
from ..family import KernelFamily
from ..fused_gemm import FusedGemm, NotAGemm, match_fused_gemm, padded_b

ARCH = "sm_90a"  # wgmma and setmaxnreg need the arch-specific target; MetaSchedule and dlight keep sm_90
PRECISIONS = ("fp16", "bf16")


def on_hopper(target) -> bool:
    """Whether the target is an sm_90 (Hopper) GPU, where the template's kernels run."""
    arch = str(target.attrs.get("arch", "")) if target.kind.name == "cuda" else ""
    return arch.startswith("sm_9")


def on_hopper_in(target, precision: str | None) -> str | None:
    """Why a Hopper family's kernels cannot serve this target and precision, or None: both the
    GEMM template and the attention kernel take fp16 or bf16 on sm_90."""
    if precision is not None and precision not in PRECISIONS:
        return f"precision {precision}: the template computes {' or '.join(PRECISIONS)}"
    if not on_hopper(target):
        return "needs an sm_90 CUDA target"
    return None


def b_columns(problem) -> int | None:
    """The columns B[K, N] is padded to where its rows are not whole 16 bytes (N not a multiple
    of 8: GPT-2's 50257 words), which TMA copies; None where it needs none."""
    if problem.b_layout == "kn" and problem.n % 8:
        return -(-problem.n // 8) * 8
    return None


def match_hopper_gemm(mod) -> FusedGemm:
    """The fused GEMM `mod`'s "main" computes, if the template takes its dtypes, or NotAGemm."""
    return match_fused_gemm(mod, input_dtypes=INPUT_DTYPES, output_dtypes=OUTPUT_DTYPES)


class HopperGemm(KernelFamily):
    name = "hopper_gemm"
    source = "schedules/hopper_gemm.py"
    shows_refusals_of = "matmul"

    def applies(self, target, precision: str | None = None) -> str | None:
        return on_hopper_in(target, precision)

    def match(self, mod, target) -> FusedGemm:
        return match_hopper_gemm(mod)

    def variants(self, problem: FusedGemm, target, *, constants: frozenset[int] = frozenset()):
        from .variants import VariantSearch

        p = problem.problem
        columns = b_columns(p)
        if columns is not None and (p.b_batched or problem.gemm_inputs[1] not in constants):
            raise NotAGemm(f"N={p.n} is not a multiple of 8 and B[K, N] is not one constant to pad once at build "
                           "(TMA copies rows of 16 bytes)")
        try:
            m, batch = p.tiling
            return VariantSearch(m, p.n, p.k, p.dtype, p.b_layout, batch=batch, b_batched=p.b_batched,
                                 b_columns=columns)
        except ValueError as why:  # no tile fits the shape
            raise NotAGemm(str(why)) from None

    def build(self, problem: FusedGemm, params, target, task: str):
        from ..extern import ExternKernel

        symbol = f"kb_hopper_{task}"
        splits = params.k_splits
        if splits > 1:  # the template's partial sums, then the sum with the task's epilogue
            return ExternKernel(task=task, symbol=symbol, func=problem.kernel(params, symbol),
                                shapes=tuple(problem.partial_shapes(splits)), arch=ARCH, takes=problem.gemm_inputs,
                                then=problem.summed(splits, f"{symbol}_then"),
                                then_shapes=tuple(problem.summed_shapes(splits)))
        columns = b_columns(problem.problem)
        if columns is not None:  # B padded once at build (a constant: `variants` asked that)
            return ExternKernel(task=task, symbol=symbol, func=problem.kernel(params, symbol, b_columns=columns),
                                shapes=tuple(problem.kernel_shapes(b_columns=columns)), arch=ARCH,
                                packs=((problem.gemm_inputs[1], padded_b(problem.problem, columns)),))
        return ExternKernel(task=task, symbol=symbol, func=problem.kernel(params, symbol),
                            shapes=tuple(problem.kernel_shapes()), arch=ARCH)

    def describe(self, params) -> str:
        return params.describe()

    def record(self, params) -> dict:
        from .variants import VariantSearch

        return {"tile": VariantSearch.record(params, None)["tile"]}

    def from_record(self, row: dict):
        from ...schedules.hopper_gemm import GemmTile

        return GemmTile(**row["tile"])

    def problem_record(self, problem: FusedGemm) -> dict:
        return problem.problem.record()


FAMILY = HopperGemm()
