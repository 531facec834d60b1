"""Records from a candidate log: each task's fastest logged candidate, replayed onto its task as a
database record. A tuned model can so be rebuilt, under other build options, from the
`candidates.jsonl(.gz)` a run kept, without tuning again."""

from __future__ import annotations

import statistics
from pathlib import Path

from ..measure.candidate_log import CandidateLog
from ..tvm_errors import invalid_schedule_errors


def fastest_rows(path: str | Path) -> dict[str, dict]:
    """Task name -> its logged candidate with the lowest median latency (failed ones skipped)."""
    best: dict[str, tuple[float, dict]] = {}
    for row in CandidateLog.read(path):
        if not row["latency_s"]:
            continue
        seconds = statistics.median(row["latency_s"])
        if row["task"] not in best or seconds < best[row["task"]][0]:
            best[row["task"]] = (seconds, row)
    return {task: row for task, (_, row) in best.items()}


def records_from_candidates(path: str | Path, tasks, target, space):
    """A MemoryDatabase with one record per task of `tasks` that the log at `path` measured: its
    fastest candidate's trace replayed onto the task and postprocessed as the design space
    `space` (the one it was tuned in) does. A trace that no longer replays is an error: the log
    is from another model, precision or TVM."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.schedule import Schedule, Trace

    rows = fastest_rows(path)
    database = ms.database.MemoryDatabase()
    for task in tasks:
        name = str(task.task_name)
        row = rows.get(name)
        if row is None:
            continue
        mod = task.dispatched[0]
        context = ms.TuneContext(mod=mod, target=target, space_generator=space, task_name=name)
        sch = Schedule(mod, debug_mask="none")
        try:
            Trace.apply_json_to_schedule(row["trace"], sch)
            sch.enter_postproc()
            replayed = all(p.apply(sch) for p in context.space_generator.postprocs)
        except invalid_schedule_errors() as err:  # TVM rejects it: said once, with the task
            raise ValueError(f"{path}: the logged schedule of task {name} does not replay: "
                             f"{str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}") from None
        if not replayed:
            raise ValueError(f"{path}: the logged schedule of task {name} fails its postprocessors")
        workload = database.commit_workload(mod)
        database.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, workload, [float(s) for s in row["latency_s"]], target, ArgInfo.from_prim_func(mod["main"])))
    return database
