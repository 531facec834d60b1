"""Which variants of the CPU GEMM template (schedules/cpu_gemm.py) to measure, in what order, and
when to stop. Plain Python: the caller measures (kernels/task_search.py).

The order is a prior: blocks are asked for by how far their accumulators are from those wanted
(`wanted`) and their vectors of B a K step from those wanted, then by the rows and columns they
would compute past the ends of A and B. The search measures in that order and stops after
`patience` measurements that did not beat the best by `min_gain`. Measured:
- a Zen 4 (AVX-512, 32 registers, 2 cores), over 128x768x768, 128x3072x768, 128x768x3072 and
  512^3: the fastest blocks held about 12 accumulators and one vector a row (12x16 won three of
  four; 4x32 and 6x32 were within 10%; 3x64 ran 15-30% behind);
- a Zen 3 (AVX2, 16 registers), GPT-2's GEMMs: two vectors a row and 8 accumulators (QKV,
  128x2304x768: 4x16 2.85 ms, 8x8 3.44, 3x16 4.29, 6x16 3.17, 12x8 12.3; FFN up: 3x16 5.07,
  6x16 7.35, 12x8 17.0). With one 256-bit vector a row each FMA needs a load of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...schedules.cpu_gemm import STACK_BYTES, CpuGemmTile
from ..family import PatientSearch

# vectors of B a K step (cols = vectors x lanes): a power of two, as LLVM lowers a vector of 3 x 16
# floats badly (4x48 blocks ran 10x slower than 6x32 ones on the Zen 4)
VECTORS = (1, 2, 4)
MAX_ROWS = 16


@dataclass(frozen=True)
class VectorUnit:
    """What a CPU's vector unit holds: fp32 lanes a register and registers (AVX-512: 16 and 32)."""

    lanes: int
    registers: int

    def __post_init__(self) -> None:
        if self.lanes < 1 or self.registers < 4:
            raise ValueError(f"lanes={self.lanes!r}, registers={self.registers!r}: at least 1 and 4")


def variants(rows: int, n: int, b_layout: str, unit: VectorUnit, b_constant: bool = False,
             matrix_rows: int | None = None) -> list[CpuGemmTile]:
    """Every register block that fits the unit (its accumulators, the K step's B vectors and a
    broadcast in the registers; on the stack), for a GEMM of `rows` rows (a batch's rows one
    after the other) and `n` columns, in the prior's order. A B[K, N] whose N the block divides
    may also be read unpacked. A constant B (`b_constant`: a model's weights) is packed once at
    build rather than on each call (padded to whole panels where the block does not divide N).
    With a B for each matrix of the batch (attention's; `matrix_rows`: the rows of one), a block
    divides the matrix's rows and N, so that it reads one B's panel."""
    out = []
    for vectors in VECTORS:
        cols = vectors * unit.lanes
        if matrix_rows is not None and n % cols:
            continue
        for r in range(1, min(rows, MAX_ROWS) + 1):
            if r * vectors + vectors + 1 > unit.registers or r * cols * 4 >= STACK_BYTES:
                continue
            if matrix_rows is not None and matrix_rows % r:
                continue
            packed = CpuGemmTile(rows=r, cols=cols, prepacked=b_constant)
            out.extend([packed, CpuGemmTile(rows=r, cols=cols, pack_b=False)] if b_layout == "kn" and n % cols == 0
                       else [packed])
    return sorted(out, key=lambda t: (prior(t, rows, n, unit), t.describe()))


def wanted(unit: VectorUnit) -> tuple[int, int]:
    """(accumulators, vectors of B a K step) the prior asks for first: 12 accumulators, or half
    the registers where there are fewer than 24 (LLVM needs the rest); one vector a row where a
    vector holds 16 floats (AVX-512), else two (one narrow vector a row is load-bound)."""
    return min(12, unit.registers // 2), 1 if unit.lanes >= 16 else 2


def prior(tile: CpuGemmTile, rows: int, n: int, unit: VectorUnit) -> float:
    """Lower first: accumulators and vectors a row away from those wanted, rows and columns
    computed past A's and B's ends."""
    vectors = tile.cols // unit.lanes
    accumulators, wanted_vectors = wanted(unit)
    past = (-(-rows // tile.rows) * tile.rows - rows) / rows + (-(-n // tile.cols) * tile.cols - n) / n
    return (abs(tile.rows * vectors - accumulators) + 0.5 * abs(vectors - wanted_vectors) + 10 * past
            + (0 if tile.pack_b else 0.25))


class VariantSearch(PatientSearch):
    """The search over the variants of one GEMM (`rows` x `n`, B laid out as `b_layout`)."""

    def __init__(self, *, rows: int, n: int, b_layout: str, unit: VectorUnit, b_constant: bool = False,
                 matrix_rows: int | None = None, patience: int = 4, min_gain: float = 0.02) -> None:
        if b_layout not in ("kn", "nk"):
            raise ValueError(f"b_layout={b_layout!r}: 'kn' or 'nk'")
        if rows < 1 or n < 1:
            raise ValueError(f"rows={rows!r}, n={n!r}: a GEMM of at least one row and column")
        self.rows, self.n, self.b_layout, self.unit = rows, n, b_layout, unit
        super().__init__(variants(rows, n, b_layout, unit, b_constant, matrix_rows), patience=patience,
                         min_gain=min_gain, what=f"{rows}x{n}")
