"""Kernels from outside MetaSchedule in a model's build (kernels/extern.py), on the CPU:
the shipped BERT's four Linear tasks replaced by the Hopper template's plain-TIR twins (same
signature, GEMM and fused epilogue as the GPU kernels; A, B and C reshaped to 2-D), built, run
against the build without them, exported and loaded again. Which set of kernels a tuned model
keeps (kernels/model_stage.py) is plain Python."""

from __future__ import annotations

import numpy as np
import pytest
from hopper_helpers import bert_fp16_tasks


def _twins(tasks, *, double_product_of: str | None = None, k_splits: int = 1):
    from kb_tvm.kernels.extern import ExternKernel
    from kb_tvm.kernels.fused_gemm import NotAGemm
    from kb_tvm.kernels.hopper_gemm.family import match_hopper_gemm

    kernels = []
    for name, task in sorted(tasks.items()):
        try:
            fused = match_hopper_gemm(task.dispatched[0])
        except NotAGemm:
            continue
        symbol = f"kb_twin_{name}"
        if k_splits > 1:  # partial sums over K, then their sum with the task's epilogue
            kernels.append(ExternKernel(
                task=name, symbol=symbol, func=fused.reference(symbol, k_splits), pipeline="default",
                shapes=tuple(fused.partial_shapes(k_splits)), takes=fused.gemm_inputs,
                then=fused.summed(k_splits, f"{symbol}_then"), then_shapes=tuple(fused.summed_shapes(k_splits))))
            continue
        func = fused.reference(symbol)
        if name == double_product_of:  # its epilogue on twice the product: what a wrong kernel looks like
            func = fused._with_task_params(
                lambda epilogue, p=fused.problem: _plain(p, lambda acc, row, col: epilogue(acc * 2.0, row, col)),
                symbol)
        kernels.append(ExternKernel(task=name, symbol=symbol, func=func, shapes=tuple(fused.kernel_shapes()),
                                    pipeline="default"))
    return kernels


def _plain(problem, epilogue):
    from kb_tvm.kernels.fused_gemm import _plain_gemm

    return _plain_gemm(problem, epilogue)


def _run(executable, inputs):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return np.asarray(out.numpy(), dtype=np.float32)


def test_a_models_tasks_run_through_outside_kernels_and_compute_the_same(tmp_path):
    import tvm
    from hopper_helpers import SHIPPED_BERT

    from kb_tvm.model_tuning import build, example_inputs, load_onnx
    from kb_tvm.kernels.extern import use_kernels

    mod, tasks, target = bert_fp16_tasks()
    kernels = _twins(tasks)
    assert len(kernels) == 6
    rewritten = use_kernels(mod, kernels).script()
    # 2 layers: Q, K, V, out, FFN up, down, and attention's two batched matmuls (2 heads each)
    assert rewritten.count("R.call_dps_packed(\"kb_twin_") == 2 * 8
    assert "def fused_matmul_cast1_add2(" not in rewritten  # the replaced tasks' PrimFuncs are gone
    assert "R.reshape(" in rewritten  # [1, 128, 64] activations to the kernels' 2-D A and back

    inputs = example_inputs(load_onnx(SHIPPED_BERT, {"input_ids": (1, 128), "attention_mask": (1, 128)}))
    expected = _run(build(mod, target), inputs)
    executable = build(mod, target, kernels=kernels)
    np.testing.assert_allclose(_run(executable, inputs), expected, rtol=1e-3, atol=1e-3)
    executable.export_library(str(tmp_path / "model.so"))  # the kernels travel in the library
    np.testing.assert_allclose(_run(tvm.runtime.load_module(str(tmp_path / "model.so")), inputs), expected,
                               rtol=1e-3, atol=1e-3)

    wrong = _run(build(mod, target, kernels=_twins(tasks, double_product_of="fused_matmul_cast1_add2")), inputs)
    assert np.abs(wrong - expected).max() > 2e-2  # a wrong kernel shows (layer norms damp it: 0.09 here)


def test_split_k_kernels_sum_their_partials_in_a_kernel_of_the_build_which_applies_the_epilogue():
    from hopper_helpers import SHIPPED_BERT

    from kb_tvm.model_tuning import build, example_inputs, load_onnx
    from kb_tvm.kernels.extern import use_kernels

    mod, tasks, target = bert_fp16_tasks()
    kernels = _twins(tasks, k_splits=4)
    rewritten = use_kernels(mod, kernels)
    text = rewritten.script()
    assert text.count("R.call_dps_packed(\"kb_twin_") == 16
    assert text.count("kb_twin_fused_matmul_cast1_add2_then") > 1  # defined once, called per layer
    # the sum takes the partials, then the task's inputs other than A and B (bias, residual)
    then = rewritten["kb_twin_fused_matmul_cast1_add2_cast5_add1_then"]
    assert [tuple(int(d) for d in p.ty.shape) for p in then.params] == [(4, 128, 64), (64,), (1, 128, 64), (128, 64)]
    inputs = example_inputs(load_onnx(SHIPPED_BERT, {"input_ids": (1, 128), "attention_mask": (1, 128)}))
    np.testing.assert_allclose(_run(build(mod, target, kernels=kernels), inputs), _run(build(mod, target), inputs),
                               rtol=2e-3, atol=2e-3)


