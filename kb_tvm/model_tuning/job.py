"""`kb-tvm tune MODEL.onnx` from start to end: the untuned build and profile, the tuning
run, the final build and the report; the steps themselves live in the sibling modules."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from ..allocation import TaskStats
from ..budget import TuningBudget
from ..kernels import model_stage
from ..kernels.extern import constant_inputs
from ..logger_guard import guard_metaschedule_logger
from ..measure.targets import register_tensor_intrinsics, use_target_cores
from .onnx_input import example_inputs, onnxruntime_outputs
from .numerics import NumericsMismatch, check_untuned
from .precision import TOLERANCES, check_precision, compare_sets, math_for, model_space
from .profiling import profile_kernels, run_and_time, time_in_turns
from .record_check import without, wrong_records
from .record_choice import better_than_default
from .relax_build import build, export_library, model_tasks, relax_module
from .report import (
    _task_row,
    device_seconds,
    latency_curve,
    plot_curve,
    report_markdown,
)
from .run_state import read_state, write_state
from .task_spaces import searchable_tasks, tune_contexts


def tune_model(
    model,
    *,
    name: str,
    target,
    budget: str | float,
    work_dir: str | Path,
    trials_per_batch: int | None = None,
    seed: int | None = None,
    repeatable: bool = False,
    strategy: str = "kb",
    pipeline: str = "kb",
    resume: bool = False,
    precision: str = "fp32",
    exact_math: bool = False,
    cuda_graph: bool = True,
    tune_anyway: bool = False,
    builder=None,
    runner=None,
    experience=None,
    on_event: Callable[[dict], None] | None = None,
) -> dict:
    """Tune every task of `model` (an onnx.ModelProto from `load_onnx`) within `budget`,
    export `work_dir/model.so`, write `report.json`, `report.md` and `latency.png`, and return
    the report. strategy "agent" steers kb's search with the trained agent (KBSearch's `agent`);
    "evolutionary" runs stock MetaSchedule instead (gradient task scheduler and EvolutionarySearch,
    stopped at the same wall budget), for side-by-side runs, and "random" the gradient scheduler
    with stock's uniform sampling (replay-trace).
    seed, repeatable: see KBSearch's options of those names.
    resume: continue an interrupted run in `work_dir` (kb and agent only): its records stay, its seconds
    count against the budget, and tasks it finished get no more. builder/runner: MetaSchedule's
    (e.g. an RPCRunner); default local, kb's persistent ones or stock's as `pipeline` says.
    experience: a kb_tvm.Experience to warm-start the tasks from and add their outcomes to (kb
    and agent only); None: cold. precision: "fp32", or "fp16"/"bf16" matmuls and convolutions with fp32
    accumulation (`precision.py`), checked against onnxruntime within that precision's tolerance,
    on two different sets of inputs. exact_math: keep libm's erf, exp, tanh, sigmoid and softmax on CPUs,
    where they are otherwise TVM's fast approximations (`precision.math_for`). cuda_graph: on CUDA, the builds launch their kernels as CUDA
    graphs (`relax_build.build`); the report also gives the tuned latency without them.
    Before the budget starts, the untuned build is checked against onnxruntime (`numerics`): on a
    mismatch NumericsMismatch names the first diverging operator, unless `tune_anyway`."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    from ..kernels.task_search import local_device, task_output
    from ..measure.callbacks import CandidateRecorder, ProgressRecorder
    from ..measure.candidate_log import FILE_NAME, CandidateLog
    from ..measure.ceiling import host_ceiling, task_ceilings
    from ..measure.database import RecordDatabase
    from ..measure.runner import KBRunner
    from ..search.task_scheduler import KBTaskScheduler
    from ..tuning import KB_STRATEGIES, PIPELINES, check_strategy, make_search, measurement_pipeline, parallel_builds

    check_strategy(strategy)
    if pipeline not in PIPELINES:  # before the untuned build and the profile, not after them
        raise ValueError(f"unknown pipeline {pipeline!r}: use one of {', '.join(PIPELINES)}")
    work_dir = Path(work_dir)
    threads = use_target_cores(target)  # before the untuned build runs: every timing on the same threads
    check_precision(precision)
    math = math_for(target, exact=exact_math)
    earlier = read_state(work_dir, name=name, resume=resume, strategy=strategy, precision=precision, math=math)
    mod = relax_module(model, target, precision=precision, math=math, kernels=strategy in KB_STRATEGIES)
    input_sets = [example_inputs(model), example_inputs(model, seed=1)]
    notify = on_event or (lambda record: None)
    by_onnxruntime = [onnxruntime_outputs(model, inputs) for inputs in input_sets]
    untuned = build(mod, target, cuda_graph=cuda_graph)
    untuned_outputs, untuned_latency = run_and_time(untuned, target, input_sets)
    preflight = None  # without onnxruntime the untuned build is the reference
    if by_onnxruntime[0][0] is not None:  # a wrong build stays wrong however long it is tuned
        preflight = check_untuned(model, input_sets, untuned_outputs, [outputs for outputs, _ in by_onnxruntime],
                                  by_onnxruntime[0][1], target=target, precision=precision, math=math)
        notify({"event": "numerics", "line": preflight.line(), "ok": preflight.ok,
                "constant_reference": preflight.constant_reference})
        if not preflight.ok and not tune_anyway:
            raise NumericsMismatch(preflight)
    tasks = model_tasks(mod, target, views_left_out=strategy in KB_STRATEGIES)
    work_dir.mkdir(parents=True, exist_ok=True)
    default_latency = profile_kernels(untuned, target, tasks)
    notify({"event": "untuned", "latency_ms": untuned_latency * 1e3})
    ceiling = host_ceiling(target)  # what this machine allows each task (CPUs; measured once, kept)
    task_flop = {str(t.task_name): estimate_tir_flops(t.dispatched[0]) for t in tasks}
    ceilings = task_ceilings(ceiling, {str(t.task_name): t.dispatched[0] for t in tasks})

    register_tensor_intrinsics()  # before the clock
    space = model_space(target, precision)
    searchable, rescued, why_rescued, refused = searchable_tasks(tasks, space)
    for task_name, why in why_rescued.items():
        notify({"event": "space_fallback", "task": task_name, "why": why})
    for task_name, why in refused.items():
        notify({"event": "space_refused", "task": task_name, "why": why})
    tuning_budget = TuningBudget(budget, already_spent=earlier["spent_s"] if earlier else 0.0).start()
    if earlier:
        notify({"event": "resume", "spent_s": earlier["spent_s"], "tasks": len(earlier["tasks"])})
    batches: list[dict] = list(earlier.get("batches", [])) if earlier else []

    def save_state() -> None:
        write_state(work_dir, name=name, precision=precision, math=math, budget=tuning_budget,
                    tasks=scheduler.stats, batches=batches)

    def emit(record: dict) -> None:  # every scheduler decision also saves the job's state
        save_state()
        notify(record)

    def measured(point: dict) -> None:
        batches.append({"seconds": tuning_budget.spent, "task": point["task"], "best_ms": point["batch_best_ms"]})

    is_cuda = target.kind.name == "cuda"
    found = {}  # the kernel families' best right kernel per task one computes (kb only)
    uses_kb = strategy in KB_STRATEGIES
    if uses_kb:
        found = model_stage.search_kernels(tasks, untuned, target, precision=precision, budget=tuning_budget,
                                           work_dir=work_dir, default_latency=default_latency,
                                           constants=constant_inputs(mod), notify=notify)
    searchable, rescued = model_stage.left_to_search(searchable, found), model_stage.left_to_search(rescued, found)
    # the scheduler starts from what each task has now: a family's kernel already makes its task fast
    current_latency = {name: min(seconds, found[name].seconds) if name in found else seconds
                       for name, seconds in default_latency.items()}
    database = RecordDatabase(work_dir=work_dir)
    recorder = ProgressRecorder(on_progress=measured)
    with measurement_pipeline(target, pipeline, builder, runner, budget=tuning_budget) as (builder, runner), \
            guard_metaschedule_logger():
        if uses_kb:  # with a KBRunner on several devices, several tasks' batches at once
            scheduler = KBTaskScheduler(budget=tuning_budget, on_event=emit, default_latency=current_latency,
                                        earlier=[TaskStats(**t) for t in earlier["tasks"]] if earlier else None,
                                        experience=experience,
                                        runner=runner if isinstance(runner, KBRunner) else None,
                                        ceilings=ceilings, ceiling_source=ceiling and ceiling.describe())
        else:
            scheduler = "gradient"
        # a family's kernel is each such task's bar, as in tune-op: gains count below it
        search, cost_model = make_search(strategy, tuning_budget, seed=seed, repeatable=repeatable,
                                         experience=experience, log_dir=str(work_dir / "kb_logs"),
                                         outside_best={name: c.seconds for name, c in found.items()},
                                         outside_names={name: c.family.name for name, c in found.items()},
                                         build_workers=parallel_builds(builder))
        kept = CandidateRecorder(work_dir=work_dir, strategy=strategy,
                                 clock=lambda: tuning_budget.spent, builder=builder, runner=runner)
        # tune_relax, with the tasks TVM's rules fail on in their fallback space or left out
        contexts, task_weights = tune_contexts(searchable, rescued, target=target, work_dir=str(work_dir),
                                               space=space, strategy=search, seed=seed)
        ms.tune.tune_tasks(
            tasks=contexts, task_weights=task_weights, work_dir=str(work_dir), max_trials_global=1_000_000,
            num_trials_per_iter=trials_per_batch or (64 if is_cuda else 16), builder=builder, runner=runner,
            database=database, cost_model=cost_model, task_scheduler=scheduler,
            measure_callbacks=ms.MeasureCallback.create("default") + [recorder, kept],
        )
    database.compact()
    stats = scheduler.stats if uses_kb else []  # stock keeps no per-task seconds
    seconds = tuning_budget.spent
    if uses_kb:
        save_state()
    chosen, used_latency = better_than_default(database, tasks, target, default_latency)
    if by_onnxruntime[0][0] is None:
        references, reference_name = untuned_outputs, "untuned TVM build"
    else:
        references, reference_name = [outputs for outputs, _ in by_onnxruntime], by_onnxruntime[0][1]
    tolerance = TOLERANCES[precision]

    def best_build(chosen):  # with the families' kernels: each set worth trying, built and timed end to end
        options = model_stage.options(found, used_latency)
        candidates = [build(mod, target, chosen, cuda_graph=cuda_graph, kernels=[c.kernel() for c in option])
                      for option in options]
        timed = time_in_turns(candidates, target, input_sets)
        tried, best = [], None
        for option, candidate, (outputs, latency) in zip(options, candidates, timed):
            wrong = compare_sets(references, outputs, tolerance)[0] if option else None  # none: reported below
            tried.append({"tasks": [c.task for c in option], "latency_ms": latency * 1e3, "mismatch": wrong})
            if wrong is None and (best is None or latency < best[0]):
                best = (latency, outputs, candidate, option)
        return tried, best

    tried, best = best_build(chosen)
    wrong_schedules = {}  # task -> how its tuned kernel disagreed with its untuned one: dropped
    if compare_sets(references, best[1], tolerance)[0] is not None:
        library, device = untuned.mod.imports[0], local_device(target)
        wrong_schedules = wrong_records(chosen, tasks, target, device,
                                        lambda task, arrays: task_output(library, task, arrays, device))
        if wrong_schedules:
            notify({"event": "wrong_schedules", "tasks": wrong_schedules})
            chosen = without(chosen, tasks, target, wrong_schedules)
            used_latency.update({task: default_latency[task] for task in wrong_schedules})
            tried, best = best_build(chosen)
    tuned_latency, tuned_outputs, executable, used_kernels = best
    kernels = [c.kernel() for c in used_kernels]
    used_latency.update({c.task: c.seconds for c in used_kernels})
    export_library(executable, work_dir / "model.so")
    graphs = cuda_graph and is_cuda
    if graphs:  # what the graphs bring: the same records, launched one by one
        _, without_graphs = run_and_time(build(mod, target, chosen, cuda_graph=False, kernels=kernels), target,
                                         input_sets[:1])
    why_not, worst_error = compare_sets(references, tuned_outputs, tolerance)

    on_devices = device_seconds(CandidateLog.read(work_dir / FILE_NAME)) if (work_dir / FILE_NAME).exists() \
        else device_seconds([])
    weights = {str(t.task_name): float(t.weight) for t in tasks}
    curve = latency_curve(batches, weights, default_latency, untuned_latency)
    plot_curve(work_dir / "latency.png", curve, tuned=(seconds, tuned_latency), title=f"{name} ({strategy})")
    total = sum(weights[n] * default_latency[n] for n in weights) or 1.0
    total_after = sum(weights[n] * used_latency[n] for n in weights) or 1.0
    by_name = {t.name: t for t in stats}
    report = {
        "model": name, "target": str(target.export()), "pipeline": pipeline, "budget_s": tuning_budget.total,
        "inputs": {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
                   if i.name not in {init.name for init in model.graph.initializer}},
        "strategy": strategy, "seconds_spent": seconds,
        "trials": recorder.trials, "schedules_measured": len(database),
        "latency_untuned_ms": untuned_latency * 1e3, "latency_tuned_ms": tuned_latency * 1e3,
        "speedup": untuned_latency / tuned_latency, "cuda_graph": graphs,
        **({"latency_tuned_without_cuda_graph_ms": without_graphs * 1e3} if graphs else {}),
        "precision": precision, "math": math,
        "numerics": {"checked_against": reference_name, "input_sets": len(input_sets), "ok": why_not is None,
                     "mismatch": why_not, "max_abs_error": worst_error, "tolerance": tolerance.to_json(),
                     "constant_reference": preflight is not None and preflight.constant_reference,
                     "untuned": None if preflight is None else preflight.to_json()},
        "library": str(work_dir / "model.so"), "records": str(work_dir / "database_tuning_record.json"),
        "candidates": str(work_dir / FILE_NAME), "device_seconds": on_devices,
        "family_kernels": [{"task": c.task, "family": c.family.name, "seconds": c.seconds,
                            **c.family.record(c.params)} for c in used_kernels],
        "family_builds": tried if len(tried) > 1 else [],
        "tasks_without_design_space": refused,  # kept their default schedules: TVM's rules fail on them
        "tasks_on_fallback_space": why_rescued,  # searched after their elementwise producers were inlined
        "wrong_schedules_dropped": wrong_schedules,  # their tuned kernels computed something else
        "plot": str(work_dir / "latency.png"),
        "curve": [{"seconds": round(s, 2), "estimated_ms": round(ms_ * 1e3, 5)} for s, ms_ in curve],
        "cpu_threads": threads,  # TVM's CPU threads for every timing here (run the library with as many)
        "ceiling": ceiling and ceiling.describe(),  # what `of_ceiling` in the task rows is a fraction of
        "tasks": [_task_row(n, weights[n], default_latency[n], used_latency[n], total, total_after,
                             by_name.get(n), on_devices["per_task"].get(n),
                             next((c.describe() for c in used_kernels if c.task == n), None),
                             flop=task_flop.get(n), ceiling_s=ceilings.get(n))
                  for n in sorted(weights, key=lambda n: -weights[n] * default_latency[n])],
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (work_dir / "report.json").write_text(json.dumps(report, indent=1))
    (work_dir / "report.md").write_text(report_markdown(report))
    return report
