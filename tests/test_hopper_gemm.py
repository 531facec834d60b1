"""The Hopper GEMM template on the CPU: what it admits lowers to sm_90a CUDA with wgmma and TMA, what
it refuses is refused with the rule (numerics need the GPU: kb_tvm.kernels.hopper_gemm.harness checks them)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from hopper_helpers import bert_fp16_tasks
from kb_tvm.schedules.hopper_gemm import GemmTile, compile_gemm, gemm

# the variants a tuner would try on transformer shapes: 1 and 2 consumer warpgroups, narrow and
# wide N, shallow and deep pipelines
ADMITTED = [
    GemmTile(bm=64, bn=64, stages=2),
    GemmTile(bm=128, bn=128, stages=4, producer=False),
    GemmTile(bm=64, bn=256, stages=3),
    GemmTile(bm=128, bn=256, stages=3, consumers=2),
    GemmTile(bm=128, bn=256, stages=4, consumers=2, producer=False),
    GemmTile(bm=128, bn=96, stages=5, group_m=1, dtype="bfloat16"),
    GemmTile(bm=128, bn=256, stages=4, consumers=2, b_layout="kn"),
    GemmTile(bm=64, bn=64, stages=3, b_layout="kn", dtype="bfloat16"),
    GemmTile(bm=128, bn=256, stages=4, consumers=2, setmaxnreg=True),
    GemmTile(bm=128, bn=256, stages=4, consumers=2, cluster_m=2),
    GemmTile(bm=128, bn=128, stages=4, b_layout="kn", cluster_m=2, persistent=True),
    GemmTile(bm=128, bn=128, stages=4, consumers=2, persistent=True, pingpong=True),
    GemmTile(bm=64, bn=256, stages=3, consumers=2, persistent=True, pingpong=True, setmaxnreg=True, b_layout="kn",
             dtype="bfloat16"),
]


@pytest.fixture(scope="module")
def cuda_sources():
    """Each admitted variant's CUDA source, lowered once for the tests below (M: two tiles of
    each block of a cluster)."""
    return {t: compile_gemm(2 * t.bm * t.cluster_m, 3 * t.bn, 256, t, "float16").mod.imports[0].inspect_source()
            for t in ADMITTED}


@pytest.mark.parametrize("tile", ADMITTED, ids=lambda t: t.describe().replace(", ", "-"))
def test_every_admitted_variant_lowers_to_sm90a_cuda_with_wgmma_and_tma(tile, cuda_sources):
    source = cuda_sources[tile]
    kind = "bf16" if tile.dtype == "bfloat16" else "f16"
    assert f"wgmma.mma_async.sync.aligned.m64n{tile.bn}k16.f32.{kind}.{kind}" in source
    # B[K, N] is read transposed (the last immediate: imm-trans-b), B[N, K] as it lies
    trans_b = 1 if tile.b_layout == "kn" else 0
    assert f"m64n{tile.bn}k16_f32_{kind}_{kind}_1_1_0_{trans_b}(" in source
    assert "cp.async.bulk.tensor" in source  # TMA loads
    assert "mbarrier" in source
    assert "wgmma.wait_group" in source
    # with a producer warpgroup, consumers release stages through mbarrier arrivals
    assert ("mbarrier_arrive_nocount_arrive_shared_b64(" in source) == tile.producer
    # 128 threads per warpgroup; one block an SM where setmaxnreg needs ptxas to know its registers
    assert f"__launch_bounds__({tile.threads}{', 1' if tile.setmaxnreg else ''})" in source


@pytest.fixture(scope="module")
def assembled(tmp_path_factory, cuda_sources):
    """ptxas's report on each admitted variant, the nvcc runs side by side (each is a process)."""
    from concurrent.futures import ThreadPoolExecutor

    folder = tmp_path_factory.mktemp("ptxas")

    def assemble(i, source):
        (folder / f"k{i}.cu").write_text(source)
        return subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-w", "-Xptxas", "-v",
                               "-o", str(folder / f"k{i}.cubin"), str(folder / f"k{i}.cu")],
                              capture_output=True, text=True, timeout=300)

    sources = [cuda_sources[t] for t in ADMITTED]
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(ADMITTED, pool.map(assemble, range(len(sources)), sources)))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA's ptxas), not a GPU")
@pytest.mark.parametrize("tile", ADMITTED, ids=lambda t: t.describe().replace(", ", "-"))
def test_ptxas_assembles_every_admitted_variant_for_sm90a_without_spills(tile, assembled):
    """What NVRTC meets on the GPU, met here: the inline PTX (wgmma, TMA multicast, mapa, cluster
    barriers, setmaxnreg) must assemble, and the accumulators must stay in registers."""
    done = assembled[tile]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in done.stderr
    registers = int(re.search(r"Used (\d+) registers", done.stderr).group(1))
    assert registers <= 65536 // tile.threads  # the block fits an SM's register file


