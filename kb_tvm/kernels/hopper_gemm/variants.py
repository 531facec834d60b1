"""Which variants of the Hopper GEMM template (schedules/hopper_gemm.py) to measure, in what order,
and when to stop. Plain Python: the caller measures (kernels/task_search.py, or harness.py on a GPU).

The order comes from a model of a variant's seconds: waves of blocks over the SMs times one
block's tensor-core work, at an efficiency that grows with the wgmma's N and with a producer
warpgroup, as measured on an H200 (128x256 with a producer was the fastest on 4096^3; 64-wide
tiles on M = 128). Each measurement corrects the model for the
variants of its family (consumers, producer, BN): its measured / predicted ratio. The search
asks for the variant of most expected improvement over the best measured, which weighs each
corrected prediction by how far it may be off: a tile's other pipeline depths little (it is
measured at 4 stages first, and depth moved the H200's times a median 6%), a measured family's
other tiles more, a family not measured yet most. It stops when the budget is spent or when,
after `patience` measurements, nothing left is expected to gain `min_gain` over the best.
A variant that failed (built wrong, computed wrong) is never the best.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields

from ...schedules.hopper_gemm import SMS, GemmTile
from ..family import fastest

SM_SHARED_BYTES = 228 * 1024
SM_REGISTERS = 65536
PEAK_FLOPS = 990e12  # dense fp16/bf16 tensor-core peak of an H200 (SXM)

BM_CHOICES = (64, 128, 256)
BN_CHOICES = (32, 64, 96, 128, 192, 256)
STAGE_CHOICES = (3, 4, 5)
K_SPLIT_CHOICES = (2, 3, 4, 6, 8)
# the pipeline's depth matters little once a tile is measured: over 133 tiles the H200 runs
# measured at two or three depths, the slowest was a median 6% behind the fastest, and 4 stages
# was the fastest for 95 of them. So a tile is measured at 4 stages
# first, and another depth of a measured tile is predicted at its best time less STAGE_GAIN
FIRST_STAGES = 4
STAGE_GAIN = 0.02
# how far a corrected prediction may be off, in log-seconds (one standard deviation): another
# depth of a measured tile; a tile of a family measured before; a tile of a family not measured
SPREAD_DEPTH, SPREAD_FAMILY, SPREAD_NEW = 0.04, 0.15, 0.35
HBM_BYTES_PER_S = 4.0e12  # what a split-K sum reads and writes moves at about this rate
# ping-pong's best tile against the best persistent cooperative one was a median 9% slower over
# six shapes on the H200 (12% faster on 4096x3072x768, 17% slower on the three with K >= 3072)
PINGPONG_EFFICIENCY = 0.92


def variants(m: int, n: int, k: int, dtype: str = "float16", b_layout: str = "nk", batch: int = 1,
             b_batched: bool = False, b_columns: int | None = None) -> list[GemmTile]:
    """Every variant the template admits for an (m, n, k) GEMM (tile order fixed at group_m=8),
    persistent ones (with a producer) for tilings of more than a wave of blocks, split-K ones for
    tilings of less than a wave, with at least two K-tiles a split. Off the shape, tiles that would
    compute whole 64-row or 64-column strips of padding are left out. `batch` GEMMs of the shape
    (gemm's batch, b_batched) count as that many times the tiles. With `b_columns` (B[K, N]
    padded, which the build packs once) no split-K: its kernel takes B as the task has it.
    Ping-pong (two warpgroups taking whole tiles in turns) is offered beside each persistent
    single-warpgroup tile: on the H200 it won 12% on 4096x3072x768 and lost up to 17% elsewhere,
    so it is measured, not assumed.
    setmaxnreg and clusters are left out: on the H200 neither won on any tile or shape tried
    (GemmTile's fields say why)."""
    out = []
    for bm, bn, stages, consumers, producer in itertools.product(BM_CHOICES, BN_CHOICES, STAGE_CHOICES, (1, 2),
                                                                 (True, False)):
        try:
            tile = GemmTile(bm=bm, bn=bn, stages=stages, consumers=consumers, producer=producer,
                            b_layout=b_layout, dtype=dtype)
        except ValueError:  # a rule of the template: too many registers, too much shared memory
            continue
        if tile.fits(m, n, k, batch, b_batched, b_columns) or wasted(tile, m, n):
            continue
        out.append(tile)
        tiles = -(-m // bm) * -(-n // bn) * batch
        if producer and tiles > SMS:  # more than a wave: a block per SM walks the tiles
            out.append(GemmTile(bm=bm, bn=bn, stages=stages, consumers=consumers, producer=True,
                                b_layout=b_layout, dtype=dtype, persistent=True))
            if consumers == 1:  # the same tile a warpgroup, two warpgroups in turns (admitted alike)
                out.append(GemmTile(bm=bm, bn=bn, stages=stages, consumers=2, producer=True,
                                    b_layout=b_layout, dtype=dtype, persistent=True, pingpong=True))
        if tiles < SMS and b_columns is None:
            out.extend(GemmTile(bm=bm, bn=bn, stages=stages, consumers=consumers, producer=producer,
                                b_layout=b_layout, dtype=dtype, k_splits=splits) for splits in K_SPLIT_CHOICES
                       if k % (tile.bk * splits) == 0 and k // (tile.bk * splits) >= 2)
    return out


def wasted(tile: GemmTile, m: int, n: int) -> bool:
    """A tile off the shape that computes whole 64-row wgmmas, or 64 columns, of nothing but zeros."""
    return -(-m // tile.bm) * tile.bm - m >= 64 or -(-n // tile.bn) * tile.bn - n >= 64


def family(tile: GemmTile) -> tuple:
    key = (tile.consumers, tile.producer, tile.bn, tile.k_splits > 1, tile.persistent)
    # a ping-pong warpgroup issues its tile's wgmmas alone, and its rows set how well it keeps the
    # tensor cores busy: 64-row tiles ran up to 40% behind 128-row ones of the same BN on the H200
    return key + ("pingpong", tile.rows_per_consumer) if tile.pingpong else key


def without_stages(tile: GemmTile) -> tuple:
    """The tile with its pipeline depth left out: the variants that differ in depth alone."""
    return tuple(getattr(tile, f.name) for f in fields(tile) if f.name != "stages")


def predicted_seconds(tile: GemmTile, m: int, n: int, k: int, batch: int = 1) -> float:
    """Waves of blocks times a block's work at an efficiency; a ranking, not a promise."""
    per_sm = max(1, min(SM_SHARED_BYTES // tile.shared_bytes, SM_REGISTERS // (tile.threads * 168)))
    splits = tile.k_splits
    blocks = -(-m // tile.bm) * -(-n // tile.bn) * splits * batch
    waves = math.ceil(blocks / (SMS * per_sm))
    # wgmma's issue rate grows with N; a producer takes the loads off the consumers' path
    efficiency = 0.75 * (tile.bn / 256) ** 0.25 * (1.0 if tile.producer else 0.9) * min(1.0, per_sm * tile.consumers / 2)
    block_flops = 2.0 * tile.bm * tile.bn * k / splits
    if tile.persistent:  # one block an SM: the next tile's loads overlap this one's epilogue (a prior, ~5%)
        waves, per_sm, efficiency = math.ceil(blocks / SMS), 1, efficiency / 0.95
    if tile.pingpong:
        efficiency *= PINGPONG_EFFICIENCY
    seconds = waves * per_sm * block_flops / (PEAK_FLOPS / SMS) / efficiency + 2e-6  # + a launch
    if splits > 1:  # the partial sums written, read back and summed by a second launch
        seconds += 2e-6 + 2 * splits * batch * m * n * 4 / HBM_BYTES_PER_S
    return seconds


@dataclass
class VariantSearch:
    """Ask/tell over the variants of one GEMM shape (`batch` of them where batch > 1, a B each
    where `b_batched`). `tell` takes what was measured (seconds, or None for a variant that
    failed); `replay(records)` rebuilds the state from earlier records."""

    m: int
    n: int
    k: int
    dtype: str = "float16"
    b_layout: str = "nk"
    batch: int = 1
    b_batched: bool = False
    b_columns: int | None = None  # B[K, N] padded to this many columns (GemmTile.fits)
    patience: int = 6
    min_gain: float = 0.01
    measured: dict[GemmTile, float | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"patience={self.patience!r}: at least 1 measurement")
        if not 0 <= self.min_gain < 1:
            raise ValueError(f"min_gain={self.min_gain!r}: a fraction in [0, 1)")
        self.pool = variants(self.m, self.n, self.k, self.dtype, self.b_layout, self.batch, self.b_batched,
                             self.b_columns)
        if not self.pool:
            why = "; ".join(GemmTile(b_layout=self.b_layout, dtype=self.dtype).fits(
                self.m, self.n, self.k, self.batch, self.b_batched, self.b_columns)) or "no tile fits"
            raise ValueError(f"no Hopper GEMM variant fits {self.m}x{self.n}x{self.k}: {why}")

    def corrected(self, tile: GemmTile) -> float:
        """Another depth of a tile measured right: its best time less STAGE_GAIN. Otherwise the
        model's seconds for `tile` times its family's measured / predicted ratio (the median of
        them), or the ratio over all measurements for a family not measured yet."""
        depths = [seconds for t, seconds in self.measured.items()
                  if seconds is not None and without_stages(t) == without_stages(tile)]
        if depths:
            return min(depths) * (1 - STAGE_GAIN)

        def ratios(match):
            return sorted(seconds / self.predicted(t)
                          for t, seconds in self.measured.items() if seconds is not None and match(t))
        ratio = ratios(lambda t: family(t) == family(tile)) or ratios(lambda t: True) or [1.0]
        return self.predicted(tile) * ratio[len(ratio) // 2]

    def predicted(self, tile: GemmTile) -> float:
        return predicted_seconds(tile, self.m, self.n, self.k, self.batch)

    @property
    def best(self) -> tuple[GemmTile, float] | None:
        return fastest(self.measured)

    def ask(self) -> GemmTile | None:
        """The next variant to measure, or None when the search is done."""
        left = [t for t in self.pool if t not in self.measured]
        if not left:
            return None
        best = self.best
        if best is None:  # nothing measured right yet: the fastest predicted
            return min(self._askable(left), key=lambda t: (self.corrected(t), t.describe()))
        gain, _, tile = max((self.expected_gain(t, best[1]), t.describe(), t) for t in self._askable(left))
        if len(self.measured) >= self.patience and gain < self.min_gain:
            return None  # nothing left is expected to beat the best by `min_gain`
        return tile

    def spread(self, tile: GemmTile) -> float:
        """How far `tile`'s corrected prediction may be off (log-seconds)."""
        measured = [t for t, seconds in self.measured.items() if seconds is not None]
        if any(without_stages(t) == without_stages(tile) for t in measured):
            return SPREAD_DEPTH
        return SPREAD_FAMILY if any(family(t) == family(tile) for t in measured) else SPREAD_NEW

    def expected_gain(self, tile: GemmTile, best_seconds: float) -> float:
        """Expected improvement over the best, relative (log-seconds), of measuring `tile`: a
        measurement costs about the same seconds whatever the variant (its build), so this is
        also the order by expected gain per second."""
        sigma = self.spread(tile)
        z = (math.log(best_seconds) - math.log(self.corrected(tile))) / sigma
        return sigma * (z * 0.5 * (1 + math.erf(z / math.sqrt(2))) + math.exp(-z * z / 2) / math.sqrt(2 * math.pi))

    def _askable(self, left: list[GemmTile]) -> list[GemmTile]:
        """Of a tile not measured at any depth, only its first depth (FIRST_STAGES where admitted,
        else the nearest); every depth of a tile measured before."""
        tried = {without_stages(t) for t in self.measured}
        first: dict[tuple, GemmTile] = {}
        for tile in left:
            key = without_stages(tile)
            if key not in tried and (key not in first or abs(tile.stages - FIRST_STAGES) <
                                     abs(first[key].stages - FIRST_STAGES)):
                first[key] = tile
        return [t for t in left if without_stages(t) in tried] + list(first.values())

    def tell(self, tile: GemmTile, seconds: float | None) -> None:
        if tile not in self.pool:
            raise ValueError(f"GemmTile({tile.describe()}) is not a variant of {self.m}x{self.n}x{self.k}")
        self.measured[tile] = seconds

    def replay(self, records: list[dict]) -> None:
        """Earlier measurements, as `record()` wrote them, so that a search resumes."""
        for row in records:
            self.tell(GemmTile(**row["tile"]), row["seconds"])

    @staticmethod
    def record(tile: GemmTile, seconds: float | None) -> dict:
        """A measurement as data that rebuilds the variant: GemmTile(**record["tile"])."""
        return {"tile": {f.name: getattr(tile, f.name) for f in fields(tile)}, "seconds": seconds}
