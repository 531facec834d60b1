"""Which tasks the Hopper GEMM template can compute, read off their TIR (the suite's workloads and a
real BERT's fp16 matmul tasks, epilogues included), and why the others keep MetaSchedule's kernels."""

from __future__ import annotations

import re

import pytest
from hopper_helpers import bert_fp16_tasks
from kb_tvm.workloads import get_workload

from kb_tvm.kernels.fused_gemm import GemmProblem, NotAGemm
from kb_tvm.kernels.hopper_gemm.family import match_hopper_gemm


def test_the_fp16_and_bf16_gemms_are_read_with_b_as_k_by_n_and_fp32_out():
    assert match_hopper_gemm(get_workload("gemm-4096-fp16").module()).problem == GemmProblem(
        m=4096, n=4096, k=4096, dtype="float16", out_dtype="float32", b_layout="kn")
    assert match_hopper_gemm(get_workload("gemm-4096-bf16").module()).problem.dtype == "bfloat16"


def test_batched_matmuls_are_read_as_a_batch_of_gemms_with_a_b_each_or_one_b_for_all():
    import tvm
    from tvm import te

    # attention's scores: 12 heads, A[12, 128, 64] x B[12, 64, 128]
    batched = match_hopper_gemm(get_workload("batch_matmul-12x128x128x64-fp16").module()).problem
    assert batched == GemmProblem(m=128, n=128, k=64, dtype="float16", out_dtype="float32", b_layout="kn",
                                  batch=12, b_batched=True)
    # the template's 2-D views: the heads' matrices one after the other
    assert batched.gemm_shapes == ((12 * 128, 64), (12 * 64, 128), (12 * 128, 128))
    a = te.placeholder((2, 3, 100, 64), "float16", name="A")  # a Linear layer over a [2, 3, 100] batch
    w = te.placeholder((256, 64), "float16", name="W")
    r = te.reduce_axis((0, 64), name="k")
    c = te.compute((2, 3, 100, 256), lambda x, y, i, j: te.sum(
        a[x, y, i, r].astype("float32") * w[j, r].astype("float32"), axis=r), name="C")
    shared = match_hopper_gemm(tvm.IRModule({"main": te.create_prim_func([a, w, c])})).problem
    assert (shared.batch, shared.b_batched, shared.b_layout) == (6, False, "nk")
    assert shared.gemm_shapes == ((600, 64), (256, 64), (600, 256))
    b = te.placeholder((3, 256, 64), "float16", name="B")  # batched over the wrong axis
    d = te.compute((2, 3, 100, 256), lambda x, y, i, j: te.sum(
        a[x, y, i, r].astype("float32") * b[y, j, r].astype("float32"), axis=r), name="D")
    with pytest.raises(NotAGemm, match=re.escape("B indexed as B[")):
        match_hopper_gemm(tvm.IRModule({"main": te.create_prim_func([a, b, d])})).problem


def test_b_stored_as_n_by_k_is_read_as_such():
    import tvm
    from tvm import te

    a = te.placeholder((256, 128), "float16", name="A")
    b = te.placeholder((512, 128), "float16", name="B")  # a Linear layer's weight
    r = te.reduce_axis((0, 128), name="k")
    c = te.compute((256, 512), lambda i, j: te.sum(a[i, r].astype("float32") * b[j, r].astype("float32"), axis=r),
                   name="C")
    problem = match_hopper_gemm(tvm.IRModule({"main": te.create_prim_func([a, b, c])})).problem
    assert (problem.m, problem.n, problem.k, problem.b_layout) == (256, 512, 128, "nk")


def test_any_linear_shape_is_a_workload_read_as_x_times_w_transposed_with_fp16_out():
    problem = match_hopper_gemm(get_workload("linear-128x3072x768-fp16").module()).problem
    assert problem == GemmProblem(m=128, n=3072, k=768, dtype="float16", out_dtype="float16", b_layout="nk")
    for bad in ("linear-0x768x768-fp16", "linear-128x768-fp16", "linear-128x768x768-fp32"):
        with pytest.raises(ValueError, match=re.escape(f"unknown workload {bad!r}")):
            get_workload(bad)


@pytest.mark.parametrize(("workload", "why"), [
    ("gemm-2048", "inputs float32 and float32: the family takes float16 or bfloat16"),
    ("gemm-gelu-256", "inputs float32 and float32: the family takes float16 or bfloat16"),
    ("softmax-128x768", "2 reduction blocks of 4, not one GEMM"),
])
def test_what_it_cannot_compute_is_refused_with_the_reason(workload, why):
    with pytest.raises(NotAGemm, match=re.escape(why)):
        match_hopper_gemm(get_workload(workload).module()).problem


