"""The CPU GEMM family (schedules/cpu_gemm.py, kb_tvm/kernels/cpu_gemm/): which register blocks it
tries and in what order (plain Python), which tasks it takes, and its kernels computing real tasks
on llvm, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from kb_tvm.kernels.cpu_gemm.variants import VariantSearch, VectorUnit, variants
from kb_tvm.schedules.cpu_gemm import STACK_BYTES, CpuGemmTile

AVX512 = VectorUnit(lanes=16, registers=32)
AVX2 = VectorUnit(lanes=8, registers=16)


@pytest.mark.parametrize("unit", [AVX512, AVX2])
def test_register_blocks_fit_the_registers_the_stack_and_n(unit):
    pool = variants(128, 768, "nk", unit)
    assert pool
    for tile in pool:
        vectors = tile.cols // unit.lanes
        assert tile.cols % unit.lanes == 0 and 768 % tile.cols == 0
        assert tile.rows * vectors + vectors + 1 <= unit.registers  # accumulators, B's vectors, a broadcast
        assert tile.rows * tile.cols * 4 < STACK_BYTES
    assert all(t.pack_b for t in pool)  # a B[N, K] is always packed; a B[K, N] may be read in place
    assert {t.pack_b for t in variants(128, 768, "kn", unit)} == {True, False}


def test_the_prior_asks_first_for_the_blocks_the_vector_unit_wants():
    assert variants(128, 768, "nk", AVX512)[:2] == [CpuGemmTile(rows=12, cols=16), CpuGemmTile(rows=6, cols=32)]
    assert variants(128, 768, "kn", AVX512)[:2] == [CpuGemmTile(rows=12, cols=16),
                                                    CpuGemmTile(rows=12, cols=16, pack_b=False)]
    # AVX2: 8 accumulators, two vectors a row (on a Zen 3 GPT-2's QKV ran 2.85 ms so; 4.29 and
    # 6.55 with 3x16 and 6x8, the 6 accumulators the earlier prior asked for first; 12.3 with 12x8)
    assert variants(128, 768, "nk", AVX2)[:2] == [CpuGemmTile(rows=4, cols=16), CpuGemmTile(rows=8, cols=8)]
    # a GEMM of 4 rows: no block computes rows past them first
    assert variants(4, 768, "nk", AVX512)[0].rows == 4
    # GPT-2's 50257 words: B's last panel is padded, so B is packed, the least padding first
    vocabulary = variants(128, 50257, "kn", AVX512)
    assert vocabulary[0] == CpuGemmTile(rows=12, cols=16) and all(t.pack_b for t in vocabulary)


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="rows=0, n=64"):
        VariantSearch(rows=0, n=64, b_layout="nk", unit=AVX512)
    with pytest.raises(ValueError, match="patience=0"):
        VariantSearch(rows=128, n=768, b_layout="nk", unit=AVX512, patience=0)
    with pytest.raises(ValueError, match="b_layout='kk'"):
        VariantSearch(rows=128, n=768, b_layout="kk", unit=AVX512)
    with pytest.raises(ValueError, match="rows=16, cols=16: 1024 bytes"):
        CpuGemmTile(rows=16, cols=16)
    with pytest.raises(ValueError, match="is not a variant of 128x64"):
        VariantSearch(rows=128, n=64, b_layout="nk", unit=AVX512).tell(CpuGemmTile(rows=4, cols=24), 1.0)


def test_the_search_stops_after_patience_measurements_without_a_gain():
    search = VariantSearch(rows=128, n=768, b_layout="nk", unit=AVX512, patience=3)
    asked = []
    while (tile := search.ask()) is not None:
        asked.append(tile)
        search.tell(tile, 0.9 if len(asked) == 3 else 1.0)  # only the third gains (10%)
    assert asked == search.pool[:6]  # the first, the gain at the third, then three without one
    assert search.best == (asked[2], 0.9)


def test_a_failed_variant_is_never_the_best_nor_a_gain():
    search = VariantSearch(rows=128, n=768, b_layout="nk", unit=AVX512, patience=2)
    failed = search.ask()
    search.tell(failed, None)
    assert search.best is None and search.ask() not in (None, failed)
    search.tell(search.ask(), None)
    assert search.ask() is not None  # nothing right yet: patience does not end the search
    right = search.ask()
    search.tell(right, 2e-3)
    assert search.best == (right, 2e-3)


def test_the_vector_unit_is_read_off_the_target():
    import tvm

    from kb_tvm.kernels.cpu_gemm.family import vector_unit

    def unit(**spec):
        return vector_unit(tvm.target.Target({"kind": "llvm", **spec}))

    assert unit(mcpu="znver4") == AVX512 and unit(mcpu="haswell") == AVX2
    assert unit(mtriple="aarch64-linux-gnu", mcpu="neoverse-n1") == VectorUnit(lanes=4, registers=32)
    assert unit() == VectorUnit(lanes=4, registers=16)  # a bare llvm: SSE


def _linear(m, n, k, b_layout, dtype="float32", batch=None, b_batched=False):
    """relu(A @ B + bias), as Relax fuses a Linear layer and its activation: an IRModule."""
    import tvm
    from tvm import te

    lead = [batch] if batch else []
    a = te.placeholder([*lead, m, k], dtype, name="A")
    b_shape = (k, n) if b_layout == "kn" else (n, k)
    b = te.placeholder([*(lead if b_batched else []), *b_shape], dtype, name="B")
    bias = te.placeholder([n], dtype, name="bias")
    r = te.reduce_axis((0, k), name="r")

    def b_at(idx, j):
        where = idx[:-2] if b_batched else []
        return b[(*where, r, j)] if b_layout == "kn" else b[(*where, j, r)]

    c = te.compute([*lead, m, n], lambda *idx: te.sum(a[(*idx[:-1], r)] * b_at(idx, idx[-1]), axis=r), name="C")
    out = te.compute(c.shape, lambda *idx: te.max(c(*idx) + bias[idx[-1]], tvm.tirx.const(0, dtype)), name="out")
    return tvm.IRModule({"main": te.create_prim_func([a, b, bias, out])})


def test_an_fp32_linear_or_batched_matmul_is_taken_and_half_precision_is_refused(llvm_target):
    from kb_tvm.kernels.cpu_gemm import FAMILY
    from kb_tvm.kernels.fused_gemm import NotAGemm

    fused = FAMILY.match(_linear(64, 32, 48, "nk"), llvm_target)
    p = fused.problem
    assert (p.m, p.n, p.k, p.b_layout, p.dtype, p.out_dtype) == (64, 32, 48, "nk", "float32", "float32")
    assert len(fused.epilogue) == 1  # bias and relu, one elementwise block
    assert FAMILY.match(_linear(8, 32, 48, "kn", batch=3), llvm_target).problem.batch == 3  # one B for all
    with pytest.raises(NotAGemm, match="float16 and float16: the family takes float32"):
        FAMILY.match(_linear(64, 32, 48, "nk", dtype="float16"), llvm_target)
    attention = FAMILY.match(_linear(8, 32, 48, "kn", batch=3, b_batched=True), llvm_target).problem
    assert attention.batch == 3 and attention.b_batched  # a B for each matrix
    assert FAMILY.applies(llvm_target, "fp16") == "precision fp16: the template computes fp32"


def _run(kernel, arrays, target):
    """The kernel's output on `arrays`, its prepacked inputs packed first, as a build packs them."""
    import tvm

    from kb_tvm.kernels.extern import compile_kernels
    from kb_tvm.kernels.task_search import compile_packings, kernel_arguments

    library = compile_kernels([kernel], target)
    (args,) = kernel_arguments(kernel, arrays, tvm.cpu(), compile_packings(kernel, target))
    library[kernel.symbol](*args)
    return args[-1].numpy()


