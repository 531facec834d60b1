"""Warm vs cold, side by side: tune a workload with the experience of a similar one, and
without, at the same budget.

    python benchmarks/warm_vs_cold.py --prime gemm-512 --workload gemm-768x512x640 --budget 60s \
        --target llvm --out cpu-warm

First the prime workload is tuned into a fresh library (--prime-budget), then the workload
cold (--no-experience) and warm (that library). With two or more GPUs, cold and warm run at
the same time, one GPU and half the CPUs each; otherwise cold first, then warm. summary.json
holds both curves, both re-timed bests, and when warm reached cold's final latency.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

from model_side_by_side import run_side_by_side  # a harness beside this one (benchmarks/)
from side_by_side import time_to_reach


def _tune_op(name, budget, target, work_dir, json_out, experience_args, seed) -> list[str]:
    command = [sys.executable, "-m", "kb_tvm.cli", "tune-op", name, "--budget", budget, "--work-dir", str(work_dir),
               "--json-out", str(json_out), "--seed", str(seed), *experience_args]
    return command + (["--target", target] if target else [])


@click.command()
@click.option("--prime", default=None, help="The workload tuned first, into a fresh library.")
@click.option("--library", type=click.Path(exists=True, file_okay=False), default=None,
              help="Instead of --prime: warm-start from (a copy of) this library.")
@click.option("--workload", required=True, help="The similar workload tuned warm and cold.")
@click.option("--budget", default="60s", show_default=True)
@click.option("--prime-budget", default=None, help="Default: --budget.")
@click.option("--target", default=None)
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--seed", default=0, show_default=True)
def main(prime, library, workload, budget, prime_budget, target, out, seed) -> None:
    """Tune PRIME into a fresh library (or take --library), then WORKLOAD cold and warm at the
    same budget."""
    if (prime is None) == (library is None):
        raise click.UsageError("give --prime or --library")
    out = Path(out)
    shutil.rmtree(out / "library", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    started = time.time()
    if library is not None:
        shutil.copytree(library, out / "library")
    library = out / "library"
    if prime is not None:
        prime_run = subprocess.run(_tune_op(prime, prime_budget or budget, target, work / "prime", out / "prime.json",
                                            ["--experience", str(library)], seed), capture_output=True, text=True)
        (out / "prime.log").write_text(prime_run.stdout + prime_run.stderr)
        if prime_run.returncode:
            raise click.ClickException(f"priming {prime} failed; see {out / 'prime.log'}")
    runs = {"cold": ["--no-experience"], "warm": ["--experience", str(library)]}
    _, parallel = run_side_by_side(
        {label: _tune_op(workload, budget, target, work / label, out / f"{label}.json", args, seed)
         for label, args in runs.items()}, out, on_gpus=target != "llvm")
    results = {label: json.loads((out / f"{label}.json").read_text()) for label in runs
               if (out / f"{label}.json").exists()}
    summary = {"prime": prime, "library": None if prime else "given", "workload": workload, "budget": budget, "target": target, "side_by_side": parallel,
               "wall_s": time.time() - started}
    for label, result in results.items():
        summary[label] = {"final_ms": result["final_ms"], "trials": result["trials"], "seconds": result["seconds"]}
    if {"cold", "warm"} <= set(results):
        cold, warm = results["cold"], results["warm"]
        cold_best = min(p["best_ms"] for p in cold["curve"] if p["best_ms"] is not None)
        reached = time_to_reach(warm["curve"], cold_best)
        summary["cold_best_measured_ms"] = cold_best
        summary["warm_reached_cold_best_s"] = reached
        summary["warm_reached_cold_best_fraction"] = None if reached is None else reached / cold["budget_s"]
        summary["warm_over_cold"] = warm["final_ms"] / cold["final_ms"]
        summary["warm_first_batch_best_ms"] = next((p["best_ms"] for p in warm["curve"] if p["best_ms"]), None)
        summary["cold_first_batch_best_ms"] = next((p["best_ms"] for p in cold["curve"] if p["best_ms"]), None)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    click.echo(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