@pytest.mark.parametrize(("given", "rule"), [
    ({"bn": 12}, "bn=12: wgmma's N is a multiple of 8 up to 256"),
    ({"bn": 264}, "bn=264: wgmma's N is a multiple of 8 up to 256"),
    ({"bm": 96}, "bm=96: each of the 1 warpgroups takes a multiple of 64 rows"),
    ({"bm": 64, "consumers": 2}, "bm=64: each of the 2 warpgroups takes a multiple of 64 rows"),
    ({"consumers": 3}, "consumers=3: 1 or 2 warpgroups"),
    ({"stages": 1}, "stages=1: 2 to 5"),
    ({"stages": 6}, "stages=6: 2 to 5"),
    ({"group_m": 0}, "group_m=0: 1 to 16"),
    ({"producer": 1}, "producer=1: True or False"),
    ({"b_layout": "t"}, "b_layout='t': 'nk' (B[N, K]) or 'kn' (B[K, N])"),
    ({"bn": 32, "b_layout": "kn"}, "bn=32 with b_layout='kn': B's tile is read in 64-column swizzle chunks"),
    ({"dtype": "float32"}, "dtype 'float32' is not one of float16, bfloat16"),
    ({"persistent": True, "producer": False}, "persistent=True needs producer=True"),
    ({"bm": 128, "bn": 256}, "256 fp32 accumulators a thread (at most 128)"),
    ({"setmaxnreg": True}, "setmaxnreg=True needs producer=True and consumers=2"),
    ({"bm": 128, "consumers": 2, "producer": False, "setmaxnreg": True}, "setmaxnreg=True needs producer=True"),
    ({"setmaxnreg": 1}, "setmaxnreg=1: True or False"),
    ({"pingpong": True}, "pingpong=True needs persistent=True, consumers=2 and cluster_m=1"),
    ({"pingpong": True, "persistent": True, "consumers": 2, "cluster_m": 2}, "pingpong=True needs persistent=True"),
    ({"pingpong": 1}, "pingpong=1: True or False"),
    ({"pingpong": True, "persistent": True, "consumers": 2, "bm": 96},
     "bm=96: with pingpong, each warpgroup takes whole tiles of a multiple of 64 rows"),
    # a warpgroup holds the whole 128x256 tile
    ({"pingpong": True, "persistent": True, "consumers": 2, "bn": 256}, "256 fp32 accumulators a thread"),
    ({"cluster_m": 4}, "cluster_m=4: 1 or 2 blocks"),
    ({"cluster_m": 2, "producer": False}, "cluster_m=2 needs producer=True and k_splits=1"),
    ({"cluster_m": 2, "k_splits": 2}, "cluster_m=2 needs producer=True and k_splits=1"),
    ({"cluster_m": 2, "bn": 64, "b_layout": "kn"}, "bn=64 with cluster_m=2: B's tile is split in halves of "
                                                   "multiples of 64 columns"),
    ({"cluster_m": 2, "bn": 24}, "bn=24 with cluster_m=2: B's tile is split in halves of multiples of 8 rows"),
    ({"bm": 256, "bn": 256, "consumers": 2, "stages": 4}, "bytes of shared memory (at most 232448): fewer stages"),
])
def test_variants_that_cannot_run_are_refused_with_the_rule(given, rule):
    with pytest.raises(ValueError, match=re.escape(rule)):
        GemmTile(**given)


