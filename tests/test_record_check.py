"""A tuned record whose kernel disagrees with its task's reference is found by running it (a real
build and run of each chosen record) and dropped; the records that agree stay."""

import numpy as np


def _tasks_and_records(llvm_target):
    """The tasks of a small model (a matmul, then a relu), each with a record of a schedule from
    its own design space, as a MemoryDatabase."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class Model:
        @R.function
        def main(x: R.Tensor((64, 64), "float32"), w: R.Tensor((64, 64), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                out = R.nn.relu(y)
                R.output(out)
            return out

    tasks = ms.relax_integration.extract_tasks(relax.transform.LegalizeOps()(Model), llvm_target)
    chosen = ms.database.MemoryDatabase()
    for task in tasks:
        mod = task.dispatched[0]
        context = ms.TuneContext(mod=mod, target=llvm_target, space_generator="post-order-apply",
                                 task_name=str(task.task_name), rand_state=1)
        (design, *_) = context.generate_design_space()
        workload = chosen.commit_workload(mod)
        chosen.commit_tuning_record(ms.database.TuningRecord(design.trace, workload, [1e-5], llvm_target,
                                                             ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    return tasks, chosen


def test_a_record_that_disagrees_with_its_task_is_found_and_dropped(llvm_target):
    import tvm

    from kb_tvm.model_tuning.record_check import without, wrong_records

    tasks, chosen = _tasks_and_records(llvm_target)
    assert sorted(str(t.task_name) for t in tasks) == ["matmul", "relu"]

    def reference(task, arrays):  # the matmul's as numpy computes it; the relu's wrong (its negation)
        *inputs, _ = arrays
        if task == "matmul":
            return inputs[0] @ inputs[1]
        return -np.maximum(inputs[0], 0)

    wrong = wrong_records(chosen, tasks, llvm_target, tvm.cpu(), reference)
    assert list(wrong) == ["relu"] and wrong["relu"].startswith("max error")
    kept = without(chosen, tasks, llvm_target, wrong)
    by_name = {str(t.task_name): t for t in tasks}
    assert kept.query_tuning_record(by_name["matmul"].dispatched[0], llvm_target, "matmul") is not None
    assert kept.query_tuning_record(by_name["relu"].dispatched[0], llvm_target, "relu") is None


def test_records_that_agree_are_all_kept(llvm_target):
    import tvm

    from kb_tvm.model_tuning.record_check import wrong_records

    tasks, chosen = _tasks_and_records(llvm_target)

    def reference(task, arrays):
        *inputs, _ = arrays
        return inputs[0] @ inputs[1] if task == "matmul" else np.maximum(inputs[0], 0)

    assert wrong_records(chosen, tasks, llvm_target, tvm.cpu(), reference) == {}
