"""What a trial costs: MetaSchedule's LocalBuilder/LocalRunner against kb's KBBuilder/KBRunner,
on the same candidates, and how far each one's recorded latencies are from a careful re-timing.

    python benchmarks/pipeline_cost.py --workload gemm-512 --target llvm --sizes 4,16,32 \
        --out pipeline-cpu.json

One pool of candidates is sampled from the workload's design space (the tensor-core space for
the fp16 GEMMs on cuda). For each batch size, each pipeline builds and measures the first N of
them (the two alternate, so drift hits both). Each pipeline's first batch (its workers start) is
reported apart; a least-squares line through the other batches splits wall seconds into a fixed
cost per batch and a cost per candidate. Fidelity: the 10 fastest candidates of the largest batch
are rebuilt and re-timed in this process (median of 10 repeats x 5 calls), against what each
pipeline recorded for them. On a GPU kb's builder streams (each candidate is timed as soon as it
is built), so its "build" seconds include the measurements that overlapped the builds.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from pathlib import Path

import click
import numpy as np


def sample_candidates(workload, target, count: int, seed: int):
    """`count` valid candidates of the workload's design space, as MetaSchedule's ReplayTrace draws them."""
    from tvm.s_tir import meta_schedule as ms

    from common import design_space  # benchmarks/common.py
    from kb_tvm.measure.targets import physical_cores

    context = ms.TuneContext(mod=workload.module(), target=target, space_generator=design_space(workload, target),
                             search_strategy=ms.search_strategy.ReplayTrace(), task_name=workload.name,
                             rand_state=seed, num_threads=physical_cores())
    spaces = context.generate_design_space()
    strategy = context.search_strategy
    strategy.pre_tuning(count, count, spaces, ms.database.MemoryDatabase(), None)
    candidates = []
    while len(candidates) < count:
        more = strategy.generate_measure_candidates()
        if not more:
            break
        candidates.extend(more)
    strategy.post_tuning()
    return candidates[:count]


def measure_batch(builder, runner, candidates, target) -> dict:
    """Build and measure one batch as MetaSchedule's task scheduler does; its seconds and latencies."""
    from tvm.s_tir import meta_schedule as ms

    device = "cuda" if target.kind.name == "cuda" else "cpu"
    started = time.perf_counter()
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in candidates])
    after_build = time.perf_counter()
    inputs = [ms.runner.RunnerInput(b.artifact_path, device, c.args_info)
              for b, c in zip(built, candidates) if b.error_msg is None]
    results = [f.result() for f in runner.run(inputs)]
    finished = time.perf_counter()
    latencies, index = [], 0
    for b in built:  # one latency (mean of what was recorded) or None per candidate, in order
        if b.error_msg is not None:
            latencies.append(None)
            continue
        r = results[index]
        index += 1
        latencies.append(None if r.error_msg else float(np.mean([float(s) for s in r.run_secs])))
        shutil.rmtree(os.path.dirname(str(b.artifact_path)), ignore_errors=True)
    batch = {"size": len(candidates), "wall_s": finished - started, "build_s": after_build - started,
             "run_s": finished - after_build, "latencies_s": latencies}
    if hasattr(runner, "measurer"):  # kb's: what each step cost inside its workers
        batch["worker_build_s"] = [o.seconds for o in builder.last_batch]
        batch["measure_reports"] = [o.value for o in runner.last_batch]
    return batch


def split_costs(batches: list[dict]) -> dict:
    """Least squares wall = fixed + per_candidate x size over the warm batches."""
    sizes = np.array([b["size"] for b in batches], dtype=float)
    walls = np.array([b["wall_s"] for b in batches], dtype=float)
    if len(set(sizes)) < 2:
        return {"fixed_s": None, "per_candidate_s": None}
    per, fixed = np.polyfit(sizes, walls, 1)
    return {"fixed_s": float(fixed), "per_candidate_s": float(per)}


def retime(candidate, target, repeat: int = 10, number: int = 5) -> float:
    import tvm

    from kb_tvm.measure.targets import compile_kernel
    from kb_tvm.measure.timer import activation_like

    library = compile_kernel(candidate.sch.mod, target)
    device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    args = [tvm.runtime.tensor(activation_like(a.shape, str(a.dtype), seed=index), device)
            for index, a in enumerate(candidate.args_info)]
    timer = library.mod.time_evaluator("main", device, number=number, repeat=repeat, min_repeat_ms=0)
    return float(np.median(timer(*args).results))


