"""Side-by-side benchmark: kb vs stock MetaSchedule on the same workload, machine and budget.

    python benchmarks/side_by_side.py --workload gemm-512 --workload conv2d-56x56x64 --budget 120s \
        --target llvm --out cpu.json

--runs names the runs as STRATEGY@PIPELINE (kb or evolutionary, on kb's or stock's measurement
pipeline): "kb@kb,evolutionary@stock,evolutionary@kb" separates the search from the pipeline.
The runs go one after the other in one process, or with --side-by-side at the same time, each
in its own process on its own GPU and an equal share of the CPU cores (two GPUs: kb on one, stock
on the other, so neither sees a quieter machine). The JSON holds every anytime curve
(best latency vs seconds), the re-timed best of each, and how long kb took to reach stock's
final latency; beside it, every measured candidate of each run (`*-candidates.jsonl.gz`; a kernel
family's variants, which kb measures first, in `*-kernels.jsonl`). It
is rewritten after every batch, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from kb_tvm.budget import format_seconds


def time_to_reach(curve: list[dict], target_ms: float) -> float | None:
    """Seconds until the curve's best got to target_ms, or None if it never did."""
    for point in curve:
        if point["best_ms"] is not None and point["best_ms"] <= target_ms:
            return point["seconds"]
    return None


def best_at(curve: list[dict], seconds: float) -> float | None:
    best = None
    for point in curve:
        if point["seconds"] <= seconds and point["best_ms"] is not None:
            best = point["best_ms"]
    return best


def summarize(runs: dict[str, dict], kb_run: str = "kb", stock_run: str = "evolutionary") -> dict:
    kb, stock = runs.get(kb_run), runs.get(stock_run)
    if not kb or not stock or not kb.get("done") or not stock.get("done"):
        return {}
    stock_final = stock["curve"][-1]["best_ms"] if stock["curve"] else None
    reach = time_to_reach(kb["curve"], stock_final) if stock_final else None
    return {
        "kb_final_ms": kb["final_ms"], "stock_final_ms": stock["final_ms"],
        "kb_vs_stock": (kb["final_ms"] / stock["final_ms"]) if kb["final_ms"] and stock["final_ms"] else None,
        "stock_best_during_tuning_ms": stock_final,
        "kb_seconds_to_reach_stock_best": reach,
        "kb_reach_fraction_of_budget": None if reach is None else reach / kb["budget_s"],
        "kb_failed_fraction": kb["failed"] / max(kb["trials"], 1),
        "stock_failed_fraction": stock["failed"] / max(stock["trials"], 1),
        "best_at_quarters_ms": {
            name: [best_at(run["curve"], q * run["budget_s"]) for q in (0.25, 0.5, 0.75, 1.0)]
            for name, run in ((kb_run, kb), (stock_run, stock))
        },
    }


@click.command()
@click.option("--workload", "workloads", multiple=True, required=True, help="A name from `kb-tvm ops`.")
@click.option("--budget", default="120s", show_default=True, help="Wall budget for each strategy.")
@click.option("--target", default=None, help="llvm, cuda or a JSON target (default: cuda if present).")
@click.option("--runs", "order", default="kb@kb,evolutionary@stock", show_default=True,
              help="The runs, in order, as STRATEGY@PIPELINE.")
@click.option("--trials-per-batch", type=int, default=None, help="Same for both strategies.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--side-by-side", is_flag=True,
              help="Run the runs at the same time, one GPU and an equal share of the cores each.")
