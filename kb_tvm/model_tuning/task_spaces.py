"""Which of a model's tasks MetaSchedule can search: a task whose design space TVM fails to
generate (a schedule rule that raises on it) would end the whole run from inside MetaSchedule's
task loop, before any task is measured; it keeps its default schedule instead, and says why."""

from __future__ import annotations

from ..tvm_errors import invalid_schedule_errors


def searchable_tasks(tasks, space) -> tuple[list, dict[str, str]]:
    """The extracted tasks whose design space generates in `space`, and for each other task the
    first line of TVM's error. Seen: MetaSchedule's CPU rules on a Llama-style decoder's fp16
    task, "reverse-compute-at ... producer(s) not satisfying the constraint"."""
    from tvm.s_tir import meta_schedule as ms

    kept, refused = [], {}
    for task in tasks:
        context = ms.TuneContext(mod=task.dispatched[0], target=task.target, space_generator=space,
                                 task_name=task.task_name)
        try:
            context.generate_design_space()
        except invalid_schedule_errors() as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            refused[str(task.task_name)] = next((line for line in lines if line.startswith("Error message")),
                                                lines[0] if lines else type(err).__name__)
        else:
            kept.append(task)
    return kept, refused