def test_b_as_k_by_n_is_the_matmul_of_metaschedule_workloads():
    signature = gemm(256, 512, 128, GemmTile(bm=128, bn=256, consumers=2, b_layout="kn")).script()
    # A[M, K], B[K, N], C[M, N], as the suite's gemm-*-fp16 workloads and Relax's matmuls hold them
    assert ('A: T.Buffer((256, 128), "float16"), B: T.Buffer((128, 512), "float16"), '
            'C: T.Buffer((256, 512), "float32")') in signature
    as_linear = gemm(256, 512, 128, GemmTile(bm=128, bn=256, consumers=2)).script()
    assert 'B: T.Buffer((512, 128), "float16")' in as_linear


def test_shapes_off_the_tile_are_computed_whole_with_guarded_stores():
    tile = GemmTile(bm=128, bn=128, consumers=2)
    on_tile = compile_gemm(256, 256, 128, tile, "float16").mod.imports[0].inspect_source()
    ragged = compile_gemm(200, 264, 104, tile, "float16").mod.imports[0].inspect_source()
    # 2 x 3 blocks, 2 K-tiles (TMA fills rows 200-255, columns 264-383 and K 104-127 with zeros);
    # the stores past row 200 or column 264 are skipped: 200 = 128 + 8 * 8 + 8, 264 = 256 + 8
    assert "< 25)" in ragged and "((int)blockIdx.x) < 4)" in ragged
    assert "< 25)" not in on_tile and ragged.count("if (") > on_tile.count("if (")
    with pytest.raises(ValueError, match=re.escape("K=100 is not a multiple of 8 (TMA copies rows of 16 bytes)")):
        gemm(200, 100, 100, tile)
    split = GemmTile(bm=64, bn=64, k_splits=2)  # split-K: whole K-tiles, as many for each split
    assert split.fits(200, 264, 256) == [] and split.fits(200, 264, 192) == [
        "K=192 is not a multiple of 128 (2 splits of whole 64-wide K-tiles)"]
    partials = compile_gemm(77, 264, 256, split, "float32").mod.imports[0].inspect_source()
    assert "< 77)" in partials or "< 13)" in partials  # rows past M are not stored


def test_an_odd_n_is_stored_an_element_at_a_time_and_b_k_by_n_padded_to_whole_16_byte_rows():
    # ViT's attention scores (197 columns) and GPT-2's head (50257 words)
    nk = GemmTile(bm=64, bn=64)
    odd = compile_gemm(128, 197, 64, nk, "float16").mod.imports[0].inspect_source()
    even = compile_gemm(128, 198, 64, nk, "float16").mod.imports[0].inspect_source()
    # a pair's one store would be misaligned on odd rows, and the last column's pair runs past N
    assert "kb_store_pair_float16(" in even and "kb_store_pair_float16(" not in odd
    assert odd.count("if (") > even.count("if (")
    kn = GemmTile(bm=64, bn=64, b_layout="kn")
    with pytest.raises(ValueError, match=re.escape("N=197 is not a multiple of 8 (TMA copies B[K, N]'s rows")):
        gemm(128, 197, 64, kn)
    padded = compile_gemm(128, 197, 64, kn, "float16", b_columns=200).mod.imports[0].inspect_source()
    assert "wgmma.mma_async" in padded and "kb_store_pair_float16(" not in padded
    assert kn.fits(128, 197, 64, b_columns=204) == [
        "b_columns=204 is not a multiple of 8 (TMA copies rows of 16 bytes)"]
    assert "at least N=197, with one B for all" in kn.fits(128, 197, 64, b_columns=192)[0]
    assert "at least N=197, with one B for all" in nk.fits(128, 197, 64, b_columns=200)[0]


