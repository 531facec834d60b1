"""A Hopper-native GEMM template (sm_90a): TMA loads into a ring of shared-memory stages, warpgroup
MMA (`wgmma.mma_async`) out of them, fp32 accumulation in registers.

    C[M, N] = A[M, K] @ B[N, K]^T        (b_layout="nk": both K-major, as a Linear layer's weight is)
    C[M, N] = A[M, K] @ B[K, N]          (b_layout="kn": as MetaSchedule's and Relax's matmul)

Written in TVM's TIRx script and compiled with `tir_pipeline="tirx"` for `sm_90a` (MetaSchedule
and dlight keep `sm_90`: dlight reads "sm_90a" as no tensor cores). The parameters are what a
performance engineer would tune on CUTLASS: the block tile BM x BN (BK is one 128-byte swizzle
row), the pipeline depth, the consumer warpgroups that split BM and the tile order (group_m block
rows at a time, for L2), split-K (k_splits) and persistent blocks (`persistent`: one block per SM
walks the output tiles in turn). `GemmTile(...)` refuses a set that cannot build or run and says why.
The epilogue is a parameter: what is stored from each fp32 accumulator (a cast by default; a
task's bias, residual and GELU when kb_tvm/kernels/fused_gemm.py reads them off its TIR). A batch
of GEMMs (`gemm(batch=)`: attention's heads) is one launch over all of their tiles. With two
consumers, `setmaxnreg` moves registers from the producer to them (CUTLASS's 40 / 232), and
`pingpong` has them take whole tiles in turns (CUTLASS's ping-pong kernel, beside the cooperative
one where they split BM). In a cluster of two blocks (`cluster_m=2`: neighbouring block rows, one
block column), each block loads half of B's tile and TMA multicasts it into both. Not yet: a
staged (TMA-store) epilogue.
kb_tvm/kernels/hopper_gemm/ makes it a kernel family: its variants.py searches the variants
(`python -m kb_tvm.kernels.hopper_gemm.harness --search`); `kb-tvm tune --precision fp16|bf16` on
an sm_90 GPU uses them for the model's matmul tasks (kb_tvm/kernels/model_stage.py), and `kb-tvm
tune-op` as a region of the task beside MetaSchedule's (kb_tvm/tuning.py's template_region).

How a block runs: a producer warpgroup (one thread of it) loads K-tiles into a ring of `stages`
shared-memory stages with TMA; a stage's `full` mbarrier completes when its bytes have landed. Each
consumer warpgroup waits for the stage it needs, issues its wgmmas (BK / 16 per 64-row sub-tile,
descriptors into the 128-byte-swizzled tiles), waits for them and arrives on the stage's `empty`
mbarrier, which the producer waits on before it loads that stage again. Without a producer
(`producer=False`) thread 0 loads `stages - 1` tiles ahead and the block syncs after every K-tile.
A persistent block's ring runs on from one output tile to the next, so the producer loads the next
tile's first K-tiles while the consumers store the last one. In a cluster, a stage's `empty`
mbarrier waits for the consumer warps of both blocks (one lane of each arrives on its own block's
and on its peer's), since either producer's multicast writes into both blocks' stage; the blocks
sync as a cluster after the barriers are set up and before they leave. In ping-pong, a stage is
released by the one warpgroup whose tile it holds, and a warpgroup starts a tile's wgmmas when the
other's for the tile before are done (two more mbarriers, the turns), so that its epilogue runs
under the other's wgmmas.
The epilogue stores the accumulator fragments straight to global memory, each through `epilogue`,
a thread's two neighbouring outputs in one store (`paired_stores`).
"""

from __future__ import annotations

from dataclasses import dataclass

