"""What kb's default CPU schedules (schedules/cpu_default.py) buy the tasks nobody tunes: a
model's untuned build with them and with TVM's unscheduled loops, each task's kernel timed in
both (kb's profile: the runner's timer on activation-like inputs), and both builds' outputs
compared.

    python benchmarks/cpu_default_schedules.py llama-small.onnx --input-shape input_ids=1x128 \
        --input-shape attention_mask=1x128 --out defaults-llama.json
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np


@click.command()
@click.argument("model_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--input-shape", "input_shapes", multiple=True, help="As for kb-tvm tune (repeatable).")
@click.option("--out", type=click.Path(dir_okay=False), required=True)
def main(model_path, input_shapes, out) -> None:
    """Time MODEL's tasks untuned, with and without kb's default CPU schedules."""
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.measure.targets import make_target, use_target_cores
    from kb_tvm.model_tuning import example_inputs, load_onnx, parse_input_shape, profile_kernels
    from kb_tvm.model_tuning.profiling import run_outputs
    from kb_tvm.model_tuning.relax_build import build, relax_module
    from kb_tvm.schedules import cpu_default

    target = make_target("llvm")
    threads = use_target_cores(target)
    model = load_onnx(model_path, dict(parse_input_shape(text) for text in input_shapes))
    mod = relax_module(model, target, precision="fp32", math="fast")
    tasks = ms.relax_integration.extract_tasks(mod, target)
    inputs = [example_inputs(model)]
    with_defaults = build(mod, target)
    rules = cpu_default.CpuReduction.apply, cpu_default.CpuFallback.apply
    cpu_default.CpuReduction.apply = cpu_default.CpuFallback.apply = lambda self, func, target, tunable: None
    try:
        unscheduled = build(mod, target)
    finally:
        cpu_default.CpuReduction.apply, cpu_default.CpuFallback.apply = rules
    difference = max(float(np.abs(a - b).max()) for a, b in
                     zip(run_outputs(with_defaults, target, inputs)[0], run_outputs(unscheduled, target, inputs)[0]))
    before, after = profile_kernels(unscheduled, target, tasks), profile_kernels(with_defaults, target, tasks)
    weight = {str(t.task_name): float(t.weight) for t in tasks}
    rows = sorted(({"task": name, "weight": weight[name], "unscheduled_ms": before[name] * 1e3,
                    "default_ms": after[name] * 1e3} for name in before),
                  key=lambda r: -r["weight"] * r["unscheduled_ms"])
    report = {"model": str(model_path), "threads": threads, "max_abs_output_difference": difference,
              "sum_weighted_ms": {"unscheduled": sum(r["weight"] * r["unscheduled_ms"] for r in rows),
                                  "default": sum(r["weight"] * r["default_ms"] for r in rows)},
              "tasks": rows}
    Path(out).write_text(json.dumps(report, indent=1))
    click.echo(f"outputs differ by at most {difference:.3g}")
    for r in rows:
        if abs(r["default_ms"] - r["unscheduled_ms"]) > 0.02 * r["unscheduled_ms"]:
            click.echo(f"{r['unscheduled_ms']:10.4f} -> {r['default_ms']:10.4f} ms  x{r['weight']:g}  {r['task'][:80]}")


if __name__ == "__main__":
    main()