def test_a_fused_tasks_kernel_computes_its_epilogue_and_takes_its_parameters_in_order():
    """BERT's FFN-up task (bias, erf's GELU with scalar constants) as the template's kernel: the
    task's seven parameters in its order, A, B and C as 2-D; the GELU's erf in the device code."""
    import tvm
    from kb_tvm.schedules.hopper_gemm import sm90a_target

    from kb_tvm.kernels.hopper_gemm.family import match_hopper_gemm

    _, tasks, _ = bert_fp16_tasks()
    fused = match_hopper_gemm(tasks["fused_matmul3_cast6_add4_divide_erf_add5_multiply2_multiply3"].dispatched[0])
    kernel = fused.kernel(GemmTile(bm=64, bn=64, stages=3, b_layout="kn"), "kb_ffn_up")
    assert fused.kernel_shapes() == [(128, 64), (64, 256), (256,), (1,), (1,), (1,), (128, 256)]
    assert [tuple(int(d) for d in p.ty.shape) for p in kernel.params] == fused.kernel_shapes()
    with sm90a_target() as target:
        source = tvm.compile(tvm.IRModule({"kb_ffn_up": kernel}), target=target,
                             tir_pipeline="tirx").mod.imports[0].inspect_source()
    assert "erff(" in source
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in source
    # the epilogue's inputs reach the kernel as pointers, A and B as TMA descriptors
    assert re.search(r"kb_ffn_up_kernel\(const __grid_constant__ CUtensorMap A_tensormap, "
                     r"const __grid_constant__ CUtensorMap B_tensormap, half\* __restrict__ C_ptr, "
                     r"half\* __restrict__ param_1_ptr", source)


def test_a_tile_for_another_layout_or_dtype_is_refused_for_the_task():
    from kb_tvm.kernels.hopper_gemm.family import match_hopper_gemm

    _, tasks, _ = bert_fp16_tasks()
    fused = match_hopper_gemm(tasks["fused_matmul_cast1_add2"].dispatched[0])
    with pytest.raises(ValueError, match=re.escape("this task's B is kn float16")):
        fused.kernel(GemmTile(bm=64, bn=64, stages=3, b_layout="nk"), "kb_x")


def test_split_k_variants_write_fp32_partials_and_refuse_an_epilogue():
    tile = GemmTile(bm=64, bn=64, stages=4, b_layout="kn", k_splits=6)
    main = gemm(128, 768, 3072, tile, "float32")
    assert [tuple(int(d) for d in p.ty.shape) for p in main.params] == [(128, 3072), (3072, 768), (6, 128, 768)]
    source = compile_gemm(128, 768, 3072, tile, "float32").mod.imports[0].inspect_source()
    assert "wgmma.mma_async" in source and "cp.async.bulk.tensor" in source
    with pytest.raises(ValueError, match=re.escape("k_splits=6 writes fp32 partial sums")):
        gemm(128, 768, 3072, tile, "float16")
    assert tile.fits(128, 768, 3072) == [] and tile.fits(128, 768, 1024) == [
        "K=1024 is not a multiple of 384 (6 splits of whole 64-wide K-tiles)"]
    with pytest.raises(ValueError, match=re.escape("k_splits=9: 1 to 8")):
        GemmTile(k_splits=9)


def test_a_persistent_variant_launches_a_block_per_sm_that_walks_the_tiles_on_one_ring():
    tile = GemmTile(bm=128, bn=256, stages=4, consumers=2, persistent=True)
    source = compile_gemm(4096, 4096, 512, tile, "float16").mod.imports[0].inspect_source()
    # 512 tiles of 128x256 for 132 blocks: block b takes b, b + 132, ... (the loop's trip count)
    assert re.search(r"\(\(511 - \(\(int\)blockIdx.x\)\) / 132\) \+ 1\)", source)
    assert source.count("m64n256k16_f32_f16_f16") >= 4 and "cp.async.bulk.tensor" in source
    few = compile_gemm(512, 512, 512, GemmTile(bm=128, bn=128, persistent=True), "float16")
    assert "/ 132)" not in few.mod.imports[0].inspect_source()  # 16 tiles: a block each, no loop
    assert gemm(4096, 4096, 512, tile, sms=114).script().count("114") >= 1  # an H100 PCIe's SMs


