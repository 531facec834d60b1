"""The shipped BERT's fp16 tasks, shared by the Hopper template's tests."""

from __future__ import annotations

from pathlib import Path

SHIPPED_BERT = Path(__file__).resolve().parent.parent / "workloads" / "bert_tiny.onnx"  # 2 layers, hidden 64, FFN 256


def bert_fp16_tasks():
    """The fp16 tasks of the shipped BERT, as `kb-tvm tune --precision fp16` extracts them."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.model_tuning import (
        apply_math,
        load_onnx,
        lower_precision,
        prepare,
        to_relax,
    )

    target = tvm.target.Target("llvm")
    model = load_onnx(SHIPPED_BERT, {"input_ids": (1, 128), "attention_mask": (1, 128)})
    mod = prepare(apply_math(lower_precision(to_relax(model), "fp16"), "exact"), target)
    return mod, {str(t.task_name): t for t in ms.relax_integration.extract_tasks(mod, target)}, target