WARPGROUP_THREADS = 128
WGMMA_M = 64  # one wgmma covers 64 rows
WGMMA_K = 16  # and 16 of K for 2-byte inputs
SWIZZLE_BYTES = 128  # the TMA/wgmma 128-byte swizzle: one row of BK inputs
MAX_SHARED_BYTES = 227 * 1024  # an sm_90 block's dynamic shared memory (opt-in)
MAX_ACCUMULATORS = 128  # fp32 accumulator registers a thread holds (of its 255)
SM_REGISTERS = 65536
PRODUCER_REGISTERS = 40  # what a producer thread keeps under setmaxnreg (it only issues TMA loads)
SMS = 132  # an H100 or H200 SXM
INPUT_DTYPES = {"float16": "f16", "bfloat16": "bf16"}
OUTPUT_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True, kw_only=True)
class GemmTile:
    """One variant of the template. Keyword-only; every rule broken is named."""

    bm: int = 128
    bn: int = 128
    stages: int = 4
    consumers: int = 1  # warpgroups that split BM
    group_m: int = 8  # block tiles down M that run next to each other (they share B's tiles in L2)
    # a warpgroup of its own issues the loads; a stage is released by its consumers' arrivals on an
    # mbarrier, not by a block-wide sync after every K-tile
    producer: bool = True  # 4096^3 fp16 on the H200: 0.235 ms with, 0.260 without
    # B as [N, K] ("nk", K-major: a Linear layer's weight) or [K, N] ("kn": MetaSchedule's and
    # Relax's matmul), read by wgmma transposed from 64-column swizzle chunks
    b_layout: str = "nk"
    dtype: str = "float16"
    # blocks that split K and write fp32 partial sums P[split, M, N], summed (and the task's
    # epilogue applied) by a second kernel: small-M, long-K GEMMs (BERT's FFN down, 128x768x3072:
    # 24 tiles of 64x64 for 132 SMs) otherwise leave most of the GPU idle
    k_splits: int = 1
    # each thread's two neighbouring outputs stored at once (half2, bfloat162, float2) rather than
    # one element at a time
    paired_stores: bool = True
    # one block per SM (times what fits) walks tile after tile: the producer loads the next
    # tile's K-tiles while the consumers store the last one, so the epilogue and the pipeline's
    # fill no longer leave the tensor cores idle once per tile (needs the producer warpgroup)
    persistent: bool = False
    # the producer warpgroup, which needs few registers, gives them up (setmaxnreg.dec to
    # PRODUCER_REGISTERS) and the two consumers take them (setmaxnreg.inc): 232 a thread rather
    # than the 168 that 384 threads get at launch, room beside 128 accumulators. The kernel is
    # bounded to one block per SM: without that bound ptxas may ignore setmaxnreg (C7508). On the
    # H200 it computed right and gained under 2%: without it,
    # ptxas fits 128x256 in 154 registers a thread with no spills, so the search leaves it off
    setmaxnreg: bool = False
    # two blocks of neighbouring block rows (a cluster of 2) share B's tile: each loads half of it
    # and TMA multicasts that half to both, so B is read from L2 half as often. On the H200 it
    # computed right and never won (0.3% faster to 16% slower on four shapes):
    # group_m's order already keeps B in L2, and a stage waits for the slower of two blocks. The
    # variant search leaves it off
    cluster_m: int = 1
    # the two consumer warpgroups take turns (CUTLASS's ping-pong): each computes whole BM x BN
    # tiles, a persistent block's even and odd ones, and the wgmmas of one tile start when the
    # other warpgroup's are done, so one warpgroup's epilogue runs while the other's wgmmas keep
    # the tensor cores busy (the cooperative kernel stops them for every tile's stores). On the H200
    # all 48 kernels tried computed right and none hung; it won 12% on 4096x3072x768, tied on two
    # other shapes with K = 768 and lost 17% on the three shapes with K >= 3072,
    # so the variant search offers it beside the cooperative tiles and measures which wins
    pingpong: bool = False

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"GemmTile({self.describe()}): " + "; ".join(problems))

    @property
    def bk(self) -> int:
        return SWIZZLE_BYTES // 2

    @property
    def threads(self) -> int:
        return WARPGROUP_THREADS * (self.consumers + int(self.producer))

    @property
    def rows_per_consumer(self) -> int:
        return self.bm if self.pingpong else self.bm // self.consumers

    @property
    def stage_bytes(self) -> int:
        """One stage's A and B tiles, what its `full` mbarrier waits for."""
        return (self.bm + self.bn) * self.bk * 2

    @property
    def shared_bytes(self) -> int:
        # tiles and two mbarriers a stage; with ping-pong, the warpgroups' two turn mbarriers
        return self.stages * (self.stage_bytes + 16) + (16 if self.pingpong else 0)

    @property
    def accumulators(self) -> int:
        """fp32 registers per thread: (rows_per_consumer / 64) sub-tiles of BN / 2 each."""
        return self.rows_per_consumer // WGMMA_M * self.bn // 2

    @property
    def consumer_registers(self) -> int:
        """A consumer thread's registers under setmaxnreg: the block's launch share (a multiple of
        8) less what the producer keeps, over the consumers (384 threads: 168 -> 40 and 232)."""
        at_launch = SM_REGISTERS // self.threads // 8 * 8
        return (at_launch * self.threads - PRODUCER_REGISTERS * WARPGROUP_THREADS) // (
            WARPGROUP_THREADS * self.consumers) // 8 * 8

    def describe(self) -> str:
        return (f"bm={self.bm}, bn={self.bn}, stages={self.stages}, consumers={self.consumers}, "
                f"group_m={self.group_m}, producer={self.producer}, b_layout={self.b_layout}, dtype={self.dtype}"
                + (f", k_splits={self.k_splits}" if self.k_splits != 1 else "")
                + (", persistent=True" if self.persistent else "")
                + (", setmaxnreg=True" if self.setmaxnreg else "")
                + (f", cluster_m={self.cluster_m}" if self.cluster_m != 1 else "")
                + (", pingpong=True" if self.pingpong else "")
                + ("" if self.paired_stores else ", paired_stores=False"))

    def problems(self) -> list[str]:
        out = []
        if self.dtype not in INPUT_DTYPES:
            out.append(f"dtype {self.dtype!r} is not one of {', '.join(INPUT_DTYPES)}")
        if self.consumers not in (1, 2):
            out.append(f"consumers={self.consumers}: 1 or 2 warpgroups")
        elif self.pingpong is True and self.bm % WGMMA_M:
            out.append(f"bm={self.bm}: with pingpong, each warpgroup takes whole tiles of a multiple of 64 rows")
        elif self.pingpong is not True and self.bm % (WGMMA_M * self.consumers):
            out.append(f"bm={self.bm}: each of the {self.consumers} warpgroups takes a multiple of 64 rows")
        if not (8 <= self.bn <= 256 and self.bn % 8 == 0):
            out.append(f"bn={self.bn}: wgmma's N is a multiple of 8 up to 256")
        if not 2 <= self.stages <= 5:
            out.append(f"stages={self.stages}: 2 to 5")
        if not 1 <= self.group_m <= 16:
            out.append(f"group_m={self.group_m}: 1 to 16")
        if not (isinstance(self.k_splits, int) and 1 <= self.k_splits <= 8):
            out.append(f"k_splits={self.k_splits!r}: 1 to 8")
        if not isinstance(self.producer, bool):
            out.append(f"producer={self.producer!r}: True or False")
        if not isinstance(self.paired_stores, bool):
            out.append(f"paired_stores={self.paired_stores!r}: True or False")
        if not isinstance(self.persistent, bool):
            out.append(f"persistent={self.persistent!r}: True or False")
        elif self.persistent and not self.producer:
            out.append("persistent=True needs producer=True: the producer runs ahead into the next tile")
        if not isinstance(self.setmaxnreg, bool):
            out.append(f"setmaxnreg={self.setmaxnreg!r}: True or False")
        elif self.setmaxnreg and not (self.producer and self.consumers == 2):
            out.append("setmaxnreg=True needs producer=True and consumers=2: it moves the producer's registers to "
                       "two consumers (with one, a thread already has 255)")
        if self.cluster_m not in (1, 2):
            out.append(f"cluster_m={self.cluster_m!r}: 1 or 2 blocks")
        elif self.cluster_m == 2:
            if not self.producer or self.k_splits != 1:
                out.append("cluster_m=2 needs producer=True and k_splits=1: the producers of the two blocks "
                           "multicast B's halves into a ring that both blocks' consumers release")
            half_b = 64 if self.b_layout == "kn" else 8  # B's halves: whole swizzle chunks, or 8-row atoms
            if self.bn % (2 * half_b):
                out.append(f"bn={self.bn} with cluster_m=2: B's tile is split in halves of multiples of {half_b} "
                           f"{'columns' if self.b_layout == 'kn' else 'rows'}")
        if not isinstance(self.pingpong, bool):
            out.append(f"pingpong={self.pingpong!r}: True or False")
        elif self.pingpong and not (self.persistent is True and self.consumers == 2 and self.cluster_m == 1):
            out.append("pingpong=True needs persistent=True, consumers=2 and cluster_m=1: two warpgroups of one "
                       "block take its tiles in turns")
        if self.b_layout not in ("nk", "kn"):
            out.append(f"b_layout={self.b_layout!r}: 'nk' (B[N, K]) or 'kn' (B[K, N])")
        elif self.b_layout == "kn" and self.bn % 64:
            out.append(f"bn={self.bn} with b_layout='kn': B's tile is read in 64-column swizzle chunks")
        if not out:
            if self.accumulators > MAX_ACCUMULATORS:
                out.append(f"{self.accumulators} fp32 accumulators a thread (at most {MAX_ACCUMULATORS}): "
                           "a smaller bn or bm, or a second warpgroup")
            if self.shared_bytes > MAX_SHARED_BYTES:
                out.append(f"{self.shared_bytes} bytes of shared memory (at most {MAX_SHARED_BYTES}): fewer stages")
        return out

    def fits(self, m: int, n: int, k: int, batch: int = 1, b_batched: bool = False,
             b_columns: int | None = None) -> list[str]:
        """Why this tile cannot compute an (m, n, k) GEMM (`batch` of them, with a B each where
        `b_batched`); empty when it can. Shapes off the tile are computed whole: TMA fills what
        lies past M, N or K with zeros, the stores are guarded. Rows of 16 bytes are TMA's rule:
        K a multiple of 8, and B[K, N]'s rows too, N or the `b_columns` B is padded to (one B
        for all, zeros past N: GPT-2's 50257 words); a split-K variant's splits take whole
        K-tiles, the same number each."""
        out = [] if k % 8 == 0 else [f"K={k} is not a multiple of 8 (TMA copies rows of 16 bytes)"]
        if b_columns is not None:
            if self.b_layout != "kn" or b_batched or not (isinstance(b_columns, int) and b_columns >= n):
                out.append(f"b_columns={b_columns!r}: B[K, N]'s padded rows, at least N={n}, with one B for all")
            elif b_columns % 8:
                out.append(f"b_columns={b_columns} is not a multiple of 8 (TMA copies rows of 16 bytes)")
        elif self.b_layout == "kn" and n % 8:
            out.append(f"N={n} is not a multiple of 8 (TMA copies B[K, N]'s rows of 16 bytes): B padded with zero "
                       "columns to a multiple of 8 (b_columns) is")
        if batch > 1 and b_batched and self.b_layout == "kn" and k % self.bk:
            out.append(f"K={k} is not a multiple of {self.bk}: a batch's last K-tile of B[K, N] would run into "
                       "the next batch's")
        if self.k_splits > 1 and k % (self.bk * self.k_splits):
            out.append(f"K={k} is not a multiple of {self.bk * self.k_splits} ({self.k_splits} splits of whole "
                       f"{self.bk}-wide K-tiles)")
        return out


