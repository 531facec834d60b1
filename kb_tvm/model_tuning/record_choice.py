"""Which schedule the final build uses per task: the best tuned record only where it beats
the task's default schedule."""

from __future__ import annotations

from ..measure.records import record_latency


def better_than_default(database, tasks, target, default_latency: dict[str, float]):
    """A database holding each task's best record where it beats the task's default schedule;
    where it does not (a short budget on a GPU, where TVM's defaults are good), the build keeps
    the default. Returns (database, task name -> seconds of the schedule the build uses)."""
    from tvm.s_tir import meta_schedule as ms

    chosen = ms.database.MemoryDatabase()
    used = dict(default_latency)
    for task in tasks:
        name = str(task.task_name)
        record = database.query_tuning_record(task.dispatched[0], target, name)
        # the median, as the database ranks them: a re-measure on a busy machine is one of three
        latency = None if record is None else record_latency(record.run_secs)
        if latency is None or latency >= default_latency[name]:
            continue
        used[name] = latency
        copy_record(chosen, task.dispatched[0], record)
    return chosen, used


def copy_record(database, mod, record) -> None:
    """`record` (of another database) committed to `database` as a record of `mod`."""
    from tvm.s_tir import meta_schedule as ms

    workload = database.commit_workload(mod)
    database.commit_tuning_record(ms.database.TuningRecord(record.trace, workload, record.run_secs, record.target,
                                                           record.args_info))