@click.option("--cores", default=None, hidden=True, help="CPU cores to run on, comma-separated (side-by-side parts).")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="JSON results file.")
def main(workloads, budget, target, order, trials_per_batch, seed, side_by_side, cores, out) -> None:
    from kb_tvm.kernels.task_search import FILE_NAME as KERNELS_FILE
    from kb_tvm.measure.candidate_log import FILE_NAME, CandidateLog
    from kb_tvm.measure.targets import make_target
    from kb_tvm.tuning import PIPELINES, STRATEGIES, tune_operator
    from kb_tvm.workloads import get_workload

    if cores:
        os.sched_setaffinity(0, [int(c) for c in cores.split(",")])
    tvm_target = make_target(target)
    labels = [s.strip() for s in order.split(",")]
    for label in labels:
        strategy, _, pipeline = label.partition("@")
        if strategy not in STRATEGIES or pipeline not in PIPELINES:
            raise click.BadParameter(f"{label!r}: use STRATEGY@PIPELINE with a strategy of "
                                     f"{'/'.join(STRATEGIES)} and a pipeline of {'/'.join(PIPELINES)}")
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    report = {"target": str(tvm_target.export()), "budget": budget, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "workloads": {}}

    def save() -> None:
        out_path.write_text(json.dumps(report, indent=1))

    if side_by_side:
        run_side_by_side(workloads, labels, tvm_target, report, out_path,
                         ["--budget", budget, "--seed", str(seed), "--target", target or tvm_target.kind.name]
                         + (["--trials-per-batch", str(trials_per_batch)] if trials_per_batch else []))
        return

    for name in workloads:
        workload = get_workload(name)
        runs: dict[str, dict] = {}
        report["workloads"][name] = {"flops": workload.flops, "runs": runs, "summary": {}}
        for label in labels:
            strategy, _, pipeline = label.partition("@")
            runs[label] = {"curve": [], "done": False}

            def progress(point, label=label, runs=runs, name=name):
                runs[label]["curve"].append(point)
                click.echo(f"{name} {label:>18} [{format_seconds(point['seconds']):>7}] trials "
                           f"{point['trials']:4d} failed {point['failed']:4d} best {point['best_ms']}")
                save()

            with tempfile.TemporaryDirectory(prefix=f"kb-bench-{name}-{strategy}-") as work_dir:
                tuning_from = time.time()  # epoch seconds: side-by-side runs can be shown to overlap
                result = tune_operator(workload, target=tvm_target, budget=budget, work_dir=work_dir,
                                       strategy=strategy, pipeline=pipeline, trials_per_batch=trials_per_batch,
                                       seed=seed, on_progress=progress, quiet=True)
                tuning_to = time.time()
                beside = f"{out_path.stem}-{name}-{label.replace('@', '-')}"  # files kept beside the JSON
                if strategy in ("kb", "agent"):  # the decision log
                    logs = sorted(Path(work_dir, "kb_logs").glob("*.jsonl"))
                    if logs:
                        out_path.with_name(f"{beside}-log.jsonl").write_text(logs[0].read_text())
                candidates = CandidateLog(Path(work_dir, FILE_NAME))  # kept as data (the replay env's)
                if candidates.path.exists():
                    candidates.compress_to(out_path.with_name(f"{beside}-candidates.jsonl.gz"))
                variants = Path(work_dir, KERNELS_FILE)  # a kernel family's, counted in the run's trials
                if variants.exists():
                    out_path.with_name(f"{beside}-{KERNELS_FILE}").write_text(variants.read_text())
            runs[label] = {**result.to_json(), "done": True, "tuning_from": tuning_from, "tuning_to": tuning_to}
            save()
            click.echo(f"{name} {label}: final {result.final_ms} ms, {result.trials} trials, "
                       f"{result.failed} failed, {format_seconds(result.seconds)}")
        report["workloads"][name]["summary"] = summaries(runs, labels)
        save()
        click.echo(json.dumps(report["workloads"][name]["summary"], indent=1))


def summaries(runs: dict[str, dict], labels: list[str]) -> dict:
    kb_runs = [label for label in labels if label.startswith("kb@")]
    return {f"{kb} vs {stock}": summarize(runs, kb, stock)
            for kb in kb_runs[:1] for stock in labels if stock.startswith("evolutionary@")}


def share_devices(runs: int, cpus: list[int], gpus: int | None) -> list[tuple[int | None, list[int]]]:
    """(GPU index or None, CPU cores) for each of `runs` side-by-side runs: a GPU each when
    there are GPUs, and the cores cut in equal contiguous shares."""
    if gpus is not None and gpus < runs:
        raise click.UsageError(f"--side-by-side needs a GPU per run: {runs} runs, {gpus} GPU(s) visible")
    share = len(cpus) // runs
    if share < 1:
        raise click.UsageError(f"--side-by-side needs a CPU core per run: {runs} runs, {len(cpus)} core(s)")
    return [(None if gpus is None else i, cpus[i * share:(i + 1) * share]) for i in range(runs)]


def visible_gpu(index: int, visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for the run on GPU `index` of those this process sees (`visible`,
    its own CUDA_VISIBLE_DEVICES: "2,3" makes index 0 the machine's GPU 2)."""
    ids = [part.strip() for part in visible.split(",")] if visible else []
    return ids[index] if index < len(ids) else str(index)


def run_side_by_side(workloads, labels, target, report: dict, out_path: Path, common: list[str]) -> None:
    """Each run in its own process at the same time; their JSONs merged into `report`."""
    gpus = None
    if target.kind.name == "cuda":
        import tvm

        gpus = sum(bool(tvm.cuda(i).exist) for i in range(16))
    shares = share_devices(len(labels), sorted(os.sched_getaffinity(0)), gpus)
    procs = []
    for label, (gpu, cores) in zip(labels, shares):
        part = out_path.with_name(f"{out_path.stem}-{label.replace('@', '-')}.json")
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
        command = [sys.executable, str(Path(__file__).resolve()), "--runs", label, "--out", str(part),
                   "--cores", ",".join(map(str, cores)), *common]
        command += [arg for name in workloads for arg in ("--workload", name)]
        click.echo(f"{label}: GPU {gpu}, cores {cores[0]}-{cores[-1]}")
        procs.append((label, part, subprocess.Popen(command, env=env)))
    for label, part, proc in procs:
        code = proc.wait()
        if code:
            click.echo(f"{label} exited with {code}; what it measured is kept", err=True)
    report["side_by_side"] = {label: {"gpu": gpu, "cores": len(cores)} for label, (gpu, cores) in zip(labels, shares)}
    for name in workloads:
        runs = {}
        for label, part, _ in procs:
            try:
                runs[label] = json.loads(part.read_text())["workloads"][name]["runs"][label]
            except (OSError, KeyError, json.JSONDecodeError):
                runs[label] = {"curve": [], "done": False}
        report["workloads"][name] = {"runs": runs, "summary": summaries(runs, labels)}
        click.echo(json.dumps(report["workloads"][name]["summary"], indent=1))
    out_path.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":  # pragma: no cover
    main()