def gemm(m: int, n: int, k: int, tile: GemmTile, out_dtype: str = "float32", *, epilogue=None, sms: int = SMS,
         batch: int = 1, b_batched: bool = False, b_columns: int | None = None):
    """The PrimFunc main(A[m, k], B[n, k] or B[k, n], C[m, n]) for one variant. epilogue(acc, row,
    col): the value stored at C[row, col] from its fp32 accumulator (default: acc cast to
    out_dtype); it may read buffers that are not parameters of main, which the caller then adds
    (kb_tvm/kernels/fused_gemm.py's FusedGemm.kernel does, for a task's bias or residual).
    `sms`: the GPU's SMs, the blocks a persistent variant launches per block an SM holds.
    `batch` > 1: `batch` GEMMs with their matrices one after the other, A[batch * m, k] and
    C[batch * m, n] (the epilogue's row counts across them), and B as [batch * n, k] or
    [batch * k, n] where `b_batched`, else one B for all. A tile's rows or columns past its
    GEMM's M or N read the next one's, and are not stored. `b_columns`: B[K, N] is given padded to
    that many columns (zeros past N), where N's rows are not 16 bytes (GemmTile.fits)."""
    from tvm.backend.cuda.tile_primitive.tma_utils import SwizzleMode, mma_shared_layout
    from tvm.script import tirx as T
    from tvm.tirx.script import tile as Tx

    if not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"batch={batch!r}: an integer >= 1")
    misfit = tile.fits(m, n, k, batch, b_batched, b_columns)
    if misfit:
        raise ValueError(f"GemmTile({tile.describe()}) cannot compute {m}x{n}x{k}"
                         + (f" (batch {batch})" if batch > 1 else "") + ": " + "; ".join(misfit))
    if out_dtype not in OUTPUT_DTYPES:
        raise ValueError(f"out_dtype {out_dtype!r} is not one of {', '.join(OUTPUT_DTYPES)}")
    splits = tile.k_splits
    if splits > 1 and (out_dtype != "float32" or epilogue is not None):
        raise ValueError(f"k_splits={splits} writes fp32 partial sums: out_dtype float32 and no epilogue (the "
                         "epilogue runs where the partials are summed)")
    dtype, bm, bn, bk, stages = tile.dtype, tile.bm, tile.bn, tile.bk, tile.stages
    group_m = tile.group_m
    grid_m, grid_n, k_tiles = -(-m // bm), -(-n // bn), -(-k // bk) // splits  # k_tiles: of one split
    cluster = tile.cluster_m
    cluster_rows = -(-grid_m // cluster)  # a tile of a cluster: `cluster` block rows, one block column
    # the last tiles' stores are guarded; with N odd, a pair's second element too
    ragged = bool(m % (bm * cluster) or n % bn)
    # a pair's one store is 4- or 8-byte aligned where N is even (its column is)
    paired = tile.paired_stores and n % 2 == 0
    tiles = cluster_rows * grid_n * batch * splits
    clusters = min(tiles, sms // cluster) if tile.persistent else tiles
    ctas = clusters * cluster
    b_half = bn // 2  # with a cluster, the rows (B[N, K]) or columns (B[K, N]) of B's tile a block loads
    multicast = (1 << cluster) - 1 if cluster > 1 else 0  # TMA's mask of the blocks B's half lands in
    rows = tile.rows_per_consumer
    subtiles = rows // WGMMA_M
    half = bn // 2  # accumulators per sub-tile and thread
    mma = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{INPUT_DTYPES[dtype]}.{INPUT_DTYPES[dtype]}"
    swizzle = SwizzleMode.SWIZZLE_128B_ATOM
    a_layout = mma_shared_layout(dtype, swizzle, (bm, bk)).tile_to((stages, bm, bk), (1, bm, bk))
    b_kn = tile.b_layout == "kn"
    b_tile = (bk, bn) if b_kn else (bn, bk)
    b_layout = mma_shared_layout(dtype, swizzle, b_tile).tile_to((stages, *b_tile), (1, *b_tile))
    # wgmma descriptors, in 16-byte units: K-major tiles step 1024 bytes per 8 rows (the leading
    # offset unused); B [K, N] steps b_lbo between 64-column chunks (bk rows of 128 bytes each)
    # and 1024 bytes per 8 rows of K
    b_lbo, b_sbo = (bk * SWIZZLE_BYTES // 16, 64) if b_kn else (1, 64)
    trans_b = 1 if b_kn else 0
    stage_bytes = tile.stage_bytes
    prefetch = min(stages - 1, k_tiles)
    c_shape = (splits, batch * m, n) if splits > 1 else (batch * m, n)
    b_rows = (batch if b_batched else 1) * (k if b_kn else n)
    b_shape = (b_rows, b_columns or n) if b_kn else (b_rows, k)
    producer = tile.producer
    consumer_threads = WARPGROUP_THREADS * tile.consumers
    consumer_registers = tile.consumer_registers
    pingpong = tile.pingpong
    # who releases a stage: every consumer thread; in ping-pong, the one warpgroup whose tile it
    # holds; in a cluster, one lane a consumer warp (after its wgmmas finished), on its own
    # block's barrier and on its peer's
    releases = WARPGROUP_THREADS if pingpong else consumer_threads if cluster == 1 else consumer_threads // 32 * cluster

    stored = "float32" if splits > 1 else out_dtype
    pair_name, pair_source = _PAIR_STORES[stored]
    if epilogue is None:
        def epilogue(acc, row, col):
            return T.Cast(out_dtype, acc)

    def first_row_of(wg):
        """Where a consumer warpgroup's rows start in the block's tile (with ping-pong it has all of them)."""
        return 0 if pingpong else wg * rows

    def accumulators(acc, sub):
        return [acc[sub * half + i] for i in range(half)]

    def where(t):
        return tile_position(t, grid_m=cluster_rows, grid_n=grid_n, batch=batch, group_m=group_m, minimum=T.min)

    def split_of(t):
        return where(t)[0]

    def batch_of(t):
        return where(t)[1]

    def block_m_of(t, rank):
        """The block row of the cluster's tile t that its block `rank` computes."""
        return where(t)[2] * cluster + rank if cluster > 1 else where(t)[2]

    def block_n_of(t):
        return where(t)[3]

    def a_row_of(t, rank):
        """The first row of A (of all the batch's) that block `rank` of tile t reads."""
        return batch_of(t) * m + block_m_of(t, rank) * bm

    def b_row_of(t):
        """B[N, K]: the first row tile t reads; B[K, N]: where its batch's K starts."""
        first = batch_of(t) * (k if b_kn else n) if b_batched else 0
        return first if b_kn else first + block_n_of(t) * bn

    def rank_of(cta):
        """A block's place in its cluster."""
        return cta % cluster if cluster > 1 else 0

    def home_of(cta):
        """A block's cluster (the block itself, without clusters)."""
        return cta // cluster if cluster > 1 else cta

    def tiles_of(home):
        """How many tiles cluster `home` (a block, without clusters) computes: home, home +
        clusters, ... while below `tiles`."""
        return tiles_of_block(home, tiles=tiles, ctas=clusters) if tile.persistent else 1

    # fmt: off
    @T.macro
    def load(A, B, A_s, B_s, full, a_row, b_row, block_n, kt, into, rank):
        """Thread issuing: K-tile kt's (of all of K) A and B tiles into stage `into`, completing
        full[into]; a_row, b_row: a_row_of and b_row_of the tile. In a cluster, block `rank`
        loads its half of B's tile into both blocks' stage (the peer's lands on its full[into])."""
        Tx.copy_async(A_s[into, :, :], A[a_row:a_row + bm, kt * bk:(kt + 1) * bk],
                      dispatch="tma_auto", mbar=full.ptr_to([into]))
        # B's tile, or in a cluster this block's half of it, [lo, hi) of its rows (nk) or columns (kn)
        lo = T.meta_var(rank * b_half if cluster > 1 else 0)
        hi = T.meta_var(lo + b_half if cluster > 1 else bn)
        if b_kn:
            Tx.copy_async(B_s[into, :, lo:hi],
                          B[b_row + kt * bk:b_row + (kt + 1) * bk, block_n * bn + lo:block_n * bn + hi],
                          dispatch="tma_auto", mbar=full.ptr_to([into]), cta_mask=multicast)
        else:
            Tx.copy_async(B_s[into, lo:hi, :], B[b_row + lo:b_row + hi, kt * bk:(kt + 1) * bk],
                          dispatch="tma_auto", mbar=full.ptr_to([into]), cta_mask=multicast)
        T.ptx.mbarrier.arrive.expect_tx.shared.b64(full.ptr_to([into]), T.uint32(stage_bytes))

    @T.macro
    def multiply(A_s, B_s, full, acc, desc_a, desc_b, wg, kt):
        """A consumer warpgroup: wait for the ring's kt-th K-tile, then all of its wgmmas, finished."""
        stage: T.let = kt % stages
        T.cuda.mbarrier_wait(full.ptr_to([stage]), (kt // stages) % 2)
        T.ptx.wgmma.fence.sync.aligned()
        for sub in T.unroll(subtiles):
            for kk in T.unroll(bk // WGMMA_K):
                T.cuda.wgmma.encode_matrix_descriptor(
                    T.address_of(desc_a[0]), A_s.ptr_to([stage, first_row_of(wg) + sub * 64, kk * 16]), 1, 64, 3)
                if b_kn:
                    T.cuda.wgmma.encode_matrix_descriptor(
                        T.address_of(desc_b[0]), B_s.ptr_to([stage, kk * 16, 0]), b_lbo, b_sbo, 3)
                else:
                    T.cuda.wgmma.encode_matrix_descriptor(
                        T.address_of(desc_b[0]), B_s.ptr_to([stage, 0, kk * 16]), b_lbo, b_sbo, 3)
                T.ptx[mma](*accumulators(acc, sub), desc_a[0], desc_b[0], True, 1, 1, 0, trans_b)
        T.ptx.wgmma.commit_group.sync.aligned()
        # all of this K-tile's wgmmas finish here. Leaving one group in flight (wait_group 1)
        # computed wrong results on the H200: ptxas 13.0 reads the accumulators between issue and
        # wait (C7514), and TIRx's register fence (wgmma.noop_barrier) fences a copy of the
        # register
        T.ptx.wgmma.wait_group.sync.aligned(0)

    @T.macro
    def put(C, split, row, col, a0, a1):
        """C[row, col] and C[row, col + 1] (a split's partial sums: C[split, row, ..]) from two
        accumulators, with one 4- or 8-byte store where `paired_stores`."""
        if splits > 1:
            if paired:
                T.cuda.func_call(pair_name, T.address_of(C[split, row, col]), a0, a1, source_code=pair_source)
            else:
                C[split, row, col] = a0
                if n % 2 == 0 or col + 1 < n:  # with N odd, the last column's pair runs past N
                    C[split, row, col + 1] = a1
        elif paired:
            T.cuda.func_call(pair_name, T.address_of(C[row, col]), epilogue(a0, row, col),
                             epilogue(a1, row, col + 1), source_code=pair_source)
        else:
            C[row, col] = epilogue(a0, row, col)
            if n % 2 == 0 or col + 1 < n:
                C[row, col + 1] = epilogue(a1, row, col + 1)

    @T.macro
    def store(C, acc, block_m, block_n, wg, lane, split, first_row):
        """A consumer warpgroup's accumulator fragments to C (wgmma's m64nN layout: a thread holds
        pairs of neighbours in rows r and r + 8), or to its split's partial sums P = C[split];
        first_row: where its batch's rows start in C."""
        warp: T.let = lane // 32
        for sub in T.unroll(subtiles):
            for i in T.unroll(half // 4):
                row: T.let = block_m * bm + first_row_of(wg) + sub * 64 + warp * 16 + lane % 32 // 4  # in its batch
                col: T.let = block_n * bn + i * 8 + lane % 4 * 2
                if ragged:
                    if col < n:
                        if row < m:
                            put(C, split, first_row + row, col, acc[sub * half + i * 4], acc[sub * half + i * 4 + 1])
                        if row + 8 < m:
                            put(C, split, first_row + row + 8, col, acc[sub * half + i * 4 + 2],
                                acc[sub * half + i * 4 + 3])
                else:
                    put(C, split, first_row + row, col, acc[sub * half + i * 4], acc[sub * half + i * 4 + 1])
                    put(C, split, first_row + row + 8, col, acc[sub * half + i * 4 + 2], acc[sub * half + i * 4 + 3])

    @T.prim_func(check_well_formed=False)  # an epilogue's buffers are main's parameters once the caller adds them
    def main(a_ptr: T.handle, b_ptr: T.handle, c_ptr: T.handle) -> None:
        A = T.match_buffer(a_ptr, (batch * m, k), dtype)
        B = T.match_buffer(b_ptr, b_shape, dtype)
        C = T.match_buffer(c_ptr, c_shape, out_dtype)
        T.device_entry()
        if tile.setmaxnreg:
            T.attr({"tirx.launch_bounds_min_blocks_per_sm": 1})
        cta = T.cta_id([ctas])
        if cluster > 1:
            T.cta_id_in_cluster([cluster])
        rank = T.meta_var(rank_of(cta))  # this block's place in its cluster
        home = T.meta_var(home_of(cta))  # its cluster (the block itself without clusters)
        tid = T.thread_id([tile.threads])
        wg: T.let = tid // 128
        lane: T.let = tid % 128

        A_s = T.alloc_buffer((stages, bm, bk), dtype, scope="shared", layout=a_layout, align=1024)
        B_s = T.alloc_buffer((stages, *b_tile), dtype, scope="shared", layout=b_layout, align=1024)
        full = T.alloc_shared([stages], "uint64")
        # used with a producer only; with ping-pong, two more: the warpgroups' turns (empty[stages + wg]
        # completes when the other warpgroup's wgmmas for the tile before are done)
        empty = T.alloc_shared([stages + 2 if pingpong else stages], "uint64")
        acc = T.alloc_local([subtiles * half], "float32")
        desc_a = T.alloc_local([1], "uint64")
        desc_b = T.alloc_local([1], "uint64")

        if tid == 0:
            for s in T.unroll(stages):
                T.ptx.mbarrier.init.shared.b64(full.ptr_to([s]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(empty.ptr_to([s]), T.uint32(releases))
            if pingpong:
                for w in T.unroll(2):
                    T.ptx.mbarrier.init.shared.b64(empty.ptr_to([stages + w]), T.uint32(WARPGROUP_THREADS))
        T.ptx.fence.proxy.async_.shared__cta()
        if cluster > 1:  # the peer's barriers are initialised before either block multicasts into them
            T.ptx.fence.mbarrier_init.release.cluster()
            T.cuda.cluster_sync()
        else:
            T.cuda.cta_sync()

        if producer:
            # the stages' ring runs on across a persistent block's tiles: its i-th tile's kt-th
            # K-tile is the ring's (i * k_tiles + kt)-th
            if wg == tile.consumers:
                if tile.setmaxnreg:
                    T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGISTERS)
                if lane == 0:
                    for i in T.serial(tiles_of(home)):
                        t: T.let = home + i * clusters
                        for kt in T.serial(k_tiles):
                            it: T.let = i * k_tiles + kt
                            # parity flipped: a fresh barrier counts as released, every stage starts free
                            T.cuda.mbarrier_wait(empty.ptr_to([it % stages]), (it // stages) % 2 ^ 1)
                            load(A, B, A_s, B_s, full, a_row_of(t, rank), b_row_of(t), block_n_of(t),
                                 split_of(t) * k_tiles + kt, it % stages, rank)
            else:
                if tile.setmaxnreg:
                    T.ptx["setmaxnreg.inc.sync.aligned.u32"](consumer_registers)
                # cooperative: both warpgroups compute each of the block's tiles; ping-pong: warpgroup
                # wg computes the tiles wg, wg + 2, ..., and as the ring's K-tiles come in tile order,
                # its wgmmas for tile `at` wait for the other's of tile at - 1 (which also keeps every
                # stage's mbarrier at most one phase ahead)
                for i in T.serial((tiles_of(home) + 1 - wg) // 2 if pingpong else tiles_of(home)):
                    at = T.meta_var(wg + 2 * i if pingpong else i)  # the tile's place in the block's order
                    t: T.let = home + at * clusters
                    for j in T.serial(subtiles * half):
                        acc[j] = T.float32(0)
                    if pingpong:
                        if at > 0:  # tile at - 1: the other warpgroup's (i - 1 + wg)-th, that phase
                            T.cuda.mbarrier_wait(empty.ptr_to([stages + wg]), (i + wg + 1) % 2)
                    for kt in T.serial(k_tiles):
                        multiply(A_s, B_s, full, acc, desc_a, desc_b, wg, at * k_tiles + kt)
                        if cluster == 1:
                            T.ptx.mbarrier.arrive.shared.b64(empty.ptr_to([(at * k_tiles + kt) % stages]))
                        elif lane % 32 == 0:  # the peer's producer multicasts into this stage too
                            T.ptx.mbarrier.arrive.shared.b64(empty.ptr_to([(at * k_tiles + kt) % stages]))
                            peer_empty = T.alloc_local([1], "uint32")  # its empty[stage], in the cluster's window
                            T.ptx.mapa.shared__cluster.u32(
                                peer_empty[0],
                                T.cuda.cvta_generic_to_shared(empty.ptr_to([(at * k_tiles + kt) % stages])),
                                T.uint32(1 - rank))
                            T.ptx.mbarrier.arrive.shared__cluster.b64(peer_empty[0])
                    if pingpong:
                        T.ptx.mbarrier.arrive.shared.b64(empty.ptr_to([stages + 1 - wg]))  # the other's turn
                    store(C, acc, block_m_of(t, rank), block_n_of(t), wg, lane, split_of(t), batch_of(t) * m)
            if cluster > 1:  # no block leaves while its peer may still arrive on its barriers
                # not .aligned: the producer warp's lanes come from different branches (lane 0 loaded)
                T.ptx.barrier.cluster.arrive.release()
                T.ptx.barrier.cluster.wait.acquire()
        else:
            block_m: T.let = block_m_of(cta, 0)
            block_n: T.let = block_n_of(cta)
            a_row: T.let = a_row_of(cta, 0)
            b_row: T.let = b_row_of(cta)
            k_first: T.let = split_of(cta) * k_tiles  # this split's first K-tile
            if tid == 0:
                for kt in T.serial(prefetch):
                    load(A, B, A_s, B_s, full, a_row, b_row, block_n, k_first + kt, kt, 0)
            for i in T.serial(subtiles * half):
                acc[i] = T.float32(0)
            for kt in T.serial(k_tiles):
                if tid == 0:
                    if kt + stages - 1 < k_tiles:
                        load(A, B, A_s, B_s, full, a_row, b_row, block_n, k_first + kt + stages - 1,
                             (kt + stages - 1) % stages, 0)
                multiply(A_s, B_s, full, acc, desc_a, desc_b, wg, kt)
                T.cuda.cta_sync()  # every warpgroup is done with this stage before it is loaded again
            store(C, acc, block_m, block_n, wg, lane, split_of(cta), batch_of(cta) * m)
    # fmt: on

    return main


def tile_position(t, *, grid_m: int, grid_n: int, batch: int, group_m: int, minimum=min):
    """Output tile t's (split of K, GEMM of the batch, block row, block column): splits outermost,
    then the batch, then group_m block rows at a time sweeping N, so that the blocks running
    together share B's tiles in L2. Plain arithmetic: ints here, or TIR expressions with
    `minimum=T.min` in the kernel."""
    per_gemm = grid_m * grid_n
    within = t % per_gemm
    first_m = within // (group_m * grid_n) * group_m
    rows_here = minimum(group_m, grid_m - first_m)  # the last group may hold fewer block rows
    return (t // (per_gemm * batch), t % (per_gemm * batch) // per_gemm,
            first_m + within % (group_m * grid_n) % rows_here, within % (group_m * grid_n) // rows_here)


def tiles_of_block(cta, *, tiles: int, ctas: int):
    """How many tiles persistent block `cta` of `ctas` computes: cta, cta + ctas, ... below `tiles`."""
    return (tiles - 1 - cta) // ctas + 1


# one store of two neighbouring elements (col and N even: 4- or 8-byte aligned)
_PAIR_TYPES = {"float16": ("half", "half2", "__halves2half2"),
               "bfloat16": ("nv_bfloat16", "nv_bfloat162", "__halves2bfloat162"),
               "float32": ("float", "float2", "make_float2")}
_PAIR_STORES = {dtype: (f"kb_store_pair_{dtype}",
                        f"\n__forceinline__ __device__ void kb_store_pair_{dtype}(void* dst, {one} a, {one} b) {{\n"
                        f"    *(({two}*)dst) = {make}(a, b);\n}}\n")
                for dtype, (one, two, make) in _PAIR_TYPES.items()}


def sm90a_target():
    import tvm

    return tvm.target.Target({"kind": "cuda", "arch": "sm_90a", "host": {"kind": "llvm"}})


def compile_gemm(m: int, n: int, k: int, tile: GemmTile, out_dtype: str = "float32", *, batch: int = 1,
                 b_batched: bool = False, b_columns: int | None = None):
    """The compiled module (callable as mod(A, B, C)) for one variant on sm_90a (gemm's batch,
    b_batched and b_columns)."""
    import tvm

    target = sm90a_target()
    with target:
        main = gemm(m, n, k, tile, out_dtype, batch=batch, b_batched=b_batched, b_columns=b_columns)
        return tvm.compile(tvm.IRModule({"main": main}), target=target, tir_pipeline="tirx")