def fidelity(candidates, recorded: list[float | None], target, top: int = 10, rounds: int = 3) -> dict:
    """Recorded vs re-timed latency for the `top` fastest candidates. The reference is the median
    of `rounds` re-timings (each a fresh build and fresh arguments); their own spread is the
    machine's noise floor, reported beside the differences."""
    ranked = sorted((s, i) for i, s in enumerate(recorded) if s is not None)[:top]
    rows = []
    for seconds, index in ranked:
        again = [retime(candidates[index], target) for _ in range(rounds)]
        reference = statistics.median(again)
        rows.append({"candidate": index, "recorded_s": seconds, "retimed_s": again,
                     "relative_difference": seconds / reference - 1.0,
                     "retime_spread": (max(again) - min(again)) / reference})
    diffs = sorted(abs(r["relative_difference"]) for r in rows)
    return {"rows": rows, "median_abs": statistics.median(diffs) if diffs else None,
            "max_abs": diffs[-1] if diffs else None,
            "within_3_percent": sum(d <= 0.03 for d in diffs), "count": len(diffs),
            "retime_spread_median": statistics.median(r["retime_spread"] for r in rows) if rows else None}


def make_pipelines(target, names=("stock", "kb")) -> dict:
    """The named pipelines' builders and runners as a tune makes them (kb's streams on a GPU)."""
    from kb_tvm.tuning import default_builder, default_runner

    pipelines = {}
    for name in names:
        runner = default_runner(target, name)
        streams = runner if name == "kb" and target.kind.name == "cuda" else None
        pipelines[name] = (default_builder(target, name, stream_to=streams), runner)
    return pipelines


@click.command()
@click.option("--workload", "workload_name", default="gemm-512", show_default=True)
@click.option("--target", default="llvm", show_default=True)
@click.option("--sizes", default="4,16,32", show_default=True, help="Batch sizes, comma-separated.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--pipelines", default="stock,kb", show_default=True, help="Which to measure, comma-separated.")
@click.option("--out", type=click.Path(dir_okay=False), required=True)
def main(workload_name, target, sizes, seed, pipelines, out) -> None:
    from kb_tvm.measure.targets import describe, make_target
    from kb_tvm.workloads import get_workload

    tvm_target = make_target(target)
    workload = get_workload(workload_name)
    sizes = [int(s) for s in sizes.split(",")]
    started = time.perf_counter()
    candidates = sample_candidates(workload, tvm_target, max(sizes), seed)
    click.echo(f"{len(candidates)} candidates of {workload_name} on {describe(tvm_target)} "
               f"sampled in {time.perf_counter() - started:.1f}s")
    report = {"workload": workload_name, "target": dict(tvm_target.export()), "sizes": sizes, "seed": seed,
              "pipelines": {}}
    pipelines = make_pipelines(tvm_target, [name for name in ("stock", "kb") if name in pipelines.split(",")])
    batches = {name: [] for name in pipelines}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    for size in [sizes[0]] + sizes:  # the first round is each pipeline's cold start
        for name, (builder, runner) in pipelines.items():
            batch = measure_batch(builder, runner, candidates[:size], tvm_target)
            batches[name].append(batch)
            ok = sum(s is not None for s in batch["latencies_s"])
            click.echo(f"{name:5} batch of {size:3}: {batch['wall_s']:6.2f}s (build {batch['build_s']:.2f}s, "
                       f"run {batch['run_s']:.2f}s), {ok} measured")
            Path(out).write_text(json.dumps({**report, "unfinished_batches": batches}, indent=1, default=str))
    for name in sorted(pipelines, key=lambda n: n != "kb"):  # kb's fidelity first: it is quicker
        builder, runner = pipelines[name]
        cold, *warm = batches[name]
        largest = warm[-1]
        report["pipelines"][name] = {
            "cold_batch": {k: cold[k] for k in ("size", "wall_s", "build_s", "run_s")},
            "batches": warm, **split_costs(warm),
            "per_candidate_at_largest_s": largest["wall_s"] / largest["size"],
            "fidelity": fidelity(candidates[:largest["size"]], largest["latencies_s"], tvm_target),
        }
        if name == "kb":
            builder.close()
            runner.close()
        Path(out).write_text(json.dumps(report, indent=1, default=str))  # what is done so far
        summary = report["pipelines"][name]
        click.echo(f"{name:5}: fixed {summary['fixed_s']:.2f}s/batch, {summary['per_candidate_s']:.3f}s/candidate, "
                   f"cold batch {cold['wall_s']:.1f}s; fidelity median |diff| "
                   f"{summary['fidelity']['median_abs']:.1%}, max {summary['fidelity']['max_abs']:.1%}, "
                   f"{summary['fidelity']['within_3_percent']}/{summary['fidelity']['count']} within 3% "
                   f"(re-timings' own spread: median {summary['fidelity']['retime_spread_median']:.1%})")


if __name__ == "__main__":
    main()
