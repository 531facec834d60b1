"""The attention family: a model's attention made one task (the Relax rewrite), its reference
computation, the family's reading of the task, and its kernels as ptxas assembles them. Running
them needs a Hopper GPU (benchmarks/attention_h200.py)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kb_tvm.kernels.attention import FAMILY, AttentionShape, fuse_attention, takes_attention
from kb_tvm.kernels.family import NotApplicable
from kb_tvm.schedules.flash_attention import AttentionTile

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
# architectures kb was not built on, as `python benchmarks/zoo.py --out zoo falcon gptj` exports
# them (2 layers, hidden 64, 4 heads; zoo/NAME.onnx copied to NAME_zoo.onnx)
ZOO = Path(__file__).resolve().parent / "models"
SEQ = {"input_ids": (1, 16), "attention_mask": (1, 16)}
ZOO_SEQ = {"input_ids": (1, 32), "attention_mask": (1, 32)}
# one decode step of a Llama-style decoder with a key/value cache (1 layer, 4 heads on 2 K/V heads):
# python workloads/export_models.py llama --layers 1 --hidden 64 --heads 4 --kv-heads 2 --ffn 172
#   --vocab 256 --positions 128 --seq 1 --past 15 --out tests/models/llama_decode_tiny.onnx
DECODE = "llama_decode_tiny.onnx"
DECODE_AXES = {"batch": 1, "sequence": 1, "past": 15, "total": 16}  # pinned by name, as `kb-tvm tune --dim`
HOPPER = {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
          "thread_warp_size": 32, "registers_per_block": 65536, "host": {"kind": "llvm"}}


def half_module(name: str, shapes: dict, precision: str = "fp16"):
    """`shapes`: input name -> dims, or for the decode step DECODE_AXES (axis name -> size)."""
    return _imported(name, tuple(sorted(shapes.items())), precision)


@functools.lru_cache(maxsize=None)
def _imported(name: str, shapes: tuple, precision: str):
    """(the ONNX model, its Relax module as kb-tvm tune makes it before the attention rewrite);
    imported once per test session (IRModules are immutable)."""
    from kb_tvm.model_tuning import apply_math, load_onnx, lower_precision, to_relax
    from kb_tvm.model_tuning.rewrites import integer_powers_as_products

    folder = ZOO if (ZOO / name).exists() else WORKLOADS
    by_axis = name == DECODE
    model = load_onnx(folder / name, {} if by_axis else dict(shapes), dict(shapes) if by_axis else None)
    return model, apply_math(lower_precision(integer_powers_as_products()(to_relax(model)), precision), "exact")


def attention_funcs(mod) -> list:
    return [func for gv, func in mod.functions.items() if gv.name_hint.startswith("kb_attention")]


@pytest.mark.parametrize("name,shapes,layers,bias,guard,scale,group", [
    # causal and padding mask, isnan guard; 4 query heads on 2 K/V heads
    ("llama_tiny.onnx", SEQ, 1, (1, 1, 16, 16), True, 1.0, 2),
    ("gpt2_tiny.onnx", SEQ, 1, (1, 1, 16, 16), True, 1.0, 1),
    ("vit_tiny.onnx", {"input": (1, 3, 32, 32)}, 1, None, False, 1.0, 1),  # no mask, 17 tokens
    ("hf_vit_tiny.onnx", {"input": (1, 3, 32, 32)}, 1, None, False, 1.0, 1),  # Hugging Face's ViT, sdpa
    ("bert_tiny.onnx", SEQ, 2, (1, 1, 1, 16), False, 0.1767578125, 1),  # padding mask, 1/sqrt(32) in fp16
])
def test_the_shipped_architectures_attention_becomes_one_task_per_layer(name, shapes, layers, bias, guard, scale,
                                                                        group):
    _, mod = half_module(name, shapes)
    fused = fuse_attention(mod)
    funcs = attention_funcs(fused)
    calls = re.findall(r"= R\.call_tir\(kb_attention\d*,", fused["main"].script())
    assert len(funcs) == 1 and len(calls) == layers
    shape = AttentionShape.from_attrs(funcs[0].attrs["kb_attention"])
    # each export merges the heads back for its output projection: the kernel stores them merged,
    # and the transpose that did it is gone
    assert shape.out_layout == "bshd" and shape.out_shape == (1, shape.seq, shape.heads, shape.d_v)
    assert fused["main"].script().count("R.permute_dims(") < mod["main"].script().count("R.permute_dims(")
    assert shape.bias_dims == bias and shape.dtype == "float16" and shape.round_scores
    assert shape.nan_to_zero == guard and shape.scale == scale and shape.kv_group == group
    # grouped-query: the kernel reads each K/V head once, the repeat of the heads is gone from the graph
    fewer = fused["main"].script().count("R.expand_dims(") < mod["main"].script().count("R.expand_dims(")
    assert fewer == (group > 1)
    assert shape.out_dtype == "float16"  # the cast after the second matmul is the kernel's store
    ops = fused["main"].script()
    assert "R.nn.softmax" not in ops and "R.nn.softmax" in mod["main"].script()


@pytest.mark.parametrize("name,group,scale", [
    ("falcon_zoo.onnx", 4, 1.0),  # multi-query: one K/V head, which the matmuls broadcast to the 4 query heads
    ("gptj_zoo.onnx", 1, 0.25),  # the scores divided by sqrt(d) = 4, and the softmax cast to fp32 it already is
])
def test_architectures_kb_was_not_built_on_get_one_attention_task_per_layer(name, group, scale):
    _, mod = half_module(name, ZOO_SEQ)
    fused = fuse_attention(mod)
    funcs = attention_funcs(fused)
    assert len(re.findall(r"= R\.call_tir\(kb_attention\d*,", fused["main"].script())) == 2  # two layers
    shape = AttentionShape.from_attrs(funcs[0].attrs["kb_attention"])
    assert (shape.heads, shape.kv_group, shape.scale, shape.d) == (4, group, scale, 16)
    assert shape.bias_dims == (1, 1, 32, 32) and shape.round_scores and shape.out_dtype == "float16"
    assert "R.nn.softmax" not in fused["main"].script()


def test_a_decode_steps_attention_over_its_cache_is_one_task():
    """One new token against 15 cached ones: the query is one row, the keys and values the
    cache with the new token's appended (a concat the rewrite leaves before the kernel)."""
    _, mod = half_module(DECODE, DECODE_AXES)
    fused = fuse_attention(mod)
    (func,) = attention_funcs(fused)
    assert len(re.findall(r"= R\.call_tir\(kb_attention\d*,", fused["main"].script())) == 1
    shape = AttentionShape.from_attrs(func.attrs["kb_attention"])
    assert (shape.seq, shape.seq_kv, shape.heads, shape.kv_group, shape.d) == (1, 16, 4, 2, 16)
    assert shape.bias_dims == (1, 1, 1, 16) and shape.nan_to_zero
    assert "R.nn.softmax" not in fused["main"].script()