@pytest.mark.parametrize(("args", "why"), [
    (["--workload", "gemm-4096-fp16"], "--workload needs --search BUDGET"),
    (["--workload", "gemm-gelu-256", "--search", "1m"], "gemm-gelu-256: inputs float32 and float32"),
    (["--workload", "no-such", "--search", "1m"], "unknown workload 'no-such'"),
    (["--workload", "batch_matmul-12x128x128x64-fp16", "--search", "1m"], "a batch of 12 GEMMs; this harness"),
    (["--shape", "256x256x256", "--search", "soon"], "budget 'soon' is not a duration"),
    (["--shape", "256x256x256", "--tile", "128x12x4x1"], "bn=12: wgmma's N is a multiple of 8 up to 256"),
    (["--shape", "256x256x256", "--tile", "128x128"], "'128x128': BMxBNxSTAGESxCONSUMERS"),
    (["--shape", "256x256x256", "--tile", "128x256x4x2x8x1x0x1x0x3"], "cluster_m=3: 1 or 2 blocks"),
    (["--shape", "256x256x256", "--tile", "128x128x4x2x8x1x0x1x0x1x1"], "pingpong=True needs persistent=True"),
])
def test_the_gpu_harness_refuses_a_workload_it_cannot_run_in_one_line_before_touching_a_gpu(args, why, tmp_path):
    from click.testing import CliRunner

    from kb_tvm.kernels.hopper_gemm.harness import main

    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out.json")])
    assert result.exit_code == 2
    assert why in result.output
    assert not (tmp_path / "out.json").exists()


def _names(buffers) -> list[str]:
    """The buffers' names, a tensor another kernel made as lv<n> (Relax numbers its variables)."""
    return [re.sub(r"^lv\d+$", "lv<n>", b.name) for b in buffers]


def test_a_bert_layers_linear_tasks_are_read_with_their_fused_epilogues():
    _, tasks, _ = bert_fp16_tasks()
    read = {}
    for name, task in tasks.items():
        try:
            fused = match_hopper_gemm(task.dispatched[0])
        except NotAGemm:
            continue
        if fused.problem.batch == 1:  # the Linear layers; attention's batched matmuls below
            read[name] = (fused.problem, _names(fused.extras), len(fused.epilogue))
    assert read == {
        # Q, K, V and FFN down: bias, then (out projection, FFN down) the fp32 residual
        "fused_matmul_cast1_add2": (GemmProblem(m=128, n=64, k=64, dtype="float16", out_dtype="float16",
                                                b_layout="kn"), ["param_1"], 2),
        "fused_matmul_cast1_add2_cast5_add1": (GemmProblem(m=128, n=64, k=64, dtype="float16",
                                                           out_dtype="float32", b_layout="kn"),
                                               ["param_1", "lv<n>"], 4),
        "fused_matmul4_cast1_add2_cast5_add1": (GemmProblem(m=128, n=64, k=256, dtype="float16",
                                                            out_dtype="float32", b_layout="kn"),
                                                ["param_1", "lv<n>"], 4),
        # FFN up: bias and erf's GELU, whose constants are scalar parameters
        "fused_matmul3_cast6_add4_divide_erf_add5_multiply2_multiply3": (
            GemmProblem(m=128, n=256, k=64, dtype="float16", out_dtype="float16", b_layout="kn"),
            ["param_1", "param_2", "param_3", "param_4"], 9),
    }
    # attention's per-head matmuls (2 heads): scores with the scale and the mask, then values
    attention = {name: match_hopper_gemm(tasks[name].dispatched[0])
                 for name in ("fused_matmul1_cast2_multiply_cast3_add3", "fused_matmul2_cast4")}
    scores, values = attention.values()
    assert scores.problem == GemmProblem(m=128, n=128, k=32, dtype="float16", out_dtype="float32", b_layout="kn",
                                         batch=2, b_batched=True)
    assert _names(scores.extras) == ["param_0", "lv<n>"]  # the scale, the [1, 1, 1, 128] mask
    assert values.problem == GemmProblem(m=128, n=32, k=128, dtype="float16", out_dtype="float16", b_layout="kn",
                                         batch=2, b_batched=True)


