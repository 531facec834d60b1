"""A task TVM's schedule rules fail on is searched in the fallback space (its elementwise
producers inlined first), and what that space proposes replays on the task as MetaSchedule's
database replays it at build time, and computes what the task computes."""

from pathlib import Path

import numpy as np
import pytest

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"


@pytest.fixture(scope="module")
def decoder_tasks():
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.measure.targets import make_target
    from kb_tvm.model_tuning import load_onnx
    from kb_tvm.model_tuning.relax_build import relax_module

    target = make_target("llvm")
    model = load_onnx(WORKLOADS / "llama_tiny.onnx", {"input_ids": (1, 16), "attention_mask": (1, 16)})
    return target, ms.relax_integration.extract_tasks(relax_module(model, target, precision="fp32", math="fast"),
                                                      target)


def test_the_masked_attention_matmul_is_searched_in_the_fallback_space(decoder_tasks):
    from kb_tvm.model_tuning.task_spaces import searchable_tasks

    _, tasks = decoder_tasks
    kept, rescued, why_rescued, refused = searchable_tasks(tasks, "post-order-apply")
    assert refused == {}
    assert [str(t.task_name) for t in rescued] == list(why_rescued)
    (name,) = why_rescued  # TVM's MultiLevelTiling fails on the causal mask's `where` beside the matmul
    assert "matmul" in name and "where" in name
    assert "producer(s)" in why_rescued[name]
    assert len(kept) + len(rescued) == len(tasks)


def test_a_fallback_schedule_replays_on_the_task_and_computes_the_same(decoder_tasks):
    import tvm
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.model_tuning.task_spaces import fallback_space

    target, tasks = decoder_tasks
    task = next(t for t in tasks if "where" in str(t.task_name) and "matmul" in str(t.task_name))
    mod = task.dispatched[0]
    context = ms.TuneContext(mod=mod, target=target, space_generator=fallback_space(target), task_name="masked")
    spaces = context.generate_design_space()
    assert spaces and any(inst.kind.name == "ComputeInline" for inst in spaces[0].trace.insts)

    replayed = s_tir.Schedule(mod)
    spaces[-1].trace.apply_to_schedule(replayed, remove_postproc=False)
    assert replayed.mod.script() != mod.script()
    rng = np.random.default_rng(0)
    args = []
    for buffer in mod["main"].params:  # TVM 0.27's PrimFunc parameters are its buffers
        shape = [int(d) for d in buffer.shape]
        value = rng.uniform(-1, 1, shape) > 0 if buffer.dtype == "bool" else rng.uniform(-1, 1, shape)
        args.append(value.astype(buffer.dtype))
    outputs = []
    for scheduled in (mod, replayed.mod):
        tensors = [tvm.runtime.tensor(a) for a in args]
        tvm.compile(scheduled, target=target)(*tensors)
        outputs.append(tensors[-1].numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-6)


def rounded_scores_attention():
    """kb's attention task as an fp16 ViT has it: the scores rounded to fp16, no mask."""
    from tvm import IRModule, te

    from kb_tvm.kernels.attention.rewrite import AttentionShape, attention_te

    shape = AttentionShape(batch=1, heads=2, seq=13, seq_kv=13, d=16, d_v=16, dtype="float16", out_dtype="float16",
                           bias_dims=None, round_scores=True, nan_to_zero=False)
    x = [te.placeholder(dims, "float16") for dims in ((1, 2, 13, 16), (1, 2, 16, 13), (1, 2, 13, 16))]
    return IRModule({"main": te.create_prim_func([*x, attention_te(*x, None, shape)])})


def test_a_task_both_cuda_spaces_fail_on_with_tvm_checks_is_refused_not_a_crash():
    """TVM's rules raise a ValueError (CrossThreadReduction) and an IndexError (the stock CUDA
    rules) from C++ on this task: the fp16 ViT's tune crashed on them before any search."""
    from types import SimpleNamespace

    import tvm
    from tensor_core_helpers import H200

    from kb_tvm.measure.targets import register_tensor_intrinsics
    from kb_tvm.model_tuning.precision import model_space
    from kb_tvm.model_tuning.task_spaces import searchable_tasks

    target = tvm.target.Target(H200)
    register_tensor_intrinsics()
    task = SimpleNamespace(task_name="kb_attention", dispatched=[rounded_scores_attention()], target=target)
    kept, rescued, why_rescued, refused = searchable_tasks([task], model_space(target, "fp16"))
    assert (kept, rescued, why_rescued) == ([], [], {})
    assert list(refused) == ["kb_attention"] and "no tensor-core design space" in refused["kb_attention"]


def test_only_tvm_s_own_value_errors_mean_a_failed_design_space():
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule
    from tvm.s_tir.meta_schedule.space_generator import PostOrderApply

    from tensor_core_helpers import H200

    from kb_tvm.tvm_errors import design_space_failed, raised_in_tvm

    target = tvm.target.Target(H200)
    context = ms.TuneContext(mod=rounded_scores_attention(), target=target, task_name="attention",
                             space_generator=PostOrderApply(sch_rules="cuda", postprocs="cuda", mutator_probs="cuda"))
    with pytest.raises(IndexError) as from_tvm:
        context.generate_design_space()
    assert raised_in_tvm(from_tvm.value) and design_space_failed(from_tvm.value)

    @derived_object
    class Broken(PyScheduleRule):  # kb's own rule with a bug
        def _initialize_with_tune_context(self, context) -> None:
            pass

        def apply(self, sch, block):
            raise ValueError("a bug in a Python rule")

    context = ms.TuneContext(mod=rounded_scores_attention(), target=target, task_name="attention",
                             space_generator=PostOrderApply(sch_rules=[Broken()], postprocs=[], mutator_probs={}))
    with pytest.raises(ValueError) as from_python:
        context.generate_design_space()
    assert not raised_in_tvm(from_python.value) and not design_space_failed(from_python.value)
    assert not design_space_failed(ValueError("raised here"))
    assert isinstance(tvm.error.InternalError("x"), RuntimeError)  # caught beside ValueError and IndexError
