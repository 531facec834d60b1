"""The layout rewrites (kb_tvm/model_tuning/layout.py): which steps of a shipped export's graph
they take out, and that the model computes exactly what it did."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kb_tvm.model_tuning.layout import broadcasts_over_leading, keeps_order, leading_only

from test_attention import HOPPER, SEQ, half_module


def test_a_permutation_is_a_reshape_where_only_axes_of_one_move():
    assert keeps_order([1, 17, 64], [1, 0, 2])  # batch-first to sequence-first at batch 1
    assert keeps_order([17, 1, 64], [1, 0, 2])
    assert not keeps_order([2, 17, 64], [1, 0, 2])  # at batch 2 the rows interleave
    assert not keeps_order([1, 4, 17, 16], [2, 0, 1, 3])  # heads and tokens swap


def test_a_reshape_moves_through_a_linear_only_where_the_last_axis_stays():
    assert leading_only([17, 64], [1, 17, 64]) and leading_only([1, 16, 256], [16, 256])
    assert not leading_only([16, 192], [16, 3, 64])  # the head split
    assert broadcasts_over_leading([64], 64) and broadcasts_over_leading([], 64)
    assert broadcasts_over_leading([1, 1, 64], 64) and broadcasts_over_leading([1], 64)
    assert not broadcasts_over_leading([17, 64], 64)  # a residual: its rows are the rows regrouped
    assert not broadcasts_over_leading([32], 64)


def kernels(mod) -> list[str]:
    """The call_tir functions of a prepared module's main, in order."""
    return re.findall(r"R\.call_tir\((?:cls\.)?(\w+),", mod["main"].script())


def working(names: list[str]) -> list[str]:
    """The kernels that do work: a function of reshapes alone is a view once built."""
    return [k for k in names if not re.fullmatch(r"(fused_)?reshape\d*(_reshape\d*)*", k)]


def prepared(name: str, shapes: dict, precision: str, target, *, layout: bool):
    from kb_tvm.kernels.attention import fuse_attention
    from kb_tvm.model_tuning import prepare
    from kb_tvm.model_tuning.layout import layout_moves_removed

    model, mod = half_module(name, shapes, precision)
    mod = fuse_attention(mod)
    return model, prepare(layout_moves_removed()(mod) if layout else mod, target)


VIT = {"input": (1, 3, 32, 32)}


def test_torchvision_vit_loses_its_takes_transposes_and_residual_kernel():
    import tvm

    target = tvm.target.Target(HOPPER)
    _, before = prepared("vit_tiny.onnx", VIT, "fp16", target, layout=False)
    _, after = prepared("vit_tiny.onnx", VIT, "fp16", target, layout=True)
    old, new = kernels(before), kernels(after)
    assert sum(k.startswith("take") for k in old) == 4 and not any(k.startswith("take") for k in new)
    assert "transpose1" in old  # the layer's batch-first input made sequence-first: at batch 1 a view
    # kernels that do work: the four takes, the transpose, the residual's add, the class token's cast
    # and the unpacking of the QKV tensor (each head's slice unpacks its own) are gone
    assert len(working(new)) == len(working(old)) - 8
    assert all("strided_slice" in k for k in new if "expand_dims" in k) and sum("expand_dims" in k for k in new) == 3
    # the out projection's task adds the residual: two adds after its matmul, as the MLP's second Linear
    assert sum(bool(re.fullmatch(r"fused_matmul\d*_cast\d*_add\d*_add\d*", k)) for k in new) == 2


def test_gpt2s_norms_take_their_casts_and_its_linears_their_gelu_and_residuals():
    import tvm

    target = tvm.target.Target(HOPPER)
    _, before = prepared("gpt2_tiny.onnx", SEQ, "fp16", target, layout=False)
    _, after = prepared("gpt2_tiny.onnx", SEQ, "fp16", target, layout=True)
    new = kernels(after)
    assert len(working(new)) == len(working(kernels(before))) - 6
    assert all(k == "fused_layer_norm_cast2" for k in new if "layer_norm" in k)
    assert any("matmul" in k and "tanh" in k for k in new)  # GELU in the first MLP Linear's epilogue
    assert sum(bool(re.fullmatch(r"fused_matmul\d*_cast\d*_add\d*_cast\d*_add\d*", k)) for k in new) == 2


def test_gpt2s_first_mlp_linear_with_its_gelu_is_a_hopper_kernel_with_tanh_in_its_epilogue():
    """What the layout rewrites give the Hopper family on GPT-2: FC1's task, bias and the tanh
    GELU fused after the matmul, is read as a GEMM with that epilogue and lowers to sm_90a."""
    import tvm
    from kb_tvm.schedules.hopper_gemm import GemmTile, sm90a_target

    from kb_tvm.kernels.hopper_gemm.family import match_hopper_gemm
    from kb_tvm.model_tuning.relax_build import model_tasks

    target = tvm.target.Target(HOPPER)
    _, mod = prepared("gpt2_tiny.onnx", SEQ, "fp16", target, layout=True)
    (fc1,) = [t for t in model_tasks(mod, target) if "matmul" in str(t.task_name) and "tanh" in str(t.task_name)]
    fused = match_hopper_gemm(fc1.dispatched[0])
    assert fused.problem.n == 4 * fused.problem.k  # GPT-2's MLP widens four times
    kernel = fused.kernel(GemmTile(bm=64, bn=64, stages=3, b_layout=fused.problem.b_layout), "kb_fc1")
    with sm90a_target() as cuda:
        source = tvm.compile(tvm.IRModule({"kb_fc1": kernel}), target=cuda,
                             tir_pipeline="tirx").mod.imports[0].inspect_source()
    assert "wgmma.mma_async" in source and "tanh" in source


def test_llama_is_left_as_it_was():
    import tvm

    target = tvm.target.Target(HOPPER)
    before, after = (kernels(prepared("llama_tiny.onnx", SEQ, "fp16", target, layout=flag)[1])
                     for flag in (False, True))
    assert len(working(before)) == len(working(after))


@pytest.mark.parametrize("name,shapes,precision", [
    ("vit_tiny.onnx", VIT, "fp16"), ("gpt2_tiny.onnx", SEQ, "fp32")])
def test_the_rewritten_model_computes_exactly_what_it_did(name, shapes, precision, llvm_target):
    from kb_tvm.model_tuning.onnx_input import example_inputs
    from kb_tvm.model_tuning.profiling import run_outputs
    from kb_tvm.model_tuning.relax_build import build

    outputs = []
    for layout in (False, True):
        model, mod = prepared(name, shapes, precision, llvm_target, layout=layout)
        outputs.append(run_outputs(build(mod, llvm_target), llvm_target,
                                   [example_inputs(model), example_inputs(model, seed=1)]))
    for before, after in zip(*outputs):
        assert np.isfinite(after[0]).all()
        np.testing.assert_array_equal(after[0], before[0])


def test_kbs_jobs_tune_no_task_that_is_a_view_once_built():
    import tvm

    from kb_tvm.model_tuning.relax_build import model_tasks

    target = tvm.target.Target(HOPPER)
    _, mod = prepared("vit_tiny.onnx", VIT, "fp16", target, layout=True)
    every = [str(t.task_name) for t in model_tasks(mod, target, views_left_out=False)]
    tuned = [str(t.task_name) for t in model_tasks(mod, target)]
    assert "reshape1" in every and set(every) - set(tuned) == {n for n in every if n not in working([n])}
    assert tuned == working(tuned)
