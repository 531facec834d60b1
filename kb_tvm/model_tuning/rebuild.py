"""Rebuild the tuned models of earlier runs from their candidate logs and time them with and
without CUDA graphs, on two sets of inputs checked against onnxruntime: what graphs bring to
each run's schedules, without tuning again.

    python -m kb_tvm.model_tuning.rebuild --model bert.onnx --precision fp16 --input-shape input_ids=1x128 \
        --log kb=kb-candidates.jsonl.gz --log stock=evolutionary-candidates.jsonl.gz --out rebuild.json

Each log's tasks get their fastest logged schedule where it beats the default one, as `kb-tvm
tune` chooses (the default schedules are timed here, on this machine). `--families 2m` also
searches the kernel families' kernels (kb_tvm/kernels) for the model's tasks for that long, where
a family serves the target and precision, and builds each log's model again with them as `kb-tvm
tune` tries them: where they beat its schedules alone ("LABEL+kernels winners") and all of them
("LABEL+kernels all"); the variants measured go to kernels.jsonl beside --out."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click


@click.command()
@click.option("--model", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32", show_default=True)
@click.option("--input-shape", "input_shapes", multiple=True, help="As for kb-tvm tune (repeatable).")
@click.option("--dim", "axes", multiple=True, metavar="AXIS=SIZE", help="As for kb-tvm tune (repeatable).")
@click.option("--exact-math", is_flag=True, help="As for kb-tvm tune: the logs' runs must have used the same math.")
@click.option("--target", default=None, help="As for kb-tvm tune.")
@click.option("--log", "logs", multiple=True, metavar="LABEL=PATH",
              help="A run's candidates.jsonl(.gz) (repeatable; none: the untuned build alone).")
@click.option("--families", "families_budget", default=None, metavar="BUDGET",
              help="Search the kernel families' kernels this long (e.g. 2m) and build each log with them too.")
@click.option("--out", required=True, type=click.Path(dir_okay=False))
def main(model, precision, input_shapes, axes, exact_math, target, logs, families_budget, out) -> None:
    """Rebuild tuned models from candidate logs; time them with and without CUDA graphs. Exits 1
    if any build's outputs miss onnxruntime's."""
    from ..budget import TuningBudget
    from ..measure.targets import make_target, use_target_cores
    from ..kernels import FAMILIES, applicable, model_stage
    from ..kernels.extern import constant_inputs
    from . import (
        TOLERANCES,
        better_than_default,
        build,
        example_inputs,
        load_onnx,
        math_for,
        onnxruntime_outputs,
        parse_dim,
        parse_input_shape,
        profile_kernels,
        run_and_time,
    )
    from .precision import compare_sets, model_space
    from .relax_build import model_tasks, relax_module
    from .replay import records_from_candidates

    tvm_target = make_target(target)
    use_target_cores(tvm_target)  # timed on the threads the tune timed on
    if families_budget is not None and not applicable(tvm_target, precision):
        raise click.UsageError("--families: no kernel family serves this target and precision ("
                               + "; ".join(f"{f.name}: {f.applies(tvm_target, precision)}" for f in FAMILIES) + ")")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    onnx_model = load_onnx(model, dict(parse_input_shape(text) for text in input_shapes),
                           dict(parse_dim(text) for text in axes))
    math = math_for(tvm_target, exact=exact_math)
    mod = relax_module(onnx_model, tvm_target, precision=precision, math=math)  # as the tune made its tasks
    tasks = model_tasks(mod, tvm_target)
    input_sets = [example_inputs(onnx_model), example_inputs(onnx_model, seed=1)]
    references = [onnxruntime_outputs(onnx_model, inputs)[0] for inputs in input_sets]
    tolerance = TOLERANCES[precision]
    result: dict = {"model": str(model), "precision": precision, "math": math, "target": str(tvm_target.export()), "builds": {}}

    def timed(label: str, database, kernels=()) -> None:
        for graphs in (True, False) if tvm_target.kind.name == "cuda" else (False,):
            outputs, seconds = run_and_time(build(mod, tvm_target, database, cuda_graph=graphs, kernels=kernels),
                                            tvm_target, input_sets)
            why, worst_error = compare_sets(references, outputs, tolerance)
            entry = {"latency_ms": seconds * 1e3, "numerics_ok": why is None, "mismatch": why,
                     "max_abs_error": worst_error}
            result["builds"][f"{label}, {'graphs' if graphs else 'no graphs'}"] = entry
            click.echo(f"{label:>10} {'graphs' if graphs else 'no graphs':>9}: {seconds * 1e3:.4f} ms"
                       + ("" if why is None else f"  MISMATCH {why}"))
        Path(out).write_text(json.dumps(result, indent=1))

    untuned = build(mod, tvm_target)
    default_latency = profile_kernels(untuned, tvm_target, tasks)
    timed("untuned", None)
    found = {}
    if families_budget is not None:
        started = time.perf_counter()
        found = model_stage.search_kernels(tasks, untuned, tvm_target, precision=precision,
                                           budget=TuningBudget(families_budget).start(), work_dir=Path(out).parent,
                                           default_latency=default_latency, constants=constant_inputs(mod), share=1.0,
                                           notify=lambda e: click.echo(json.dumps(e)))
        result["families"] = {"seconds": time.perf_counter() - started,
                              "found": {n: {"seconds": c.seconds, "default_s": default_latency[n],
                                            "family": c.family.name, "variant": c.family.describe(c.params)}
                                        for n, c in found.items()}}
    for text in logs:
        label, _, path = text.partition("=")
        records = records_from_candidates(path, tasks, tvm_target, model_space(tvm_target, precision))
        chosen, used = better_than_default(records, tasks, tvm_target, default_latency)
        result.setdefault("tuned_tasks", {})[label] = sum(used[n] < default_latency[n] for n in used)
        timed(label, chosen)
        for option in model_stage.options(found, used)[1:]:  # as `kb-tvm tune` tries them
            tag = "all" if len(option) == len(found) else "winners"
            result.setdefault("family_tasks", {})[f"{label}+kernels {tag}"] = [c.task for c in option]
            timed(f"{label}+kernels {tag}", chosen, [c.kernel() for c in option])
    if not all(entry["numerics_ok"] for entry in result["builds"].values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