def test_a_divisor_whose_reciprocal_is_inexact_is_not_taken_as_a_scale():
    """x / c and x times a rounded 1/c can differ in the last bit (x / 10 and x * 0.1 in fp32
    do), and the rewrite keeps every op's rounding: only a power of two is taken as a scale."""
    import tvm
    from tvm import relax

    _, mod = half_module("gptj_zoo.onnx", ZOO_SEQ)

    @relax.expr_functor.mutator
    class DivideByThree(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op.same_as(tvm.ir.Op.get("relax.divide")) and str(call.ty.dtype) == "float16":
                return relax.op.divide(call.args[0], relax.const(3.0, "float16"))
            return call

    main = DivideByThree().visit_expr(mod["main"])
    assert 'R.const(3.0, "float16")' in main.script()
    assert not attention_funcs(fuse_attention(tvm.IRModule({"main": main})))


def test_a_transpose_of_the_output_is_the_kernels_store_where_it_orders_it_as_batch_seq_heads():
    from kb_tvm.kernels.attention.rewrite import keeps_bshd_order

    one, two = {"b": 1, "h": 12, "s": 197, "e": 64}, {"b": 2, "h": 12, "s": 197, "e": 64}
    assert keeps_bshd_order(list("bhse"), [0, 2, 1, 3], two)  # transformers' transpose(1, 2)
    assert keeps_bshd_order(list("bhse"), [2, 0, 1, 3], one)  # torchvision's sequence-first, at batch 1
    assert not keeps_bshd_order(list("bhse"), [2, 0, 1, 3], two)  # ... at batch 2: [seq, batch, heads]
    assert keeps_bshd_order(list("hse"), [1, 0, 2], one)  # [heads, seq, d] of a batch of 1
    assert not keeps_bshd_order(list("bhse"), [0, 1, 3, 2], two)  # a swap of the last two


def test_fp32_models_and_other_targets_keep_their_graph():
    from kb_tvm.model_tuning.relax_build import relax_module
    import tvm

    _, fp32 = half_module("llama_tiny.onnx", SEQ, "fp32")
    assert not attention_funcs(fuse_attention(fp32))  # no half inputs: nothing the kernel takes
    hopper, llvm = tvm.target.Target(HOPPER), tvm.target.Target("llvm")
    assert takes_attention(hopper, "fp16") and takes_attention(hopper, "bf16")
    assert not takes_attention(hopper, "fp32") and not takes_attention(llvm, "fp16")
    model, _ = half_module("llama_tiny.onnx", SEQ)
    assert not attention_funcs(relax_module(model, llvm, precision="fp16", math="exact"))
    # stock's search alone (no kernel families) gets the attention's ops apart, as without kb
    assert attention_funcs(relax_module(model, hopper, precision="fp16", math="exact"))
    assert not attention_funcs(relax_module(model, hopper, precision="fp16", math="exact", kernels=False))


@pytest.mark.parametrize("name,shapes", [
    ("llama_tiny.onnx", SEQ), ("bert_tiny.onnx", SEQ), ("falcon_zoo.onnx", ZOO_SEQ), (DECODE, DECODE_AXES)])
def test_the_rewritten_model_computes_what_the_model_did(name, shapes, llvm_target):
    """The untuned build with the attention as one task (its TE reference, scheduled by default)
    gives the same outputs as with the attention's ops apart."""
    from kb_tvm.model_tuning import prepare
    from kb_tvm.model_tuning.onnx_input import example_inputs
    from kb_tvm.model_tuning.profiling import run_outputs
    from kb_tvm.model_tuning.relax_build import build

    model, mod = half_module(name, shapes)
    inputs = [example_inputs(model), example_inputs(model, seed=1)]  # half the tokens padded, then random
    before, after = (run_outputs(build(prepare(m, llvm_target), llvm_target), llvm_target, inputs)
                     for m in (mod, fuse_attention(mod)))
    for b, a in zip(before, after):
        assert np.isfinite(a[0]).all()
        np.testing.assert_allclose(a[0].astype(np.float32), b[0].astype(np.float32), atol=1e-3, rtol=1e-3)


def reference(q, k_t, v, bias, dtype="float16", scale=1.0):
    group = q.shape[1] // k_t.shape[1]  # each K/V head serves this many query heads
    k_t, v = np.repeat(k_t, group, axis=1), np.repeat(v, group, axis=1)
    s = (q.astype(np.float64) @ k_t.astype(np.float64)).astype(dtype)
    s = (s * np.array(scale, dtype)).astype(np.float64)
    s = s + bias if bias is not None else s
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    return np.where(np.isnan(p), 0.0, p).astype(dtype).astype(np.float64) @ v.astype(np.float64)


# (6, 3): 6 query heads on 2 K/V heads; "bshd": each query's heads side by side
@pytest.mark.parametrize("heads,group,out_layout", [(3, 1, "bhsd"), (6, 3, "bhsd"), (6, 3, "bshd")])
def test_the_attention_reference_is_softmax_of_the_biased_scores_times_v_with_masked_rows_zero(heads, group,
                                                                                               out_layout,
                                                                                               llvm_target):
    import tvm
    from tvm import te

    from kb_tvm.kernels.attention.rewrite import attention_te

    shape = AttentionShape(batch=2, heads=heads, seq=20, seq_kv=24, d=16, d_v=32, dtype="float16",
                           out_dtype="float32", bias_dims=(1, heads, 20, 24), round_scores=True, nan_to_zero=True,
                           scale=0.125, kv_group=group, out_layout=out_layout)
    rng = np.random.default_rng(0)
    q = rng.uniform(-1, 1, (2, heads, 20, 16)).astype("float16")
    k_t = rng.uniform(-1, 1, (2, heads // group, 16, 24)).astype("float16")
    v = rng.uniform(-1, 1, (2, heads // group, 24, 32)).astype("float16")
    bias = np.where(rng.uniform(size=(1, heads, 20, 24)) < 0.3, -np.inf, 0).astype("float32")
    bias[0, 1, 5, :] = -np.inf  # one row masked whole: 0, not NaN
    x = [te.placeholder(a.shape, str(a.dtype)) for a in (q, k_t, v, bias)]
    func = te.create_prim_func([*x, attention_te(*x, shape)])
    lib = tvm.compile(tvm.IRModule({"main": func}), target=llvm_target)
    args = [tvm.runtime.tensor(a) for a in (q, k_t, v, bias)] + [tvm.runtime.empty(shape.out_shape, "float32")]
    lib["main"](*args)
    got, expected = args[-1].numpy(), reference(q, k_t, v, bias, scale=0.125)
    if out_layout == "bshd":
        got = got.transpose(0, 2, 1, 3)
    assert np.all(got[:, 1, 5] == 0) and np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, atol=2e-3)


def test_the_family_reads_the_task_and_refuses_others():
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.model_tuning import prepare
    from kb_tvm.workloads import get_workload

    target = tvm.target.Target(HOPPER)
    _, mod = half_module("llama_tiny.onnx", SEQ)
    tasks = {str(t.task_name): t for t in ms.relax_integration.extract_tasks(prepare(fuse_attention(mod), target),
                                                                             target)}
    attention = [name for name in tasks if name.startswith("kb_attention")]
    assert len(attention) == 1  # one task, opaque to fusion: no neighbours fused into it
    problem = FAMILY.match(tasks[attention[0]].dispatched[0], target)
    assert (problem.heads, problem.seq, problem.seq_kv, problem.d, problem.bias_dims) == (4, 16, 16, 16,
                                                                                        (1, 1, 16, 16))
    assert problem.kv_group == 2  # 4 query heads on 2 K/V heads
    with pytest.raises(NotApplicable, match="not an attention task"):
        FAMILY.match(get_workload("gemm-4096-fp16").module(), target)
    pool = FAMILY.variants(problem, target).pool
    assert pool[0] == AttentionTile(bm=64, bn=64) and len(pool) == len(set(pool)) == 8
    assert AttentionTile(bm=64, bn=64, v_ldmatrix=False, k_vectors=False) in pool  # plain reads beside vector ones
    assert not any(tile.skip_masked for tile in pool)  # right on the H200, but slower on every mask
    kernel = FAMILY.build(problem, pool[0], target, "kb_attention")
    # the kernel takes each head's matrices one after the other (K and V: each K/V head's once), the
    # bias as the model broadcasts it
    assert kernel.shapes == ((64, 16), (32, 16), (32, 16), (1, 1, 16, 16), (64, 16)) and kernel.arch == "sm_90a"
    assert FAMILY.from_record(FAMILY.record(pool[1])) == pool[1]


def test_the_timed_inputs_hold_the_mask_a_decoder_has():
    # a random bias masks nothing, so a tile skip would be neither checked nor timed on it
    shape = AttentionShape(batch=1, heads=2, seq=6, seq_kv=8, d=16, d_v=16, dtype="float16", out_dtype="float16",
                           bias_dims=(1, 1, 6, 8), round_scores=True, nan_to_zero=True)
    arrays = [np.ones((1, 2, 6, 16)), np.ones((1, 2, 16, 8)), np.ones((1, 2, 8, 16)),
              np.full((1, 1, 6, 8), 0.5, "float32"), np.zeros((1, 2, 6, 16))]
    assert FAMILY.check_inputs(shape, arrays, 0)[3].min() == 0.5
    causal = FAMILY.check_inputs(shape, arrays, 1)[3][0, 0] < -1e30
    # row i sees keys up to i + 2 (two keys before the queries, as with a cache)
    assert [int((~row).sum()) for row in causal] == [3, 4, 5, 6, 7, 8] and arrays[3].min() == 0.5
    padding = FAMILY.check_inputs(replace(shape, bias_dims=(1, 1, 1, 8)), [*arrays[:3], arrays[3][:, :, :1]], 0)[3]
    assert (padding[..., -2:] < -1e30).all() and (padding[..., :-2] == 0.5).all()


def test_tiles_name_what_they_break():
    with pytest.raises(ValueError, match=r"bm=96: 64 or 128"):
        AttentionTile(bm=96)
    with pytest.raises(ValueError, match=r"bn=48: 32, 64 or 128"):
        AttentionTile(bn=48)
    with pytest.raises(ValueError, match=r"skip_masked=1: True or False"):
        AttentionTile(skip_masked=1)
    assert AttentionTile().fits(64, 64) == []
    assert "d=72: a multiple of 16" in AttentionTile().fits(72, 72)[0]
    assert "registers" in AttentionTile(bm=128, bn=128).fits(256, 256)[0]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA's ptxas), not a GPU")
@pytest.mark.parametrize("bias,dtype,out_dtype,d,group,out_layout", [
    ((1, 1, 197, 197), "float16", "float16", 64, 4, "bshd"), (None, "bfloat16", "float32", 128, 1, "bhsd")])
def test_ptxas_assembles_every_tile_without_spills(bias, dtype, out_dtype, d, group, out_layout, tmp_path):
    import tvm

    from kb_tvm.kernels.extern import compile_kernels

    target = tvm.target.Target(HOPPER)
    problem = AttentionShape(batch=1, heads=12, seq=197, seq_kv=197, d=d, d_v=d, dtype=dtype, out_dtype=out_dtype,
                             bias_dims=bias, round_scores=True, nan_to_zero=True, kv_group=group,
                             out_layout=out_layout)
    tiles = [*FAMILY.variants(problem, target).pool, AttentionTile(bm=128, bn=64, skip_masked=True)]
    kernels = [FAMILY.build(problem, tile, target, f"t{i}") for i, tile in enumerate(tiles)]
    source = tmp_path / "k.cu"  # all tiles in one file: one nvcc run
    source.write_text(compile_kernels(kernels, target).imports[0].inspect_source("cuda"))
    done = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-w", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"),
                           str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    # ptxas reports each kernel's spills
    assert done.stderr.count("0 bytes spill stores") == done.stderr.count("bytes spill stores") == len(tiles)


def test_metaschedule_does_not_search_a_task_the_attention_family_took():
    from types import SimpleNamespace

    from kb_tvm.kernels import hopper_gemm
    from kb_tvm.kernels.model_stage import left_to_search
    from kb_tvm.kernels.task_search import KernelChoice

    tasks = [SimpleNamespace(task_name=name) for name in ("kb_attention", "matmul", "softmax")]
    found = {"kb_attention": KernelChoice(task="kb_attention", family=FAMILY, problem=None, params=None, seconds=1e-5),
             "matmul": KernelChoice(task="matmul", family=hopper_gemm.FAMILY, problem=None, params=None,
                                    seconds=1e-5)}
    # MetaSchedule may still beat a GEMM family's kernel, not the fused attention
    assert [str(t.task_name) for t in left_to_search(tasks, found)] == ["matmul", "softmax"]
    assert left_to_search(tasks, {}) == tasks


def attention_graph(d: int):
    """softmax(q kᵀ) v over fp16 heads of size d, as an fp16 export imports it."""
    from tvm import relax

    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((1, 2, 8, d), "float16"))
    k_t = relax.Var("k_t", relax.TensorType((1, 2, d, 8), "float16"))
    v = relax.Var("v", relax.TensorType((1, 2, 8, d), "float16"))
    with bb.function("main", [q, k_t, v]):
        with bb.dataflow():
            s = bb.emit(relax.op.matmul(q, k_t, out_dtype="float32"))
            p = bb.emit(relax.op.astype(relax.op.nn.softmax(s, axis=-1), "float16"))
            out = bb.emit_output(relax.op.astype(relax.op.matmul(p, v, out_dtype="float32"), "float16"))
        bb.emit_func_output(out)
    return bb.get()


def test_heads_no_tile_takes_keep_their_graph():
    assert len(attention_funcs(fuse_attention(attention_graph(32)))) == 1
    assert not attention_funcs(fuse_attention(attention_graph(24)))  # d=24: no multiple of 16
