"""Which variants of the CPU convolution template (schedules/cpu_conv.py) to measure, in what
order. Plain Python: the caller measures (kernels/task_search.py).

Register blocks as the GEMM family's prior orders them (`wanted`: 12 accumulators and one
vector a row on AVX-512; on AVX2, 8 and two vectors), among those whose rows divide the output
pixels and whose columns divide the output channels: the template computes no partial block.
On the Zen 4 (AVX-512, 2 cores) 7x32 and 4x32 blocks ran ResNet-18's 3x3 convolutions at 195-218
GFLOP/s; 1x64 at 86.
"""

from __future__ import annotations

from ...schedules.cpu_conv import CpuConvTile
from ...schedules.cpu_gemm import STACK_BYTES
from ..cpu_gemm.variants import MAX_ROWS, VECTORS, VectorUnit, wanted
from ..family import PatientSearch


def variants(pixels: int, channels: int, unit: VectorUnit, prepacked: bool = False) -> list[CpuConvTile]:
    """Every register block that fits the unit and divides `pixels` x `channels`, in the prior's
    order; `prepacked`: taking the weights packed (constant weights), else packing them each call."""
    out = []
    for vectors in VECTORS:
        cols = vectors * unit.lanes
        if channels % cols:
            continue
        for rows in range(1, min(pixels, MAX_ROWS) + 1):
            if pixels % rows or rows * vectors + vectors + 1 > unit.registers or rows * cols * 4 >= STACK_BYTES:
                continue
            out.append(CpuConvTile(rows=rows, cols=cols, prepacked=prepacked))
    return sorted(out, key=lambda t: (prior(t, unit), t.describe()))


def prior(tile: CpuConvTile, unit: VectorUnit) -> float:
    """Lower first: accumulators away from those wanted, then vectors a row."""
    vectors = tile.cols // unit.lanes
    accumulators, wanted_vectors = wanted(unit)
    return abs(tile.rows * vectors - accumulators) + 0.5 * abs(vectors - wanted_vectors)


class VariantSearch(PatientSearch):
    """The search over the variants of one convolution (`pixels` x `channels` outputs)."""

    def __init__(self, *, pixels: int, channels: int, unit: VectorUnit, prepacked: bool = False,
                 patience: int = 4, min_gain: float = 0.02) -> None:
        if pixels < 1 or channels < 1:
            raise ValueError(f"pixels={pixels!r}, channels={channels!r}: at least one output each")
        pool = variants(pixels, channels, unit, prepacked)
        super().__init__(pool, patience=patience, min_gain=min_gain, what=f"{pixels}x{channels}")
