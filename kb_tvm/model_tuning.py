"""`kb-tvm tune MODEL.onnx`: ONNX -> Relax -> KBTaskScheduler + KBSearch -> a deployable
library and a report. Records stay in TVM's JSONDatabase files in the work dir (one record per
schedule, see `RecordDatabase`), so stock `compile_relax` can use them too."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .allocation import TaskStats
from .budget import TuningBudget
from .logger_guard import guard_metaschedule_logger


class ModelError(ValueError):
    """A problem with the user's model, said in one line."""


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`--input-shape`'s value: "input_ids=1x128" -> ("input_ids", (1, 128))."""
    name, sep, dims = text.partition("=")
    parts = dims.replace(",", "x").split("x")
    if not (sep and name and all(p.isdigit() and int(p) > 0 for p in parts)):
        raise ModelError(f"--input-shape {text!r}: write NAME=DIMS with positive dimensions, e.g. input_ids=1x128")
    return name, tuple(int(p) for p in parts)


def load_onnx(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None):
    """The ONNX model at `path`, checked for what kb-tvm needs: readable, and static input
    shapes once `input_shapes` (input name -> dims) pins the dynamic ones."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist")
    try:
        model = onnx.load(str(path))
    except Exception as err:  # noqa: BLE001 - protobuf raises several kinds
        raise ModelError(f"{path} is not an ONNX model ({type(err).__name__})") from None
    if not model.graph.node:
        raise ModelError(f"{path} is not an ONNX model (no graph nodes)")
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = {i.name: i for i in model.graph.input if i.name not in initializers}
    for name, dims in (input_shapes or {}).items():
        if name not in graph_inputs:
            raise ModelError(f"--input-shape names '{name}', which is not an input of {path.name}; "
                             f"its inputs: {', '.join(graph_inputs)}")
        _pin(graph_inputs[name], dims)
    for graph_input in graph_inputs.values():
        shape = graph_input.type.tensor_type.shape.dim
        for axis, dim in enumerate(shape):
            if dim.dim_param or dim.dim_value <= 0:
                label = f"'{dim.dim_param}'" if dim.dim_param else "unknown"
                example = "x".join(str(d.dim_value) if d.dim_value > 0 else "N" for d in shape)
                raise ModelError(
                    f"input '{graph_input.name}' has a dynamic dimension {axis} ({label}); kb-tvm tunes static "
                    f"shapes: pin it with --input-shape {graph_input.name}={example}, N the size you will run")
    return model


def _pin(graph_input, dims: tuple[int, ...]) -> None:
    """Fix a graph input's dimensions in place (the dynamic ones; a static one must agree)."""
    shape = graph_input.type.tensor_type.shape.dim
    given = "x".join(map(str, dims))
    if len(dims) != len(shape):
        raise ModelError(f"--input-shape {graph_input.name}={given} has {len(dims)} dimensions; "
                         f"input '{graph_input.name}' has {len(shape)}")
    for axis, (dim, size) in enumerate(zip(shape, dims)):
        if dim.dim_value > 0 and dim.dim_value != size:
            raise ModelError(f"--input-shape {graph_input.name}={given}: dimension {axis} of "
                             f"'{graph_input.name}' is fixed at {dim.dim_value} in the model")
        dim.dim_value = size  # setting the value clears dim_param (a oneof)


def to_relax(model):
    """Relax IRModule of the ONNX model, weights bound as constants."""
    from tvm.relax.frontend.onnx import from_onnx

    try:
        return from_onnx(model, keep_params_in_input=False)
    except Exception as err:  # noqa: BLE001 - TVM's importer raises many kinds
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelError(f"TVM cannot import this model: {first}") from None


def example_inputs(model, seed: int = 0) -> list[np.ndarray]:
    from onnx import helper

    initializers = {init.name for init in model.graph.initializer}
    rng = np.random.default_rng(seed)
    arrays = []
    for graph_input in model.graph.input:
        if graph_input.name in initializers:
            continue
        tensor_type = graph_input.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        shape = [d.dim_value for d in tensor_type.shape.dim]
        arrays.append(rng.uniform(-1, 1, size=shape).astype(dtype))
    return arrays


