"""The CPU convolution template (schedules/cpu_conv.py) as a `KernelFamily`: an fp32 NCHW task read
as a fused convolution (fused_conv.py), its variants in the prior's order (variants.py). Where
the model's weights are constants its kernels take them packed, which the build does once."""

from __future__ import annotations

from ..cpu_gemm.family import CpuFamily, vector_unit
from ..family import NotApplicable
from ..fused_conv import FusedConv, match_fused_conv


class CpuConv(CpuFamily):
    name = "cpu_conv"
    source = "schedules/cpu_conv.py"
    shows_refusals_of = "conv2d"

    def match(self, mod, target) -> FusedConv:
        return match_fused_conv(mod)

    def variants(self, problem: FusedConv, target, *, constants: frozenset[int] = frozenset()):
        from .variants import VariantSearch

        search = VariantSearch(pixels=problem.problem.pixels, channels=problem.problem.out_channels,
                               unit=vector_unit(target), prepacked=problem.weight_index in constants)
        if not search.pool:
            raise NotApplicable(f"no register block divides {problem.problem.pixels} pixels x "
                                f"{problem.problem.out_channels} channels")
        return search

    def build(self, problem: FusedConv, params, target, task: str):
        from ...schedules.cpu_conv import schedule, weight_packing
        from ..extern import ExternKernel

        symbol = f"kb_cpu_conv_{task}"
        func = schedule(problem.reference(symbol), params)
        shape = problem.problem.weight_shape
        co, ci, kh, kw = shape
        packed = (co // params.cols, ci, kh, kw, params.cols) if params.prepacked else shape
        packs = ((problem.weight_index, weight_packing(shape, params.cols)),) if params.prepacked else ()
        return ExternKernel(task=task, symbol=symbol, func=func.with_attr("global_symbol", symbol),
                            shapes=tuple(problem.kernel_shapes(packed)), pipeline="default", packs=packs)

    def describe(self, params) -> str:
        return params.describe()

    def record(self, params) -> dict:
        return {"tile": {"rows": params.rows, "cols": params.cols, "prepacked": params.prepacked}}

    def from_record(self, row: dict):
        from ...schedules.cpu_conv import CpuConvTile

        return CpuConvTile(**row["tile"])

    def problem_record(self, problem: FusedConv) -> dict:
        return problem.problem.record()


FAMILY = CpuConv()
