"""Tuned records whose kernels compute something else than their tasks. MetaSchedule never
checks what a schedule computes, and a compiler bug in one schedule makes the whole tuned model
wrong (seen: stock MetaSchedule's GPT-2 on an H200, max abs difference 1.67 where the untuned
build was right). When a tuned model disagrees with its reference, each chosen record's kernel
is run beside the reference's kernel of its task on the same inputs; the records that disagree
are dropped, so that their tasks keep their default schedules and the rest of the tuning stands."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..kernels.task_search import kernel_mismatch, task_inputs, task_output
from ..measure.workers import compile_candidate
from .record_choice import copy_record


def wrong_records(chosen, tasks, target, device, reference: Callable[[str, list], np.ndarray]) -> dict[str, str]:
    """Task name -> how its record in `chosen` (a MetaSchedule database) disagrees with
    `reference(task name, arrays)`, the task's output on those arrays (its output array last),
    for each task whose record does, on two sets of activation-like inputs."""
    from tvm import s_tir

    wrong = {}
    for task in tasks:
        name, mod = str(task.task_name), task.dispatched[0]
        record = chosen.query_tuning_record(mod, target, name)
        if record is None:
            continue
        sch = s_tir.Schedule(mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        library = compile_candidate(sch.mod, target)
        for seed in (0, 1):
            arrays = task_inputs(list(mod["main"].params), seed)
            why = kernel_mismatch(reference(name, arrays), task_output(library, "main", arrays, device))
            if why is not None:
                wrong[name] = why
                break
    return wrong


def without(chosen, tasks, target, names) -> object:
    """A MemoryDatabase with `chosen`'s record of every task but those `names`."""
    from tvm.s_tir import meta_schedule as ms

    kept = ms.database.MemoryDatabase()
    for task in tasks:
        name, mod = str(task.task_name), task.dispatched[0]
        record = chosen.query_tuning_record(mod, target, name)
        if record is not None and name not in names:
            copy_record(kept, mod, record)
    return kept