@pytest.mark.parametrize(("b_layout", "n", "tile"), [
    ("kn", 32, CpuGemmTile(rows=12, cols=16)), ("nk", 32, CpuGemmTile(rows=12, cols=16)),
    ("kn", 32, CpuGemmTile(rows=4, cols=32, pack_b=False)), ("nk", 32, CpuGemmTile(rows=1, cols=16)),
    ("kn", 50, CpuGemmTile(rows=12, cols=16)), ("nk", 50, CpuGemmTile(rows=4, cols=32)),
    ("kn", 32, CpuGemmTile(rows=12, cols=16, prepacked=True)), ("nk", 64, CpuGemmTile(rows=4, cols=32, prepacked=True)),
    ("kn", 50, CpuGemmTile(rows=12, cols=16, prepacked=True)), ("nk", 50, CpuGemmTile(rows=4, cols=32, prepacked=True)),
])
def test_a_kernel_computes_its_task_also_with_blocks_past_the_last_row_and_column(b_layout, n, tile, llvm_target):
    """Two matrices of 25 rows: a 12-row block computes 10 past them (a predicate keeps them out
    of C). 50 columns: B's last panel is padded with zeros (on each call, or prepacked at build),
    and the epilogue stores 50."""
    from kb_tvm.kernels.cpu_gemm import FAMILY

    m, k, batch = 25, 40, 2
    fused = FAMILY.match(_linear(m, n, k, b_layout, batch=batch), llvm_target)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batch, m, k), dtype=np.float32)
    b = rng.standard_normal((k, n) if b_layout == "kn" else (n, k), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    got = _run(FAMILY.build(fused, tile, llvm_target, "linear"), [a, b, bias, np.zeros((batch, m, n), np.float32)],
               llvm_target)
    expected = np.maximum(a @ (b if b_layout == "kn" else b.T) + bias, 0)
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("b_layout", "tile"), [
    ("kn", CpuGemmTile(rows=8, cols=16)), ("nk", CpuGemmTile(rows=4, cols=32)),
    ("kn", CpuGemmTile(rows=8, cols=16, pack_b=False)), ("kn", CpuGemmTile(rows=8, cols=16, prepacked=True)),
    ("nk", CpuGemmTile(rows=4, cols=32, prepacked=True)),
])
def test_attentions_matmuls_with_a_b_for_each_matrix_compute_right(b_layout, tile, llvm_target):
    """Three heads of 24 x 48 by 48 x 32: each block reads the panel of its own head's B."""
    from kb_tvm.kernels.cpu_gemm import FAMILY

    m, n, k, heads = 24, 32, 48, 3
    fused = FAMILY.match(_linear(m, n, k, b_layout, batch=heads, b_batched=True), llvm_target)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((heads, m, k), dtype=np.float32)
    b = rng.standard_normal((heads, k, n) if b_layout == "kn" else (heads, n, k), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    got = _run(FAMILY.build(fused, tile, llvm_target, "scores"), [a, b, bias, np.zeros((heads, m, n), np.float32)],
               llvm_target)
    expected = np.maximum(a @ (b if b_layout == "kn" else b.transpose(0, 2, 1)) + bias, 0)
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)


