"""What a model tune's report and work dir say about the order it searched its tasks in."""

import math


def hottest_at_search_start(report: dict, work_dir, tasks: list[dict]) -> dict:
    """Of `tasks` (report rows), the one with the most model time once the kernel families'
    best right variants (kernels.jsonl) replaced the defaults they beat: the scheduler's first."""
    from kb_tvm.kernels.task_search import read_rows

    kernel_ms: dict[str, float] = {}
    for row in read_rows(work_dir):
        if row["ok"]:
            kernel_ms[row["task"]] = min(kernel_ms.get(row["task"], math.inf), row["seconds"] * 1e3)
    return max(tasks, key=lambda t: t["weight"] * min(t["latency_before_ms"], kernel_ms.get(t["task"], math.inf)))