def test_setmaxnreg_moves_the_producers_registers_to_the_two_consumers():
    tile = GemmTile(bm=128, bn=256, stages=4, consumers=2, setmaxnreg=True)
    source = compile_gemm(256, 512, 256, tile, "float16").mod.imports[0].inspect_source()
    # 384 threads launch with 168 registers each (65536 / 384, in 8s); the producer's 128 threads
    # keep 40 and the consumers' 256 take 232: 40 * 128 + 232 * 256 = 168 * 384
    assert tile.consumer_registers == 232
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in source and "setmaxnreg.inc.sync.aligned.u32 232;" in source
    plain = compile_gemm(256, 512, 256, GemmTile(bm=128, bn=256, stages=4, consumers=2), "float16")
    assert "setmaxnreg" not in plain.mod.imports[0].inspect_source()


def test_a_cluster_of_two_blocks_multicasts_each_half_of_b_and_both_release_every_stage():
    tile = GemmTile(bm=128, bn=256, stages=4, consumers=2, cluster_m=2)
    assert "cta_id_in_cluster" in gemm(4096, 4096, 512, tile, "float16").script()  # launched as clusters of 2
    source = compile_gemm(4096, 4096, 512, tile, "float16").mod.imports[0].inspect_source()
    loads = re.findall(r"cp_async_bulk_tensor_g2s\w+\(tvm_builtin_cuda_cvta_generic_to_shared[^;]*;", source)
    a_load, b_load = loads
    assert "multicast" not in a_load  # each block its own A tile
    # B: block (rank) loads rows rank x 128 of the tile's 256 into the same place of both blocks' stage
    assert "multicast__cluster(" in b_load and "((((int)blockIdx.x) & 1) * 8192)" in b_load
    assert "((((int)blockIdx.x) & 1) * 128)" in b_load
    # every stage waits for both blocks' 8 consumer warps; one lane of each arrives on its peer's too
    assert "empty_ptr[0]))), (uint)16)" in source
    assert "mapa.shared::cluster.u32" in source and "mbarrier.arrive.shared::cluster.b64" in source
    assert "fence.mbarrier_init.release.cluster" in source
    assert source.count("tvm_builtin_cuda_cluster_sync();") == 1  # after the set-up
    assert "barrier.cluster.arrive.release;" in source and "barrier.cluster.wait.acquire;" in source  # leaving
    # the pair's block rows: rank 0 and 1 of a cluster take neighbouring 128-row strips
    assert "((((int)blockIdx.x) & 15) * 128)" in a_load
    # 3 block rows: the second block of the last cluster computes padding, its stores guarded
    odd = compile_gemm(384, 512, 256, tile, "float16").mod.imports[0].inspect_source()
    even = compile_gemm(512, 512, 256, tile, "float16").mod.imports[0].inspect_source()
    assert "(((int)blockIdx.x) & 3) < 3)" in odd  # block row < 3 (row < 384), as the compiler folds it
    assert odd.count("if (") > even.count("if (")  # 4 block rows: no guards
    # persistent: 132 blocks, 66 clusters walking the cluster tiles
    walking = compile_gemm(4096, 4096, 512, GemmTile(bm=128, bn=256, consumers=2, cluster_m=2, persistent=True),
                           "float16").mod.imports[0].inspect_source()
    assert re.search(r"\(\(255 - \(\(int\)blockIdx.x >> 1\)\) / 66\)|/ 66\)", walking)