def fuse(mod, target):
    """The module as compile_relax prepares it (dispatch, legalize, fuse) before applying
    records: tasks extracted from this one have the names and bodies compile_relax looks up."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    passes = [*dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()]
    with target, tvm.transform.PassContext(opt_level=3):
        once = tvm.transform.Sequential(passes)(mod)
        # compile_relax runs these passes again on what it is given; the second run only
        # re-annotates the fused functions, and a third changes nothing: tune what it builds
        return tvm.transform.Sequential(passes)(once)


def build(mod, target, database=None):
    """A VM executable; functions without a tuned record get TVM's default schedules.

    MetaSchedule's `compile_relax`, step for step (fuse as tasks were extracted, apply the
    records, dlight for the rest), but under `build_config(target)`: compile_relax opens a
    PassContext of its own, and a CUDA tensor-core record tuned under merged shared memory
    would not lower without it."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline
    from tvm.s_tir import dlight as dl
    from tvm.s_tir import meta_schedule as ms

    from .measure.targets import build_config

    database = database if database is not None else ms.database.MemoryDatabase()
    try:
        dispatch = relax_pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    try:
        lower = relax_pipeline.dataflow_lower_passes(target) + relax_pipeline.finalize_passes(target)
    except (ValueError, AttributeError):  # targets without their own pipeline (llvm): compile_relax's fallback
        t = relax.transform
        lower = [t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(),
                 t.StaticPlanBlockMemory(), t.LowerAllocTensor(), t.KillAfterLastUse(), t.LowerRuntimeBuiltin(),
                 t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol()]
    gpu = relax_pipeline.BackendDispatcher.is_gpu_target(target)

    @tvm.transform.module_pass(opt_level=3)
    def tuned_pipeline(mod, _ctx):
        mod = tvm.transform.Sequential([
            *dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()])(mod)
        mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
        if gpu:
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                          dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
        return tvm.transform.Sequential(lower)(mod)

    with target, database, tvm.transform.PassContext(opt_level=3, config=build_config(target)):
        return relax.build(mod, target=target, relax_pipeline=tuned_pipeline)


def run_and_time(executable, target, inputs: list[np.ndarray], repeat: int = 10) -> tuple[list[np.ndarray], float]:
    """Outputs and median latency (seconds) of the model's main function."""
    import tvm
    from tvm import relax

    device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(a, device) for a in inputs]
    out = vm["main"](*args)
    outputs = [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]
    vm.set_input("main", *args)
    timer = vm.time_evaluator("invoke_stateful", device, number=5, repeat=repeat, min_repeat_ms=50)
    return outputs, float(np.median(timer("main").results))