def test_an_epilogue_that_is_not_elementwise_is_refused_with_the_reason():
    import tvm
    from tvm import te

    a = te.placeholder((128, 64), "float16", name="A")
    b = te.placeholder((64, 128), "float16", name="B")
    r = te.reduce_axis((0, 64), name="k")
    c = te.compute((128, 128), lambda i, j: te.sum(a[i, r].astype("float32") * b[r, j].astype("float32"), axis=r),
                   name="C")
    t = te.compute((128, 128), lambda i, j: c[j, i], name="T")  # a transpose after the GEMM
    with pytest.raises(NotAGemm, match=re.escape("not at the element it computes")):
        match_hopper_gemm(tvm.IRModule({"main": te.create_prim_func([a, b, t])}))
    s = te.compute((128,), lambda i: c[i, 0], name="S")  # a different shape after it
    with pytest.raises(NotAGemm, match=re.escape("is not elementwise over its [128, 128] output")):
        match_hopper_gemm(tvm.IRModule({"main": te.create_prim_func([a, b, s])}))


H200 = {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32, "registers_per_block": 65536, "host": {"kind": "llvm"}}


@pytest.mark.parametrize(("workload", "target", "family", "skipped"), [
    # not a Hopper GPU: no region; on llvm the CPU families say why they do not take it
    ("gemm-4096-fp16", "llvm", "cpu_gemm", "inputs float16 and float16: the family takes float32"),
    ("gemm-4096-fp16", {**H200, "arch": "sm_80"}, None, None),
    ("gemm-2048", H200, "hopper_gemm", "inputs float32 and float32: the family takes float16 or bfloat16"),
    ("softmax-128x768", H200, "hopper_gemm", "2 reduction blocks of 4, not one GEMM"),
])
def test_tune_op_opens_the_template_region_only_for_a_half_precision_gemm_on_hopper(workload, target, family,
                                                                                   skipped, tmp_path):
    """Decided from the target and the workload's TIR before any GPU is touched (CI has none)."""
    import tvm

    from kb_tvm.budget import TuningBudget
    from kb_tvm.kernels import applicable
    from kb_tvm.tuning import template_region

    events = []
    target = tvm.target.Target(target)
    region = template_region(get_workload(workload), target, TuningBudget(60).start(), tmp_path,
                             on_event=events.append)
    assert region is None and not (tmp_path / "kernels.jsonl").exists()
    # every family that serves the target says why it does not take the workload
    assert [(e["event"], e["family"]) for e in events] == [("kernel_skip", f.name) for f in applicable(target)]
    if skipped is None:
        assert events == []
    else:
        assert skipped in next(e["why"] for e in events if e["family"] == family)


def test_a_constant_b_whose_rows_are_not_16_bytes_is_padded_once_at_build():
    # GPT-2's head: 50257 words, B[K, N] a constant (here 197 columns)
    import numpy as np
    import tvm
    from tvm import te

    from kb_tvm.kernels.hopper_gemm.family import FAMILY

    a = te.placeholder((128, 64), "float16", name="A")
    b = te.placeholder((64, 197), "float16", name="B")
    r = te.reduce_axis((0, 64), name="k")
    c = te.compute((128, 197), lambda i, j: te.sum(a[i, r].astype("float32") * b[r, j].astype("float32"), axis=r),
                   name="C")
    problem = match_hopper_gemm(tvm.IRModule({"main": te.create_prim_func([a, b, c])}))
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}})
    with pytest.raises(NotAGemm, match="N=197 is not a multiple of 8 and B.K, N. is not one constant"):
        FAMILY.variants(problem, target)
    search = FAMILY.variants(problem, target, constants=frozenset({1}))
    assert search.pool and all(t.k_splits == 1 for t in search.pool)  # a split-K takes B unpadded
    kernel = FAMILY.build(problem, search.ask(), target, "head")
    assert kernel.shapes == ((128, 64), (64, 200), (128, 197))
    (index, pack), = kernel.packs
    assert index == 1
    padded = tvm.compile(tvm.IRModule({"main": pack}), target="llvm")
    given = np.arange(64 * 197, dtype="float16").reshape(64, 197)
    out = tvm.runtime.tensor(np.ones((64, 200), "float16"))
    padded["main"](tvm.runtime.tensor(given), out)
    assert (out.numpy()[:, :197] == given).all() and not out.numpy()[:, 197:].any()
    from kb_tvm.kernels.extern import compile_kernels

    source = compile_kernels([kernel], target).imports[0].inspect_source()
    assert "wgmma.mma_async" in source and "kb_store_pair" not in source  # odd N: an element at a time
