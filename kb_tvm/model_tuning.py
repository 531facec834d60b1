"""`kb-tvm tune MODEL.onnx`: ONNX -> Relax -> KBTaskScheduler + KBSearch -> a deployable
library and a report. Records stay in TVM's JSONDatabase in the work dir, so stock
`compile_relax` can use them too."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .allocation import TaskStats
from .budget import TuningBudget


class ModelError(ValueError):
    """A problem with the user's model, said in one line."""


def load_onnx(path: str | Path):
    """The ONNX model at `path`, checked for what kb-tvm needs: readable, static input shapes."""
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
    for graph_input in model.graph.input:
        if graph_input.name in initializers:
            continue
        for axis, dim in enumerate(graph_input.type.tensor_type.shape.dim):
            if dim.dim_param or dim.dim_value <= 0:
                label = f"'{dim.dim_param}'" if dim.dim_param else "unknown"
                raise ModelError(
                    f"input '{graph_input.name}' has a dynamic dimension {axis} ({label}); kb-tvm tunes static "
                    f"shapes: export with fixed shapes, or fix it with `python -m onnxruntime.tools."
                    f"make_dynamic_shape_fixed --dim_param {dim.dim_param or 'NAME'} --dim_value N in.onnx out.onnx`")
    return model


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


def build(mod, target, database=None):
    """A VM executable; functions without a tuned record get TVM's default schedules."""
    from tvm.s_tir import meta_schedule as ms

    database = database if database is not None else ms.database.MemoryDatabase()
    return ms.relax_integration.compile_relax(database, mod, target, params=None)


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


def tune_model(
    model,
    *,
    name: str,
    target,
    budget: str | float,
    work_dir: str | Path,
    trials_per_batch: int | None = None,
    seed: int | None = None,
    strategy: str = "kb",
    resume: bool = False,
    on_event: Callable[[dict], None] | None = None,
) -> dict:
    """Tune every task of `model` (an onnx.ModelProto from `load_onnx`) within `budget`,
    export `work_dir/model.so`, write `report.json` and `report.md`, and return the report.
    strategy "evolutionary" runs stock MetaSchedule instead (gradient task scheduler and
    EvolutionarySearch, stopped at the same wall budget), for side-by-side runs.
    resume: continue an interrupted run in `work_dir` (kb only): its records stay, its seconds
    count against the budget, and tasks it finished get no more."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from .adapter import KBSearch, KBTaskScheduler, TimeCappedSearch
    from .tuning import STRATEGIES

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    work_dir = Path(work_dir)
    earlier = read_state(work_dir, name=name, resume=resume, strategy=strategy)
    mod = relax.transform.LegalizeOps()(to_relax(model))
    work_dir.mkdir(parents=True, exist_ok=True)
    inputs = example_inputs(model)
    notify = on_event or (lambda record: None)

    untuned_outputs, untuned_latency = run_and_time(build(mod, target), target, inputs)
    notify({"event": "untuned", "latency_ms": untuned_latency * 1e3})

    import tvm.s_tir.tensor_intrin  # noqa: F401 - one-time registration, before the clock

    tuning_budget = TuningBudget(budget, already_spent=earlier["spent_s"] if earlier else 0.0).start()
    if earlier:
        notify({"event": "resume", "spent_s": earlier["spent_s"], "tasks": len(earlier["tasks"])})

    def emit(record: dict) -> None:  # every scheduler decision also saves the job's state
        write_state(work_dir, name=name, budget=tuning_budget, tasks=scheduler.stats)
        notify(record)

    if strategy == "kb":
        scheduler = KBTaskScheduler(budget=tuning_budget, on_event=emit,
                                    earlier=[TaskStats(**t) for t in earlier["tasks"]] if earlier else None)
        search, cost_model = KBSearch(budget=tuning_budget, seed=seed), "random"
    else:
        scheduler, search, cost_model = "gradient", TimeCappedSearch(budget=tuning_budget), "xgb"
    is_cuda = target.kind.name == "cuda"
    database = ms.relax_integration.tune_relax(
        mod, params={}, target=target, work_dir=str(work_dir), max_trials_global=1_000_000,
        num_trials_per_iter=trials_per_batch or (64 if is_cuda else 16), cost_model=cost_model,
        strategy=search, task_scheduler=scheduler, seed=seed,
    )
    stats = scheduler.stats if strategy == "kb" else []  # stock keeps no per-task seconds
    seconds = tuning_budget.spent
    executable = build(mod, target, database)
    executable.export_library(str(work_dir / "model.so"))
    tuned_outputs, tuned_latency = run_and_time(executable, target, inputs)
    mismatch = _mismatch(untuned_outputs, tuned_outputs)

    total = sum(t.model_seconds or 0.0 for t in stats) or 1.0
    report = {
        "model": name, "target": str(target.export()), "budget_s": tuning_budget.total,
        "strategy": strategy, "seconds_spent": seconds,
        "trials": len(database.get_all_tuning_records()),
        "latency_untuned_ms": untuned_latency * 1e3, "latency_tuned_ms": tuned_latency * 1e3,
        "speedup": untuned_latency / tuned_latency,
        "numerics": {"checked_against": "untuned TVM build", "ok": mismatch is None, "mismatch": mismatch},
        "library": str(work_dir / "model.so"), "records": str(work_dir / "database_tuning_record.json"),
        "tasks": [
            {"task": t.name, "weight": t.weight, "share_of_model_time": (t.model_seconds or 0.0) / total,
             "seconds": t.seconds, "trials": t.trials,
             "latency_before_ms": None if t.latency_before is None else t.latency_before * 1e3,
             "latency_after_ms": None if t.latency is None else t.latency * 1e3, "retired": t.retired}
            for t in sorted(stats, key=lambda t: -(t.model_seconds or 0.0))
        ],
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (work_dir / "report.json").write_text(json.dumps(report, indent=1))
    (work_dir / "report.md").write_text(report_markdown(report))
    return report


STATE_FILE = "kb_state.json"
_DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


def write_state(work_dir: Path, *, name: str, budget: TuningBudget, tasks: list[TaskStats]) -> None:
    """The job's state after each scheduler decision; written whole and renamed, so a kill
    at any moment leaves either the old or the new file."""
    state = {"schema": 1, "model": name, "budget_s": budget.total, "spent_s": budget.spent,
             "tasks": [vars(t) for t in tasks]}
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
        f"- budget: {report['seconds_spent']:.0f} s spent of {report['budget_s']:.0f} s, {report['trials']} trials",
        f"- numerics vs {report['numerics']['checked_against']}: "
        + ("ok" if report["numerics"]["ok"] else f"**MISMATCH: {report['numerics']['mismatch']}**"),
        f"- library: `{report['library']}`",
        "",
        "| task | weight | share of model time | seconds | trials | before ms | after ms | retired |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in report["tasks"]:
        before = "-" if t["latency_before_ms"] is None else f"{t['latency_before_ms']:.4f}"
        after = "-" if t["latency_after_ms"] is None else f"{t['latency_after_ms']:.4f}"
        lines.append(f"| {t['task']} | {t['weight']:g} | {t['share_of_model_time']:.1%} | {t['seconds']:.0f} | "
                     f"{t['trials']} | {before} | {after} | {t['retired'] or ''} |")
    return "\n".join(lines) + "\n"
