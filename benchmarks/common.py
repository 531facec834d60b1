"""What the harnesses in benchmarks/ share (a script run by path finds this module beside it)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

# an sm_90 GPU (H100, H200) as kb's cuda target describes it, for harnesses that lower, count or
# sample for it without the GPU
HOPPER = {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
          "thread_warp_size": 32, "registers_per_block": 65536, "host": {"kind": "llvm"}}


def design_space(workload, target):
    """The design space a tune searches for `workload` on `target`, as kb-tvm tune-op picks it:
    the tensor-core space for the workloads marked for it on CUDA, else MetaSchedule's default."""
    if target.kind.name == "cuda" and workload.cuda_space == "cuda-tensorcore":
        from kb_tvm import TensorCoreSpace

        return TensorCoreSpace()
    return "post-order-apply"


def run_in_pool(one, jobs: list, workers: int, line) -> list:
    """`one(job)` for every job, in `workers` processes, in the jobs' order; each result is echoed
    as `line(result)` as it comes (the replay harnesses' runs)."""
    import click

    rows = []
    with ProcessPoolExecutor(workers) as pool:
        for row in pool.map(one, jobs):
            rows.append(row)
            click.echo(line(row))
    return rows


def reached(curve: list[dict], target_ms: float, budget_s: float) -> float:
    """Seconds until the curve's best is at or below `target_ms` (t5 where that is 1.05 x the
    best); the budget where it never is within it (a batch that ends past the budget does not count)."""
    return next((p["seconds"] for p in curve if p["best_ms"] is not None and p["best_ms"] <= target_ms
                 and p["seconds"] <= budget_s), budget_s)