def test_with_a_b_for_each_matrix_a_block_stays_within_one_matrix():
    pool = variants(12 * 128, 64, "kn", AVX512, matrix_rows=128)
    assert pool and all(128 % t.rows == 0 and 64 % t.cols == 0 for t in pool)
    assert variants(3 * 24, 50, "kn", AVX512, matrix_rows=24) == []  # no vector of columns divides 50


def test_the_shared_search_finds_a_right_variant_and_resumes(llvm_target, tmp_path):
    from kb_tvm.kernels.cpu_gemm import FAMILY
    from kb_tvm.kernels.cpu_gemm.family import vector_unit
    from kb_tvm.kernels.task_search import local_device, read_rows, search_task

    mod = _linear(64, 64, 96, "nk")
    fused = FAMILY.match(mod, llvm_target)

    def reference(arrays):
        a, b, bias, _ = arrays
        return np.maximum(a @ b.T + bias, 0)

    device = local_device(llvm_target)
    choice = search_task(FAMILY, fused, mod["main"], "linear", llvm_target, device, reference,
                         until=lambda: False, work_dir=tmp_path, earlier=[])
    rows = read_rows(tmp_path)
    assert len(rows) >= 2 and all(r["ok"] and r["error"] is None and r["family"] == "cpu_gemm" for r in rows)
    assert choice.seconds == min(r["seconds"] for r in rows) and choice.describe().startswith("cpu_gemm rows=")
    assert FAMILY.from_record(rows[0]) == variants(64, 64, "nk", vector_unit(llvm_target))[0]
    again = search_task(FAMILY, fused, mod["main"], "linear", llvm_target, device, reference,
                        until=lambda: False, work_dir=tmp_path, earlier=rows)
    assert again.params == choice.params and len(read_rows(tmp_path)) == len(rows)  # nothing measured twice
    # a work dir of an earlier kb_tvm, whose variants for a constant B were packed on each call:
    # resumed where B is now packed at build, its rows are not this search's, and it searches afresh
    stale = [{**row, "tile": {**row["tile"], "prepacked": False}} for row in rows]
    (tmp_path / "new").mkdir()
    resumed = search_task(FAMILY, fused, mod["main"], "linear", llvm_target, device, reference,
                          until=lambda: False, work_dir=tmp_path / "new", earlier=stale, constants=frozenset({1}))
    assert resumed.params.prepacked and all(FAMILY.from_record(r).prepacked for r in read_rows(tmp_path / "new"))