def test_in_pingpong_the_two_warpgroups_take_whole_tiles_in_turns():
    tile = GemmTile(bm=128, bn=128, stages=4, consumers=2, persistent=True, pingpong=True)
    assert tile.accumulators == 128 and tile.threads == 384  # each warpgroup: all 128 rows
    source = compile_gemm(4096, 4096, 512, tile, "float16").mod.imports[0].inspect_source()
    cooperative = compile_gemm(4096, 4096, 512, GemmTile(bm=128, bn=128, stages=4, consumers=2, persistent=True),
                               "float16").mod.imports[0].inspect_source()
    # a stage is one warpgroup's: its empty barrier waits for 128 arrivals, not both warpgroups' 256
    assert "empty_ptr[0]))), (uint)256)" in cooperative and "empty_ptr[0]))), (uint)128)" in source
    # and two more barriers, the warpgroups' turns: 4 stages, then empty[4] and empty[5]
    assert "empty_ptr[5]))), (uint)128)" in source and "empty_ptr[4]))" not in cooperative
    # warpgroup wg's tiles are the block's wg-th, (wg + 2)-th, ...: 2 x 132 tiles apart
    assert "(i_1 * 264) + ((((int)threadIdx.x) >> 7) * 132)" in source
    # before its wgmmas, it waits for its turn (its own barrier), and after them gives the other its turn
    assert "mbarrier_wait((&(empty_ptr[((((int)threadIdx.x) >> 7) + 4)]))" in source
    assert "empty_ptr[(5 - (((int)threadIdx.x) >> 7))]" in source
    # rows: the cooperative warpgroups split the 128 (the second's A tile 64 rows on), ping-pong's do not
    assert "threadIdx.x) >> 7) * 4096" in cooperative and "threadIdx.x) >> 7) * 4096" not in source
    assert source.count("m64n128k16_f32_f16_f16") >= 8  # 2 sub-tiles x 4 K-steps a warpgroup


@pytest.mark.parametrize(("out_dtype", "pair"), [("float16", "half2"), ("bfloat16", "nv_bfloat162"),
                                                 ("float32", "float2")])
def test_a_threads_two_neighbouring_outputs_are_stored_at_once_unless_told_otherwise(out_dtype, pair):
    tile = GemmTile(bm=64, bn=64, stages=3, dtype="bfloat16" if out_dtype == "bfloat16" else "float16")
    paired = compile_gemm(128, 128, 128, tile, out_dtype).mod.imports[0].inspect_source()
    assert f"*(({pair}*)dst)" in paired
    # 64x64 by one warpgroup: 32 accumulators a thread, 16 pairs, each one call
    assert paired.count(f"kb_store_pair_{out_dtype}((&(C_ptr[") == 16
    single = GemmTile(bm=64, bn=64, stages=3, dtype=tile.dtype, paired_stores=False)
    assert single.describe().endswith("paired_stores=False")
    scalar = compile_gemm(128, 128, 128, single, out_dtype).mod.imports[0].inspect_source()
    assert "kb_store_pair" not in scalar and scalar.count("C_ptr[") >= 32


def test_a_batch_of_gemms_is_one_launch_over_the_batchs_tiles_with_its_rows_offset():
    # BERT-base's attention scores: 12 heads of 128x128x64, B[K, N] a head each
    tile = GemmTile(bm=64, bn=64, stages=2, b_layout="kn")
    scores = gemm(128, 128, 64, tile, "float16", batch=12, b_batched=True)
    assert [tuple(int(d) for d in p.ty.shape) for p in scores.params] == [(1536, 64), (768, 128), (1536, 128)]
    source = compile_gemm(128, 128, 64, tile, "float16", batch=12, b_batched=True).mod.imports[0].inspect_source()
    # 48 blocks (12 heads x 2 x 2): block t's head is t >> 2; its B rows start at head x 64 (= K)
    loads = re.findall(r"cp_async_bulk_tensor_g2s\w+\(tvm_builtin_cuda_cvta_generic_to_shared[^;]*;", source)
    assert "((((int)blockIdx.x) >> 2) * 128)" in loads[0]  # A: head x 128 rows
    assert "((((int)blockIdx.x) >> 2) * 64)" in loads[1]  # B: head x 64 rows of K
    # one B for all (a Linear layer over a batch), M off the tile: the rows past each M are not stored
    shared = compile_gemm(77, 264, 256, GemmTile(bm=128, bn=128, consumers=2), "float16", batch=5)
    assert "< 77)" in shared.mod.imports[0].inspect_source()
    assert [tuple(int(d) for d in p.ty.shape) for p in gemm(77, 264, 256, GemmTile(), batch=5).params] == [
        (385, 256), (264, 256), (385, 264)]
    with pytest.raises(ValueError, match=re.escape("K=96 is not a multiple of 64: a batch's last K-tile of B[K, N] "
                                                   "would run into the next batch's")):
        gemm(128, 128, 96, tile, batch=12, b_batched=True)
    assert tile.fits(128, 128, 96, batch=12) == []  # one B for all: TMA fills its K past 96 with zeros


