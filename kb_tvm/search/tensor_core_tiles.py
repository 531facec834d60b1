"""Tile decisions for MetaSchedule's WMMA tensor-core sketch that fit the GPU before anything is
built. Plain Python: the search replays a sketch with these decisions (search/candidates.py).

The sketch (MultiLevelTilingTensorCore, "SSSRRSRS") tiles the two spatial loops, counted in
16x16 fragments, in five levels and the reduction loop in three:

    i = i0 i1 i2 i3 i4    j = j0 j1 j2 j3 j4    k = k0 k1 k2
    i0 j0 -> blockIdx, i2 j2 -> threadIdx.y (warps), A and B staged in shared memory

Drawn independently, about 95% of such tiles fail MetaSchedule's VerifyGPUCode postprocessor on
an fp16 4096^3 GEMM (too many warps or too much shared memory). The two limits below were fitted
on 1200 uniform samples of that sketch for sm_90: every sample that
passed VerifyGPUCode satisfies them, and 38 of the 1142 that failed do. The real postprocessors and
lowering stay the final check.
"""

from __future__ import annotations

from dataclasses import dataclass

FRAGMENT = 16  # the WMMA fragment's edge, in elements


@dataclass(frozen=True)
class WmmaLimits:
    max_warps: int  # max threads per block / warp size
    max_shared_bytes: int
    input_bytes: int = 2  # fp16 / bf16 inputs
    max_innermost: int = 4  # the sketch's own bound on each loop's innermost factor
    stages: int = 1  # copies of the A and B tiles in shared memory: 2 when software-pipelined
    # register pressure: the accumulator fragments a warp holds (i3 i4 j3 j4), 8 registers per
    # thread each for fp32; ptxas for sm_90 used 208 registers at 16 and spilled at 32: 255
    # registers and 152 bytes of stack
    max_warp_fragments: int = 16

    def __post_init__(self) -> None:
        for name in ("max_warps", "max_shared_bytes", "input_bytes", "max_innermost", "stages",
                     "max_warp_fragments"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name}={value!r}: must be an integer >= 1")


def warps(i: list[int], j: list[int]) -> int:
    return i[2] * j[2]


def shared_bytes(i: list[int], j: list[int], k: list[int], limits: WmmaLimits) -> int:
    """The A and B tiles a block stages: (i2 i3 i4 + j2 j3 j4) fragments wide, k1 k2 deep,
    `stages` times over."""
    depth = k[1] * k[2] * FRAGMENT
    width = (i[2] * i[3] * i[4] + j[2] * j[3] * j[4]) * FRAGMENT
    return limits.stages * limits.input_bytes * depth * width


def fits(i: list[int], j: list[int], k: list[int], limits: WmmaLimits) -> bool:
    # a pipelined sketch overlaps the loads and math of k1's iterations; at k1 = 1 there is
    # nothing to overlap and TVM's InferFragment fails (all 40 such samples, none of 40 others)
    pipelinable = limits.stages == 1 or k[1] >= 2
    return (pipelinable and warps(i, j) <= limits.max_warps
            and i[3] * i[4] * j[3] * j[4] <= limits.max_warp_fragments
            and shared_bytes(i, j, k, limits) <= limits.max_shared_bytes)


def perfect_tile(rng, extent: int, levels: int, max_innermost: int) -> list[int] | None:
    """A random factorisation of `extent` into `levels` factors with the innermost at most
    `max_innermost` (None if there is none); each level takes a random divisor of what is left."""
    for _ in range(64):
        rest, factors = extent, []
        for _ in range(levels - 1):
            divisors = [d for d in range(1, rest + 1) if rest % d == 0]
            factor = divisors[int(rng.integers(len(divisors)))]
            factors.append(factor)
            rest //= factor
        if rest <= max_innermost:
            return factors + [rest]
    return None


def draw_tiles(rng, extents: tuple[int, int, int], limits: WmmaLimits, tries: int = 10_000) -> list[list[int]] | None:
    """(i, j, k) tiles of the sketch's loop extents (in fragments) that fit `limits`, by rejection
    (microseconds a try); None when `tries` draws found none (the sketch cannot fit this GPU)."""
    m, n, r = extents
    for _ in range(tries):
        i = perfect_tile(rng, m, 5, limits.max_innermost)
        j = perfect_tile(rng, n, 5, limits.max_innermost)
        k = perfect_tile(rng, r, 3, limits.max_innermost)
        if i is not None and j is not None and k is not None and fits(i, j, k, limits):
            return [i, j, k]
    return None


class CategoricalBans:
    """Which choices of a sketch's SampleCategorical decisions (e.g. a cooperative fetch's vector
    length) never pass the postprocessors, learned from the samples as they are drawn. On the
    WMMA sketch of an fp16 GEMM, B's fetch at 8 lanes failed VerifyGPUCode 80 times out of 80
    while the other choices failed ~9%; a quarter of the samples went to it. A choice is banned
    once it failed `after` times without a success, and never the last one left."""

    def __init__(self, after: int = 8) -> None:
        self.after = after
        self.outcomes: dict[tuple[int, int, int], list[int]] = {}  # (space, inst, choice) -> [ok, failed]

    def record(self, space: int, picks: dict[int, int], passed: bool) -> None:
        for inst, choice in picks.items():
            counts = self.outcomes.setdefault((space, inst, choice), [0, 0])
            counts[0 if passed else 1] += 1

    def allowed(self, space: int, inst: int, choices: int) -> list[int]:
        ok = [c for c in range(choices) if (space, inst, c) not in set(self.banned())]
        return ok or list(range(choices))

    def banned(self) -> list[tuple[int, int, int]]:
        return sorted(key for key, (ok, failed) in self.outcomes.items() if ok == 0 and failed >= self.after)