def profile_kernels(executable, target, tasks, repeat: int = 5) -> dict[str, float]:
    """Seconds per call of each task's kernel as built in `executable` (timed alone, on random
    inputs): where the model's time goes before tuning. The bottleneck analysis."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    library = executable.mod.imports[0]  # the compiled kernels, named as the tasks
    rng = np.random.default_rng(0)
    seconds = {}
    for task in tasks:
        func = next(iter(task.mod.functions.values()))
        args = [tvm.runtime.tensor(_random_array([int(d) for d in info.shape], info.dtype, rng), device)
                for info in ArgInfo.from_prim_func(func)]
        timer = library.time_evaluator(str(task.task_name), device, number=10, repeat=repeat, min_repeat_ms=10)
        seconds[str(task.task_name)] = float(np.median(timer(*args).results))
    return seconds


def _random_array(shape: list[int], dtype: str, rng) -> np.ndarray:
    if "int" in dtype:  # indices (gather, embedding): 0 is valid for any table
        return np.zeros(shape, dtype=dtype)
    return rng.uniform(-1, 1, size=shape).astype(dtype)


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
    builder=None,
    runner=None,
    experience=None,
    on_event: Callable[[dict], None] | None = None,
) -> dict:
    """Tune every task of `model` (an onnx.ModelProto from `load_onnx`) within `budget`,
    export `work_dir/model.so`, write `report.json`, `report.md` and `latency.png`, and return
    the report. strategy "evolutionary" runs stock MetaSchedule instead (gradient task
    scheduler and EvolutionarySearch, stopped at the same wall budget), for side-by-side runs.
    seed, repeatable: see KBSearch's options of those names.
    resume: continue an interrupted run in `work_dir` (kb only): its records stay, its seconds
    count against the budget, and tasks it finished get no more. builder/runner: MetaSchedule's
    (e.g. an RPCRunner); default local, kb's persistent ones or stock's as `pipeline` says.
    experience: a kb_tvm.Experience to warm-start the tasks from and add their outcomes to (kb
    only); None: cold."""
    from tvm.s_tir import meta_schedule as ms

    from .adapter import (
        KBSearch,
        KBTaskScheduler,
        ProgressRecorder,
        RecordDatabase,
        TimeCappedSearch,
    )
    from .tuning import PIPELINES, STRATEGIES, measurement_pipeline

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if pipeline not in PIPELINES:  # before the untuned build and the profile, not after them
        raise ValueError(f"unknown pipeline {pipeline!r}: use one of {', '.join(PIPELINES)}")
    work_dir = Path(work_dir)
    earlier = read_state(work_dir, name=name, resume=resume, strategy=strategy)
    mod = fuse(to_relax(model), target)
    tasks = ms.relax_integration.extract_tasks(mod, target)
    work_dir.mkdir(parents=True, exist_ok=True)
    inputs = example_inputs(model)
    notify = on_event or (lambda record: None)

    untuned = build(mod, target)
    untuned_outputs, untuned_latency = run_and_time(untuned, target, inputs)
    default_latency = profile_kernels(untuned, target, tasks)
    notify({"event": "untuned", "latency_ms": untuned_latency * 1e3})

    import tvm.s_tir.tensor_intrin  # noqa: F401 - one-time registration, before the clock

    tuning_budget = TuningBudget(budget, already_spent=earlier["spent_s"] if earlier else 0.0).start()
    if earlier:
        notify({"event": "resume", "spent_s": earlier["spent_s"], "tasks": len(earlier["tasks"])})
    batches: list[dict] = list(earlier.get("batches", [])) if earlier else []

    def save_state() -> None:
        write_state(work_dir, name=name, budget=tuning_budget, tasks=scheduler.stats, batches=batches)

    def emit(record: dict) -> None:  # every scheduler decision also saves the job's state
        save_state()
        notify(record)

    def measured(point: dict) -> None:
        batches.append({"seconds": tuning_budget.spent, "task": point["task"], "best_ms": point["batch_best_ms"]})

    if strategy == "kb":
        scheduler = KBTaskScheduler(budget=tuning_budget, on_event=emit, default_latency=default_latency,
                                    earlier=[TaskStats(**t) for t in earlier["tasks"]] if earlier else None,
                                    experience=experience)
        search = KBSearch(budget=tuning_budget, seed=seed, repeatable=repeatable, experience=experience,
                          log_dir=str(work_dir / "kb_logs"))
        cost_model = "random"
    else:
        scheduler, search, cost_model = "gradient", TimeCappedSearch(budget=tuning_budget), "xgb"
    is_cuda = target.kind.name == "cuda"
    database = RecordDatabase(work_dir=work_dir)
    recorder = ProgressRecorder(on_progress=measured)
    with measurement_pipeline(target, pipeline, builder, runner) as (builder, runner), guard_metaschedule_logger():
        ms.relax_integration.tune_relax(
            mod, params={}, target=target, work_dir=str(work_dir), max_trials_global=1_000_000, database=database,
            num_trials_per_iter=trials_per_batch or (64 if is_cuda else 16), cost_model=cost_model,
            builder=builder, runner=runner, strategy=search, task_scheduler=scheduler, seed=seed,
            measure_callbacks=ms.MeasureCallback.create("default") + [recorder],
        )
    database.compact()
    stats = scheduler.stats if strategy == "kb" else []  # stock keeps no per-task seconds
    seconds = tuning_budget.spent
    if strategy == "kb":
        save_state()
    chosen, used_latency = better_than_default(database, tasks, target, default_latency)
    executable = build(mod, target, chosen)
    executable.export_library(str(work_dir / "model.so"))
    tuned_outputs, tuned_latency = run_and_time(executable, target, inputs)
    reference, reference_name = onnxruntime_outputs(model, inputs)
    if reference is None:
        reference, reference_name = untuned_outputs, "untuned TVM build"
    mismatch = _mismatch(reference, tuned_outputs)

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
        "speedup": untuned_latency / tuned_latency,
        "numerics": {"checked_against": reference_name, "ok": mismatch is None, "mismatch": mismatch},
        "library": str(work_dir / "model.so"), "records": str(work_dir / "database_tuning_record.json"),
        "plot": str(work_dir / "latency.png"),
        "curve": [{"seconds": round(s, 2), "estimated_ms": round(ms_ * 1e3, 5)} for s, ms_ in curve],
        "tasks": [_task_row(n, weights[n], default_latency[n], used_latency[n], total, total_after,
                             by_name.get(n))
                  for n in sorted(weights, key=lambda n: -weights[n] * default_latency[n])],
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (work_dir / "report.json").write_text(json.dumps(report, indent=1))
    (work_dir / "report.md").write_text(report_markdown(report))
    return report


def better_than_default(database, tasks, target, default_latency: dict[str, float]):
    """A database holding each task's best record where it beats the task's default schedule;
    where it does not (a short budget on a GPU, where TVM's defaults are good), the build keeps
    the default. Returns (database, task name -> seconds of the schedule the build uses)."""
    from tvm.s_tir import meta_schedule as ms

    chosen = ms.database.MemoryDatabase()
    used = dict(default_latency)
    for task in tasks:
        name = str(task.task_name)
        record = database.query_tuning_record(task.dispatched[0], target, name)
        latency = None if record is None else _record_seconds(record)
        if latency is None or latency >= default_latency[name]:
            continue
        used[name] = latency
        workload = chosen.commit_workload(task.dispatched[0])
        chosen.commit_tuning_record(ms.database.TuningRecord(
            record.trace, workload, record.run_secs, record.target, record.args_info))
    return chosen, used


def _record_seconds(record) -> float | None:
    secs = [float(s) for s in (record.run_secs or [])]
    ok = [s for s in secs if s < 1e9]  # MetaSchedule marks failed runs with 1e10
    return sum(ok) / len(ok) if ok else None


def _task_row(name, weight, default, after, total, total_after, stats) -> dict:
    return {"task": name, "weight": weight, "share_of_model_time": weight * default / total,
            "share_at_end": weight * after / total_after,
            "seconds": stats.seconds if stats else None, "trials": stats.trials if stats else None,
            "latency_before_ms": default * 1e3, "latency_after_ms": after * 1e3,
            "schedule": "default" if after == default else "tuned",
            "retired": stats.retired if stats else None, "revived": stats.revivals if stats else 0}


def latency_curve(batches: list[dict], weights: dict[str, float], default_latency: dict[str, float],
                  untuned_latency: float) -> list[tuple[float, float]]:
    """End-to-end latency against seconds spent, estimated after every batch: the untuned
    latency minus what the tasks' best latencies so far save (weight x (default - best))."""
    current = dict(default_latency)
    saved = 0.0
    curve = [(0.0, untuned_latency)]
    for batch in batches:
        name, best = batch["task"], batch["best_ms"]
        if best is not None and name in current and best * 1e-3 < current[name]:
            saved += weights[name] * (current[name] - best * 1e-3)
            current[name] = best * 1e-3
        curve.append((batch["seconds"], untuned_latency - saved))
    return curve


def plot_curve(path: Path, curve: list[tuple[float, float]], *, tuned: tuple[float, float], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    ax.step([s for s, _ in curve], [v * 1e3 for _, v in curve], where="post",
            label="estimated from the tasks' best latencies")
    ax.plot([0.0], [curve[0][1] * 1e3], "o", color="gray", label="measured: untuned")
    ax.plot([tuned[0]], [tuned[1] * 1e3], "o", color="tab:red", label="measured: tuned build")
    ax.set_xlabel("seconds of budget spent")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def onnxruntime_outputs(model, inputs: list[np.ndarray]) -> tuple[list[np.ndarray] | None, str]:
    """The model's outputs from onnxruntime (CPU), or None where it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None, ""
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return list(session.run(None, dict(zip(names, inputs)))), f"onnxruntime {onnxruntime.__version__}"


STATE_FILE = "kb_state.json"
_DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


def write_state(work_dir: Path, *, name: str, budget: TuningBudget, tasks: list[TaskStats],
                batches: list[dict]) -> None:
    """The job's state after each scheduler decision; written whole and renamed, so a kill
    at any moment leaves either the old or the new file."""
    state = {"schema": 1, "model": name, "budget_s": budget.total, "spent_s": budget.spent,
             "tasks": [vars(t) for t in tasks], "batches": batches}
    partial = work_dir / (STATE_FILE + ".partial")
    partial.write_text(json.dumps(state))
    os.replace(partial, work_dir / STATE_FILE)


def read_state(work_dir: Path, *, name: str, resume: bool, strategy: str) -> dict | None:
    """The interrupted run to resume, or None for a new job; one-line errors otherwise."""
    path = work_dir / STATE_FILE
    if not resume:
        if path.exists():
            raise ModelError(f"{work_dir} holds an earlier run: add --resume to continue it, or use another "
                             "--work-dir")
        return None
    if strategy != "kb":
        raise ModelError("--resume works with --strategy kb only")
    if not path.exists():
        raise ModelError(f"nothing to resume in {work_dir}: it has no {STATE_FILE}")
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise ModelError(f"{path} is damaged; start a new run in another --work-dir") from None
    if state.get("model") != name:
        raise ModelError(f"{work_dir} holds a run of {state.get('model')}, not {name}")
    for file_name in _DATABASE_FILES:  # a kill mid-write can leave a torn last record
        _drop_torn_tail(work_dir / file_name)
    return state


def _drop_torn_tail(path: Path) -> None:
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    keep = len(lines)
    while keep and not _is_json(lines[keep - 1]):
        keep -= 1
    if keep < len(lines):
        path.write_text("".join(line + "\n" for line in lines[:keep]))


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _mismatch(expected: list[np.ndarray], actual: list[np.ndarray]) -> str | None:
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want.shape != got.shape:
            return f"output {index}: shape {got.shape} != {want.shape}"
        if not np.allclose(got, want, rtol=1e-3, atol=1e-4):
            worst = float(np.max(np.abs(got.astype(np.float64) - want)))
            return f"output {index}: max abs difference {worst:.3g}"
    return None


def report_markdown(report: dict) -> str:
    lines = [
        f"# kb-tvm report: {report['model']}",
        "",
        f"- end-to-end latency: untuned {report['latency_untuned_ms']:.4f} ms -> tuned "
        f"{report['latency_tuned_ms']:.4f} ms ({report['speedup']:.2f}x)",
        f"- budget: {report['seconds_spent']:.0f} s spent of {report['budget_s']:.0f} s, {report['trials']} trials "
        f"({report['strategy']})",
        f"- numerics vs {report['numerics']['checked_against']}: "
        + ("ok" if report["numerics"]["ok"] else f"**MISMATCH: {report['numerics']['mismatch']}**"),
        f"- library: `{report['library']}`",
        "",
        "![end-to-end latency against seconds spent](latency.png)",
        "",
        "Latency before = the task's default schedule in the untuned build; after = the schedule the "
        "tuned build uses (a tuned record only where it beats the default). Share of model time: "
        "weight x latency over all tasks, untuned and at the end.",
        "",
        "| task | weight | share untuned | share at end | seconds | trials | before ms | after ms | schedule | retired |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in report["tasks"]:
        seconds = "-" if t["seconds"] is None else f"{t['seconds']:.0f}"
        trials = "-" if t["trials"] is None else str(t["trials"])
        lines.append(f"| {t['task']} | {t['weight']:g} | {t['share_of_model_time']:.1%} | {t['share_at_end']:.1%} | "
                     f"{seconds} | {trials} | "
                     f"{t['latency_before_ms']:.4f} | {t['latency_after_ms']:.4f} | {t['schedule']} | "
                     f"{t['retired'] or ''} |")
    return "\n".join(lines) + "\n"