def test_with_one_b_for_all_the_batchs_matrices_are_tiled_as_one_gemm():
    """A sequence-first Linear (torchvision's attention projects x of [seq, 1, hidden]): 8 matrices
    of one row each, one B. Tiled a matrix at a time that was 8 tile rows of 64 with one row of
    work each (the ViT's QKV projection ran 0.0786 ms so on an H100, its untuned kernel 0.0435)."""
    import tvm
    from tvm import te

    from kb_tvm.kernels.hopper_gemm.family import FAMILY, match_hopper_gemm
    from kb_tvm.schedules.hopper_gemm import sm90a_target

    a, b, bias = te.placeholder((8, 1, 64), "float16", name="A"), te.placeholder((64, 128), "float16", name="B"), \
        te.placeholder((128,), "float16", name="bias")
    r = te.reduce_axis((0, 64), name="r")
    c = te.compute((8, 1, 128), lambda s, i, j: te.sum(a[s, i, r].astype("float32") * b[r, j].astype("float32"),
                                                         axis=r), name="C")
    out = te.compute(c.shape, lambda s, i, j: c[s, i, j].astype("float16") + bias[j], name="out")
    fused = match_hopper_gemm(tvm.IRModule({"main": te.create_prim_func([a, b, bias, out])}))
    assert (fused.problem.batch, fused.problem.m, fused.problem.tiling) == (8, 1, (8, 1))

    def blocks(func) -> int:
        return int(re.search(r"T\.cta_id\(\[(\d+)\]\)", func.script()).group(1))

    tile = GemmTile(bm=64, bn=64, stages=3, b_layout="kn")
    assert blocks(fused.kernel(tile, "kb_qkv")) == 2  # one tile row of 8 rows, two tile columns
    assert blocks(gemm(1, 128, 64, tile, "float16", batch=8)) == 16  # a tile row for each matrix
    search = FAMILY.variants(fused, sm90a_target())
    assert (search.m, search.batch) == (8, 1)


@pytest.mark.parametrize(("grid_m", "grid_n", "batch", "group_m", "splits", "ctas"), [
    (32, 16, 1, 8, 1, 132),  # 4096^2 in 128x256 tiles, persistent
    (13, 5, 1, 8, 1, 65),  # a last group of 5 block rows, one block a tile
    (2, 2, 12, 8, 1, 48),  # 12 heads of 128x128 in 64x64 tiles
    (3, 7, 5, 2, 2, 132),  # a batch, split-K and groups of two, fewer tiles than blocks
    (7, 3, 2, 16, 4, 50),
])
def test_every_output_tile_is_computed_once_by_one_block(grid_m, grid_n, batch, group_m, splits, ctas):
    """The kernel's tile order (tile_position) and persistent blocks' share (tiles_of_block), as
    plain arithmetic: each (split, GEMM, block row, block column) exactly once."""
    from kb_tvm.schedules.hopper_gemm import tile_position, tiles_of_block

    tiles = grid_m * grid_n * batch * splits
    ctas = min(ctas, tiles)
    walked = [cta + i * ctas for cta in range(ctas) for i in range(tiles_of_block(cta, tiles=tiles, ctas=ctas))]
    assert sorted(walked) == list(range(tiles))
    positions = [tile_position(t, grid_m=grid_m, grid_n=grid_n, batch=batch, group_m=group_m) for t in walked]
    assert sorted(positions) == [(s, b, i, j) for s in range(splits) for b in range(batch) for i in range(grid_m)
                                 for j in range(grid_n)]
    # neighbours in launch order share block columns: group_m block rows sweep N together
    first = [tile_position(t, grid_m=grid_m, grid_n=grid_n, batch=batch, group_m=group_m)[2:]
             for t in range(min(group_m, grid_m))]
    assert [j for _, j in first] == [0] * len(first)