def test_a_kernel_for_a_task_the_model_does_not_have_is_refused():
    from kb_tvm.kernels.extern import ExternKernel, use_kernels

    mod, tasks, _ = bert_fp16_tasks()
    kernel = _twins(tasks)[0]
    with pytest.raises(ValueError, match="no task fused_matmul_nowhere in this model"):
        use_kernels(mod, [ExternKernel(task="fused_matmul_nowhere", symbol="x", func=kernel.func,
                                       shapes=kernel.shapes)])


def test_the_sets_of_hopper_kernels_a_tuned_model_tries():
    from kb_tvm.kernels.model_stage import options
    from kb_tvm.kernels.task_search import KernelChoice

    found = {name: KernelChoice(task=name, family=None, problem=None, params=None, seconds=seconds)
             for name, seconds in (("qkv", 5e-6), ("ffn_up", 7e-6))}

    def tasks(sets):
        return [[c.task for c in s] for s in sets]

    # none, those faster alone than the build's schedule, all of them; each set once
    assert tasks(options(found, {"qkv": 6e-6, "ffn_up": 6e-6})) == [[], ["qkv"], ["ffn_up", "qkv"]]
    assert tasks(options(found, {"qkv": 9e-6, "ffn_up": 9e-6})) == [[], ["ffn_up", "qkv"]]
    assert tasks(options(found, {"qkv": 1e-6, "ffn_up": 1e-6})) == [[], ["ffn_up", "qkv"]]
    assert tasks(options({}, {"qkv": 1e-6})) == [[]]


def test_the_stage_splits_its_seconds_by_model_time_and_what_a_task_leaves_goes_to_the_next():
    from kb_tvm.kernels.model_stage import slice_end

    # BERT-base's layer, untuned: FFN down 36%, QKV 29%, FFN up 10%, the attention scores 1%;
    # 36 s for the stage (20% of 3 min)
    times = {"ffn_down": 0.36, "qkv": 0.29, "ffn_up": 0.10, "scores": 0.01}
    now, end = 0.0, 36.0
    first = slice_end(now, end, times["ffn_down"], sum(times.values()))
    assert first == pytest.approx(36.0 * 0.36 / 0.76)
    # FFN down's search stopped itself at 5 s: QKV gets its share of the 31 s left
    assert slice_end(5.0, end, times["qkv"], 0.40) == pytest.approx(5.0 + 31.0 * 0.29 / 0.40)
    assert slice_end(35.0, end, times["scores"], 0.01) == end  # the last task: all that is left


def test_every_task_gets_its_first_variant_before_a_hot_task_overruns_its_slice():
    from types import SimpleNamespace

    from kb_tvm.kernels.model_stage import run_stage

    # a 10-s stage: the hot task's variants take 4 s each (builds), the cold one's 1 s; the hot
    # task's slice (90%) ends at 9 s, its third variant at 12 s, past the stage's end
    now = [0.0]
    cost = {"hot": 4.0, "cold": 1.0}
    measured = {"hot": [], "cold": []}

    def search_one(entry, until, first_right_only):  # goes on where its last call stopped
        done = measured[entry[0]]
        while not until() and not (first_right_only and done) and len(done) < 6:
            now[0] += cost[entry[0]]
            done.append(1.0 / (len(done) + 1))  # each variant faster than the last
        return SimpleNamespace(seconds=min(done)) if done else None

    out = run_stage([("hot",), ("cold",)], {"hot": 0.9, "cold": 0.1}, 10.0, lambda: now[0], search_one)
    assert set(out) == {"hot", "cold"}  # the cold task has a variant although the hot one overran
    assert len(measured["cold"]) >= 1 and len(measured["hot"]) >= 2  # the hot one measured more
    # the second pass went on from the first: no variant measured twice (each has its own time)
    assert all(len(set(times)) == len(times) for times in measured.values())
    assert out["hot"].seconds == min(measured["hot"])
    # a stage already over: nothing measured, nothing chosen
    measured = {"hot": [], "cold": []}
    assert run_stage([("hot",), ("cold",)], {"hot": 0.9, "cold": 0.1}, 0.0, lambda: now[0], search_one) == {}


def test_the_hopper_stage_serves_half_precision_on_sm90_only():
    import tvm

    from kb_tvm.kernels import applicable as applies

    sm90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    assert applies(sm90, "fp16") and applies(sm90, "bf16")
    assert not applies(sm90, "fp32")
    assert not applies(tvm.target.Target({"kind": "cuda", "arch": "sm_80"}), "fp16")
    assert not applies(tvm.target.Target("llvm"), "fp16")


def test_measured_variants_are_read_back_and_a_torn_last_line_is_measured_again(tmp_path):
    import json

    from kb_tvm.kernels.task_search import FILE_NAME, read_rows
    from kb_tvm.kernels.hopper_gemm.variants import VariantSearch

    row = {"task": "t", **VariantSearch.record(__import__("kb_tvm.schedules.hopper_gemm", fromlist=["GemmTile"])
                                               .GemmTile(bm=64, bn=64, stages=3, b_layout="kn"), 6e-6)}
    (tmp_path / FILE_NAME).write_text(json.dumps(row) + "\n" + json.dumps(row)[:20])
    assert read_rows(tmp_path) == [row]
    search = VariantSearch(128, 768, 768, b_layout="kn")
    search.replay(read_rows(tmp_path))
    assert search.best[1] == 6e-6
    assert read_rows(tmp_path / "nowhere") == []