def test_a_variant_is_built_without_inspects_module_lookups(llvm_target, monkeypatch):
    """TVMScript calls inspect.stack for each function it parses, whose module lookups took a
    third of a CPU GEMM variant's build on 2 cores (0.16 s against 0.11 without)."""
    import inspect

    from kb_tvm.kernels.cpu_gemm import FAMILY
    from kb_tvm.kernels.task_search import build_variant

    calls, stack = [], inspect.stack
    monkeypatch.setattr(inspect, "stack", lambda *args, **kwargs: calls.append(1) or stack(*args, **kwargs))
    counting = inspect.stack
    fused, tile = FAMILY.match(_linear(64, 32, 48, "nk"), llvm_target), CpuGemmTile(rows=4, cols=16)
    assert build_variant(FAMILY, fused, tile, llvm_target, "linear").symbol == "kb_cpu_gemm_linear"
    assert not calls and inspect.stack is counting  # the caller's inspect.stack is back
    FAMILY.build(fused, tile, llvm_target, "linear")
    assert calls  # the family's TVMScript does ask for the stack


def test_an_unpacked_b_whose_n_the_block_does_not_divide_is_refused(llvm_target):
    from kb_tvm.kernels.cpu_gemm import FAMILY

    fused = FAMILY.match(_linear(25, 50, 40, "kn"), llvm_target)
    with pytest.raises(ValueError, match="N=50 is no multiple of cols=16: B must be packed"):
        FAMILY.build(fused, CpuGemmTile(rows=4, cols=16, pack_b=False), llvm_target, "linear")


def test_a_constant_b_is_packed_once_at_build_where_the_block_divides_n():
    constant = variants(128, 768, "nk", AVX512, b_constant=True)
    assert constant and all(t.prepacked for t in constant)  # packing it on each call is only slower
    assert {t.pack_b for t in variants(128, 768, "kn", AVX512, b_constant=True)} == {True, False}
    assert not any(t.prepacked for t in variants(128, 768, "nk", AVX512))  # an activation is packed each call
    vocabulary = variants(128, 50257, "kn", AVX512, b_constant=True)  # padded panels, packed at build too
    assert vocabulary and all(t.prepacked for t in vocabulary)
    with pytest.raises(ValueError, match="prepacked=True needs pack_b=True"):
        CpuGemmTile(rows=4, cols=16, pack_b=False, prepacked=True)


def test_a_block_holds_a_power_of_two_of_vectors_a_row():
    """LLVM lowers a 48-float vector badly: such blocks ran 10x slower than 32-float ones."""
    assert {t.cols // 16 for t in variants(128, 768, "nk", AVX512)} == {1, 2, 4}


def test_a_function_of_plain_loops_is_neither_a_gemm_nor_a_convolution():
    # TOPI writes a cumsum (OPT's positions) as loops without blocks: matching it raised a
    # ScheduleError, which ended `kb-tvm tune` before any tuning
    import tvm
    from plain_loops import cumsum_without_blocks

    from kb_tvm.kernels.cpu_gemm.family import match_cpu_gemm
    from kb_tvm.kernels.fused_conv import NotAConv, match_fused_conv
    from kb_tvm.kernels.fused_gemm import NotAGemm

    mod = tvm.IRModule({"main": cumsum_without_blocks()})
    with pytest.raises(NotAGemm, match="plain loops"):
        match_cpu_gemm(mod)
    with pytest.raises(NotAConv, match="plain loops"):
        match_fused_conv(mod)
