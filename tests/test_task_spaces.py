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
