"""Side-by-side whole-model benchmark: `kb-tvm tune` with kb vs stock MetaSchedule on the same
model, machine and wall budget.

    python benchmarks/model_side_by_side.py --model workloads/transformer_block.onnx --budget 5m \
        --target llvm --out cpu-model

With two or more GPUs the two runs go side by side, one GPU and half the CPUs each (same
hardware, same clock); otherwise one after the other. Each run's log, report.json, report.md
and latency.png land under --out, and summary.json compares the end-to-end latencies: each
run's own, and both libraries timed again in turns in one process (`in_turns_ms`), the number
to compare on a machine whose speed drifts.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

STRATEGIES = ("kb", "evolutionary")


def gpu_count() -> int:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listed.splitlines() if line.startswith("GPU "))


def run_side_by_side(commands: dict[str, list[str]], out: Path, *, on_gpus: bool) -> tuple[dict[str, int], bool]:
    """Runs two commands, logging to out/LABEL.log: at the same time on one GPU and half the
    CPUs each when `on_gpus` and two GPUs are visible, else one after the other. Returns
    (label -> exit code, whether they ran at the same time)."""
    parallel = on_gpus and gpu_count() >= 2
    cpus = sorted(os.sched_getaffinity(0))
    halves = [cpus[: len(cpus) // 2], cpus[len(cpus) // 2:]]
    procs = {}
    for index, (label, command) in enumerate(commands.items()):
        env = dict(os.environ)
        if parallel:  # the same hardware for both, at the same time
            env["CUDA_VISIBLE_DEVICES"] = str(index)
            command = ["taskset", "-c", ",".join(map(str, halves[index]))] + command
        log = open(out / f"{label}.log", "w")  # noqa: SIM115 - closed when the run ends
        click.echo(f"start {label}: {' '.join(command)}")
        procs[label] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log)
        if not parallel:
            procs[label][0].wait()
    for proc, log in procs.values():
        proc.wait()
        log.close()
    return {label: proc.returncode for label, (proc, _) in procs.items()}, parallel


def _command(model, strategy, budget, target, work_dir, seed, trials_per_batch, precision,
             input_shapes, cuda_graph, exact_math=False, experience=True) -> list[str]:
    command = [sys.executable, "-m", "kb_tvm.cli", "tune", str(model), "--budget", budget, "--strategy", strategy,
               "--work-dir", str(work_dir), "--seed", str(seed), "--precision", precision,
               "--cuda-graph" if cuda_graph else "--no-cuda-graph"]
    for shape in input_shapes:
        command += ["--input-shape", shape]
    if exact_math:
        command.append("--exact-math")
    if not experience:
        command.append("--no-experience")
    if target:
        command += ["--target", target]
    if trials_per_batch:
        command += ["--trials-per-batch", str(trials_per_batch)]
    return command


def time_in_turns(libraries: dict[str, Path], model, input_shapes, target: str | None, rounds: int = 8) -> dict:
    """Median seconds per call of each tuned library, timed in turns in one process on one
    device: each run's own end-to-end timing was taken minutes apart, and this VM's CPU drifts
    by 15% over minutes (seen: a 15% margin between runs that was 4% the other way in turns)."""
    import numpy as np
    import tvm
    from tvm import relax

    from kb_tvm.measure.targets import make_target, use_target_cores
    from kb_tvm.model_tuning import example_inputs, load_onnx, parse_input_shape

    tvm_target = make_target(target)
    use_target_cores(tvm_target)  # on CPUs, the threads both runs were timed on
    device = tvm.cuda(0) if tvm_target.kind.name == "cuda" else tvm.cpu(0)
    inputs = example_inputs(load_onnx(model, dict(parse_input_shape(text) for text in input_shapes)))
    machines = {}
    for label, path in libraries.items():
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), device)
        vm.set_input("main", *[tvm.runtime.tensor(a, device) for a in inputs])
        vm["main"](*[tvm.runtime.tensor(a, device) for a in inputs])  # warm up (and capture CUDA graphs)
        machines[label] = vm
    times: dict[str, list[float]] = {label: [] for label in machines}
    for _ in range(rounds):
        for label, vm in machines.items():
            timer = vm.time_evaluator("invoke_stateful", device, number=5, repeat=5, min_repeat_ms=50)
            times[label].append(float(np.median(timer("main").results)))
    return {label: float(np.median(t)) for label, t in times.items()}


@click.command()
@click.option("--model", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--budget", default="5m", show_default=True)
@click.option("--target", default=None, help="As for kb-tvm tune.")
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--seed", default=0, show_default=True)
@click.option("--trials-per-batch", type=int, default=None)
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32", show_default=True)
@click.option("--input-shape", "input_shapes", multiple=True, help="As for kb-tvm tune (repeatable).")
@click.option("--work-root", type=click.Path(file_okay=False), default=None,
              help="Where the two work dirs go (records, model.so). Default: --out.")
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True, help="As for kb-tvm tune.")
@click.option("--exact-math", is_flag=True, help="As for kb-tvm tune.")
@click.option("--no-experience", is_flag=True,
              help="As for kb-tvm tune: kb starts cold, without what earlier tunes on this machine left.")
def main(model, budget, target, out, seed, trials_per_batch, precision, input_shapes, work_root,
         cuda_graph, exact_math, no_experience) -> None:
    """Tune MODEL with kb and with stock MetaSchedule at the same budget; compare."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    commands = {}
    for strategy in STRATEGIES:
        work_dir = Path(work_root or out) / f"work-{strategy}"
        shutil.rmtree(work_dir, ignore_errors=True)
        commands[strategy] = _command(model, strategy, budget, target, work_dir, seed, trials_per_batch,
                                      precision, input_shapes, cuda_graph, exact_math, experience=not no_experience)
    exit_codes, parallel = run_side_by_side(commands, out, on_gpus=target != "llvm")
    cpus = len(os.sched_getaffinity(0))
    summary = {"model": str(model), "budget": budget, "target": target, "precision": precision,
               "exact_math": exact_math, "experience": not no_experience,
               "side_by_side": parallel,
               "cpus_each": cpus // 2 if parallel else cpus, "runs": {}}
    for strategy, exit_code in exit_codes.items():
        work_dir = Path(work_root or out) / f"work-{strategy}"
        report_path = work_dir / "report.json"
        if report_path.exists():
            report = json.loads(report_path.read_text())
            for name in ("report.json", "report.md", "latency.png"):
                shutil.copy(work_dir / name, out / f"{strategy}-{name}")
            # every measured candidate, kept as data, and the records, to rebuild the model without tuning
            for name in ("candidates.jsonl", "database_tuning_record.json", "database_workload.json"):
                if (work_dir / name).exists():
                    with open(work_dir / name, "rb") as src, gzip.open(out / f"{strategy}-{name}.gz", "wb") as dst:
                        shutil.copyfileobj(src, dst)
            summary["runs"][strategy] = {k: report[k] for k in (
                "latency_untuned_ms", "latency_tuned_ms", "latency_tuned_without_cuda_graph_ms", "speedup",
                "seconds_spent", "trials", "numerics") if k in report}
        summary["runs"].setdefault(strategy, {})["exit_code"] = exit_code
    kb, stock = summary["runs"]["kb"], summary["runs"]["evolutionary"]
    if "latency_tuned_ms" in kb and "latency_tuned_ms" in stock:
        summary["kb_over_stock"] = kb["latency_tuned_ms"] / stock["latency_tuned_ms"]
        in_turns = time_in_turns({s: Path(work_root or out) / f"work-{s}" / "model.so" for s in STRATEGIES},
                                 model, input_shapes, target)
        summary["in_turns_ms"] = {s: seconds * 1e3 for s, seconds in in_turns.items()}
        summary["kb_over_stock_in_turns"] = in_turns["kb"] / in_turns["evolutionary"]
    summary["wall_s"] = time.time() - started
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    click.echo(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
