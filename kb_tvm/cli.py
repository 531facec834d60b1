"""The `kb-tvm` command line."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from .budget import format_seconds, parse_budget
from .cli_options import (
    _budget,
    _check_repeatable,
    _experience,
    _experience_options,
    _fail,
    _pipeline_option,
    _rpc_options,
    _seed_options,
)
from .tuning import KB_STRATEGIES


@click.group()
@click.version_option(package_name="kb-tvm")
def main() -> None:
    """kb_tvm: budget-aware kernel tuning for TVM MetaSchedule."""


def _rpc_runner(tracker, key, target, pipeline):
    """The runner that measures through the tracker, or None (local). One line when the tracker or
    its servers are missing."""
    if tracker is None and key is None:
        return None
    if tracker is None or key is None:
        _fail("--rpc HOST:PORT and --key KEY go together")
    from .measure.remote import TrackerError, parse_tracker, servers_under, tracker_summary

    try:
        host, port = parse_tracker(tracker)
        if pipeline == "stock":  # MetaSchedule's own: a session per candidate, as many at once as servers
            from tvm.s_tir import meta_schedule as ms

            servers, _ = servers_under(tracker_summary(tracker), key)
            if servers == 0:
                raise TrackerError(f"no RPC server under key {key!r} at tracker {tracker}")
            config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                                         session_timeout_sec=60)
            return ms.runner.RPCRunner(config, max_workers=servers)
        from .measure.runner import KBRunner

        return KBRunner(device="cuda" if target.kind.name == "cuda" else "cpu", tracker=tracker, key=key)
    except (ValueError, TrackerError) as err:
        _fail(str(err))


def _show_model_event(record: dict) -> None:
    """`kb-tvm tune`'s progress, one line an event that matters to the user."""
    event = record["event"]
    if event == "untuned":
        click.echo(f"untuned: {record['latency_ms']:.4f} ms end to end")
    elif event == "allocate":
        alongside = f" (while {', '.join(record['in_flight'])} measure)" if record.get("in_flight") else ""
        click.echo(f"[{format_seconds(record['budget_spent_s']):>7}] {record['task']}: {record['why']}{alongside}")
    elif event == "numerics":
        plain = record["ok"] and not record["constant_reference"]
        click.secho(record["line"], fg=None if plain else ("yellow" if record["ok"] else "red"), err=not plain)
    elif event == "resume":
        click.echo(f"resuming: {format_seconds(record['spent_s'])} already spent")
    elif event == "retire":
        click.echo(f"          {record['task']} retired: {record['why']}")
    elif event == "revive":
        click.echo(f"          {record['task']} back: {record['why']}")
    elif event == "hold":
        click.echo(f"          {record['task']} not retired: {record['why']} (ceiling {record['ceiling_ms']:.4f} ms "
                   f"by {record['ceiling']})")
    elif event == "kernel_best":  # the kernel families' stage, before MetaSchedule's
        click.echo(f"{record['family']}: {record['task']}: {record['seconds'] * 1e3:.4f} ms (untuned "
                   f"{record['default_s'] * 1e3:.4f}) with {record['variant']}")
    elif event == "space_fallback":
        click.echo(f"          {record['task']}: TVM cannot make its design space ({record['why']}); searched "
                   f"with its elementwise producers inlined instead")
    elif event == "space_refused":
        click.echo(f"          {record['task']} keeps its default schedule: TVM cannot make its design space "
                   f"({record['why']})")
    elif event == "wrong_schedules":
        for task, why in record["tasks"].items():
            click.secho(f"          {task}: its tuned schedule computes something else ({why}): dropped, it keeps "
                        f"its default schedule", fg="yellow", err=True)
    elif event == "kernel_skip":
        click.echo(f"{record['family']}: {record['task']} skipped: {record['why']}")


def _show_event(record: dict) -> None:
    """The search's phase changes, one line each (the rest is in the decision log)."""
    event = record["event"]
    if event == "coarse-sampled":
        dropped = ", ".join(f"{n} {why}" for why, n in record["dropped"].items() if n)
        click.echo(f"coarse: {record['valid']} valid candidates in {len(record['regions'])} regions "
                   f"({record['seconds']:.1f}s; dropped: {dropped or 'none'}); measuring a few per region")
    elif event == "borrowed":
        lenders = ", ".join(f"{e['workload']} ({e.get('schedules', {}).get('applied', 0)} schedules)"
                            for e in record["entries"])
        click.echo(f"warm start from the experience library: {lenders}; prior cost model "
                   f"{record['prior_model'] or 'none'}")
    elif event == "tile-plan" and not record["fits"]:
        click.echo(f"design space {record['space']} dropped: {record['why']}")
    elif event == "regions":
        kept = [r["region"] for r in record["regions"] if r["kept"]]
        click.echo(f"fine: kept regions {', '.join(kept)} of {len(record['regions'])}")
    elif event == "phase":
        click.echo(f"{record['phase']}: {record['why']}")
    elif event == "stop" and record["reason"] != "budget spent":
        click.echo(f"stop: {record['reason']}")
    elif event == "kernel_best":
        click.echo(f"{record['family']} region: best variant {record['variant']}, {record['seconds'] * 1e3:.4f} ms; "
                   "MetaSchedule's regions search to beat it")
    elif event == "kernel_skip" and "RPC" in record["why"]:
        click.echo(f"{record['family']} region skipped: {record['why']}")


@main.command("ops")
def list_ops() -> None:
    """List the operator workloads that tune-op knows."""
    from kb_tvm.workloads import LINEAR_FAMILY, WORKLOADS

    width = max(len(name) for name in WORKLOADS)
    for name, description in [*((name, w.description) for name, w in WORKLOADS.items()), LINEAR_FAMILY]:
        click.echo(f"{name:<{width}}  {description}")


def _register_intrinsics_for(tvm_target) -> None:
    """A command tunes one target: on a CPU, its process registers no GPU's tensor intrinsics."""
    from .measure.targets import register_tensor_intrinsics

    register_tensor_intrinsics(cpu_only=tvm_target.kind.name == "llvm")


@main.command("tune-op")
@click.argument("name")
@click.option("--budget", default="2m", show_default=True, callback=_budget,
              help='Wall-clock budget: "90s", "10m", "1h30m", or seconds.')
@click.option("--target", default=None,
              help="llvm, cuda, or a JSON target. Default: cuda if a GPU is present, else llvm on all cores.")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None,
              help="Where records, logs and the decision log go. Default: ./kb-work/NAME-STRATEGY")
@click.option("--strategy", type=click.Choice(["kb", "agent", "evolutionary"]), default="kb", show_default=True,
              help="kb (KBSearch), agent (KBSearch steered by the trained agent) or stock MetaSchedule, "
              "for a side-by-side run.")
@_pipeline_option
@click.option("--trials-per-batch", type=click.IntRange(1), default=None,
              help="Candidates per measurement batch. Default: 64 on cuda, 16 on llvm.")
@click.option("--max-trials", type=click.IntRange(1), default=100_000, show_default=True,
              help="Optional cap on measured candidates; the budget is the main limit.")
@_seed_options
@click.option("--json-out", type=click.Path(dir_okay=False), default=None, help="Also write the result here.")
@_experience_options
@_rpc_options
def tune_op(name, budget, target, work_dir, strategy, pipeline, trials_per_batch, max_trials, seed, repeatable,
            json_out, experience_dir, no_experience, tracker, key) -> None:
    """Tune the operator workload NAME (see `kb-tvm ops`) within a wall-clock budget."""
    from kb_tvm.workloads import get_workload

    _check_repeatable(repeatable, seed, strategy)
    try:
        workload = get_workload(name)
    except ValueError as err:
        _fail(str(err))
    from .measure.targets import describe, make_target
    from .tuning import tune_operator

    try:
        tvm_target = make_target(target)
    except ValueError as err:
        _fail(str(err))
    _register_intrinsics_for(tvm_target)
    experience = _experience(experience_dir, no_experience, strategy)
    work_dir = Path(work_dir or Path("kb-work") / f"{name}-{strategy}")
    _writable_dir(work_dir)
    runner = _rpc_runner(tracker, key, tvm_target, pipeline)
    click.echo(f"tuning {name} ({workload.description}) on {describe(tvm_target)} with {strategy} "
               f"({pipeline} pipeline{_where(runner, tracker, key)}), budget {format_seconds(parse_budget(budget))}, "
               f"work dir {work_dir}")

    def progress(point: dict) -> None:
        best = point["best_ms"]
        shown = "-" if best is None else f"{best:.4f} ms  {workload.flops / (best * 1e-3) / 1e9:8.1f} GFLOP/s"
        used = min(1.0, point["seconds"] / point["budget_s"])
        click.echo(f"[{format_seconds(point['seconds']):>7} {used:4.0%}] trials {point['trials']:4d} "
                   f"(failed {point['failed']})  best {shown}")

    try:
        result = tune_operator(workload, target=tvm_target, budget=budget, work_dir=work_dir, strategy=strategy,
                               pipeline=pipeline, trials_per_batch=trials_per_batch, max_trials=max_trials,
                               seed=seed, repeatable=repeatable, on_progress=progress, on_event=_show_event,
                               quiet=True, experience=experience, runner=runner)
    except Exception as err:  # noqa: BLE001 - the tracker going away surfaces through MetaSchedule
        _measuring_lost(err, runner, work_dir)
        raise
    finally:
        _close(runner)
    if result.final_ms is None:
        _fail(f"no candidate of {name} built and ran in {format_seconds(result.seconds)}; see {work_dir}/logs")
    click.echo(f"best {result.final_ms:.4f} ms ({result.gflops:.1f} GFLOP/s, re-timed), "
               f"{result.trials} trials ({result.failed} failed), {format_seconds(result.seconds)}; "
               f"stopped: {result.stop_reason}")
    if result.template is not None:
        click.echo(f"{result.template['family']}'s best variant ({result.template['variant']}): "
                   f"{result.template['ms']:.4f} ms, "
                   + ("the best (in kernels.jsonl; MetaSchedule's database holds MetaSchedule's best)"
                      if result.template["beats_metaschedule"] else "slower than MetaSchedule's best"))
    click.echo(f"records: {work_dir}/database_tuning_record.json"
               + (f"  decision log: {work_dir}/kb_logs/" if strategy in KB_STRATEGIES else ""))
    if json_out:
        Path(json_out).write_text(json.dumps(result.to_json(), indent=1))


def _where(runner, tracker, key) -> str:
    if runner is None:
        return ""
    servers = getattr(getattr(runner, "measurer", None), "live", None)
    return f"; measuring at tracker {tracker}, key {key}" + (f", {servers} servers" if servers is not None else "")


def _measuring_lost(err: Exception, runner, work_dir: Path, resumable: bool = False) -> None:
    """One line when measuring became impossible (tracker and servers gone); else nothing. The
    measurer says so itself: its TrackerError reaches here as a RuntimeError through TVM's FFI."""
    from .measure.remote import TrackerError

    lost = getattr(getattr(runner, "measurer", None), "fatal", None)
    if lost is None and isinstance(err, TrackerError):
        lost = str(err)
    if lost is not None:
        _fail(f"{lost}. Records are kept in {work_dir}"
              + ("; `--resume` continues once servers are back" if resumable else ""))


def _close(runner) -> None:
    if runner is not None and hasattr(runner, "close"):
        runner.close()


def _writable_dir(work_dir: Path) -> None:
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        probe = work_dir / ".kb-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        _fail(f"work dir {work_dir} is not writable: {err.strerror}")


@main.command("tune")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--budget", default="5m", show_default=True, callback=_budget,
              help='Wall-clock budget for the whole model: "90s", "10m", "50h", or seconds.')
@click.option("--target", default=None,
              help="llvm, cuda, or a JSON target. Default: cuda if a GPU is present, else llvm on all cores.")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None,
              help="Records, logs, model.so and the report. Default: ./kb-work/MODEL_STEM")
@click.option("--trials-per-batch", type=click.IntRange(1), default=None,
              help="Candidates per measurement batch. Default: 64 on cuda, 16 on llvm.")
@_seed_options
@click.option("--strategy", type=click.Choice(["kb", "agent", "evolutionary"]), default="kb", show_default=True,
              help="kb (KBTaskScheduler + KBSearch), agent (the same, KBSearch steered by the trained agent) or "
              "stock MetaSchedule, for a side-by-side run.")
@_pipeline_option
@click.option("--resume", is_flag=True, help="Continue an interrupted run in --work-dir: its records stay, "
              "its seconds count, finished tasks get no more.")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32", show_default=True,
              help="Matmuls and convolutions in fp16 or bf16 with fp32 accumulation (tensor cores on CUDA); "
              "numerics checked against onnxruntime fp32 within a tolerance per precision.")
@click.option("--exact-math", is_flag=True, help="Keep libm's erf, exp, tanh, sigmoid and softmax. By default, "
              "on CPUs they are TVM's fast approximations (they vectorize; checked against onnxruntime like the rest).")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=DIMS",
              help="Pin an input's dynamic axes, e.g. input_ids=1x128 (repeat for each input).")
@click.option("--dim", "axes", multiple=True, metavar="AXIS=SIZE",
              help="Pin a dynamic axis by the name the export gave it, on every input that has it, e.g. "
              "sequence=128 (repeatable; a decoder's key/value cache: its past length once for all layers).")
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True,
              help="On CUDA, launch the model's kernels as CUDA graphs (the report gives the latency without "
              "them too).")
@click.option("--check-numerics-only", is_flag=True, help="Only build the model untuned and check it against "
              "onnxruntime (on a mismatch: the first operator whose output diverges); tune nothing.")
@click.option("--tune-anyway", is_flag=True, help="Tune even where the untuned build already disagrees with "
              "onnxruntime (by default that stops the run before the budget starts).")
@_experience_options
@_rpc_options
def tune_model_command(model, budget, target, work_dir, trials_per_batch, seed, repeatable, strategy, pipeline,
                       resume, precision, exact_math, input_shapes, axes, cuda_graph, check_numerics_only, tune_anyway,
                       experience_dir, no_experience, tracker, key) -> None:
    """Tune an ONNX model within a wall-clock budget; export a library and a report. The untuned
    build is checked against onnxruntime first: a mismatch stops the run before the budget starts."""
    _check_repeatable(repeatable, seed, strategy)
    from .measure.targets import describe, make_target
    from .model_tuning import (
        ModelError,
        NumericsMismatch,
        load_onnx,
        math_for,
        parse_dim,
        parse_input_shape,
        read_state,
        to_relax,
        tune_model,
    )

    work_dir = Path(work_dir or Path("kb-work") / Path(model).stem)
    experience = _experience(experience_dir, no_experience, strategy)
    try:  # every check before anything is written
        onnx_model = load_onnx(model, dict(parse_input_shape(text) for text in input_shapes),
                               dict(parse_dim(text) for text in axes))
        to_relax(onnx_model)
        tvm_target = make_target(target)
        read_state(work_dir, name=str(model), resume=resume, strategy=strategy, precision=precision,
                   math=math_for(tvm_target, exact=exact_math))
    except ValueError as err:  # ModelError included
        _fail(str(err))
    _register_intrinsics_for(tvm_target)
    if check_numerics_only:
        _check_numerics(onnx_model, tvm_target, precision, math_for(tvm_target, exact=exact_math))
        return
    _writable_dir(work_dir)
    runner = _rpc_runner(tracker, key, tvm_target, pipeline)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)  # progress lines instead
    click.echo(f"tuning {model} in {precision} ({math_for(tvm_target, exact=exact_math)} math) on {describe(tvm_target)} ({pipeline} pipeline"
               f"{_where(runner, tracker, key)}), budget {format_seconds(parse_budget(budget))}, work dir {work_dir}")

    try:
        report = tune_model(onnx_model, name=str(model), target=tvm_target, budget=budget, work_dir=work_dir,
                            trials_per_batch=trials_per_batch, seed=seed, repeatable=repeatable, strategy=strategy,
                            pipeline=pipeline, precision=precision, exact_math=exact_math, cuda_graph=cuda_graph,
                            tune_anyway=tune_anyway, runner=runner, resume=resume, experience=experience,
                            on_event=_show_model_event)
    except NumericsMismatch:  # the check's line is already shown, as its event
        click.secho("stopped before the budget: nothing was tuned (--tune-anyway tunes regardless)", fg="red",
                    err=True)
        sys.exit(3)
    except ModelError as err:
        _fail(str(err))
    except Exception as err:  # noqa: BLE001 - the tracker going away surfaces through MetaSchedule
        _measuring_lost(err, runner, work_dir, resumable=strategy in KB_STRATEGIES)
        raise
    finally:
        _close(runner)
    click.echo(f"tuned: {report['latency_tuned_ms']:.4f} ms end to end ({report['speedup']:.2f}x), "
               f"{report['trials']} trials in {format_seconds(report['seconds_spent'])}"
               + (f"; {report['latency_tuned_without_cuda_graph_ms']:.4f} ms without CUDA graphs"
                  if report["cuda_graph"] else ""))
    if report["numerics"]["constant_reference"]:
        click.secho("numerics UNVERIFIED: the reference's outputs do not vary with the input", fg="yellow", err=True)
    if not report["numerics"]["ok"]:
        click.secho(f"NUMERICS MISMATCH vs {report['numerics']['checked_against']}: "
                    f"{report['numerics']['mismatch']}", fg="red", err=True)
        sys.exit(3)
    click.echo(f"library: {report['library']}  report: {work_dir}/report.md")


def _check_numerics(onnx_model, tvm_target, precision: str, math: str) -> None:
    """`kb-tvm tune --check-numerics-only`: the verdict in one line; exit 3 on a mismatch."""
    from .model_tuning import ModelError, check_numerics

    try:
        verdict = check_numerics(onnx_model, tvm_target, precision=precision, math=math)
    except ModelError as err:
        _fail(str(err))
    click.secho(verdict.line(), fg=None if verdict.ok and not verdict.constant_reference
                else ("yellow" if verdict.ok else "red"))
    if not verdict.ok:
        sys.exit(3)


@main.command("worker")
@click.option("--tracker", required=True, metavar="HOST:PORT", help="The TVM RPC tracker to register with.")
@click.option("--key", required=True, help="The key tuning runs ask for (`kb-tvm tune ... --key KEY`).")
@click.option("--device", type=click.IntRange(0), default=None,
              help="The GPU this server measures on (CUDA_VISIBLE_DEVICES); one server per GPU.")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address the server listens on.")
@click.option("--port", type=click.IntRange(1, 65535), default=9090, show_default=True,
              help="First port to try; the next free one up to PORT+99 is taken.")
def worker(tracker, key, device, host, port) -> None:
    """Start one measuring server (TVM's rpc_server) registered at TRACKER under KEY."""
    import os

    from .measure.remote import parse_tracker

    try:
        parse_tracker(tracker)
    except ValueError as err:
        _fail(str(err))
    env = dict(os.environ)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
    command = [sys.executable, "-m", "tvm.exec.rpc_server", "--tracker", tracker, "--key", key, "--host", host,
               "--port", str(port), "--port-end", str(min(65536, port + 100))]
    click.echo(f"measuring server under key {key!r} at tracker {tracker}"
               + (f" on GPU {device}" if device is not None else "") + f": {' '.join(command)}")
    sys.stdout.flush()
    os.execvpe(sys.executable, command, env)  # TVM's own server, in this process


@main.command("train-model")
@click.option("--target", "key", required=True,
              help='Which targets\' rows to train on: "llvm-avx512", "llvm-avx2", "llvm" (baseline '
              'x86-64, as a bare llvm target gets), "cuda-sm_90" (cuda with its arch).')
@click.option("--experience", "experience_dir", type=click.Path(file_okay=False), default=None,
              help="The library to train on. Default: ~/.cache/kb_tvm/experience.")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Model file (xgboost JSON; a .meta.json goes beside it). Default: the library's "
              "models/TARGET.json, which tuning then prefers to the model shipped with kb_tvm.")
def train_model_command(key, experience_dir, out) -> None:
    """Fit the search's prior cost model offline on every run the experience library holds."""
    from .experience import Experience
    from .search import FEATURE_VERSION
    from .warm_start import train_model

    experience = Experience(experience_dir)
    try:
        model, meta = train_model(experience, key, FEATURE_VERSION)
    except ValueError as err:
        _fail(str(err))
    out = Path(out) if out else experience.path / "models" / f"{key}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    out.with_suffix(".meta.json").write_text(json.dumps(meta, indent=1))
    click.echo(f"trained on {meta['rows']} rows from {meta['workloads']} workloads: {out}")


@main.command("replay")
@click.argument("dataset", required=False)
@click.option("--list", "list_only", is_flag=True, help="Name the datasets, marking those held out from training.")
@click.option("--policy", type=click.Choice(["rules", "agent", "evolutionary", "random"]), default="rules",
              show_default=True, help="rules: kb's search; agent: kb's search steered by the trained agent; "
              "evolutionary: an emulation of stock MetaSchedule's; random: uniform samples.")
@click.option("--agent", "agent_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The agent for --policy agent (default: the one shipped with kb_tvm).")
@click.option("--budget", default="240s", show_default=True, callback=_budget,
              help="Simulated seconds, as the dataset's recorded costs count them.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--no-snap", is_flag=True, help="Answer schedules the dataset lacks with its surrogate instead of the "
              "nearest recorded schedule (results that lean on it are counted).")
@click.option("--datasets", "folders", multiple=True, type=click.Path(file_okay=False),
              help="A folder of datasets besides those shipped (repeatable), e.g. the repository's datasets/.")
@click.option("--json-out", type=click.Path(dir_okay=False), default=None, help="Summary and anytime curve as JSON.")
def replay_command(dataset, list_only, policy, agent_path, budget, seed, no_snap, folders, json_out) -> None:
    """Run a tuning strategy against a recorded dataset on a simulated clock: no GPU, seconds of CPU."""
    from .agent import agent_policy
    from .replay import POLICIES, DatasetError, ReplayEnv, catalog

    try:
        if list_only:
            for entry in catalog.entries(folders):
                head = _dataset_head(entry.path)
                click.echo(f"{entry.name:40s} {head['size']:6d} schedules {head['valid']:6d} valid"
                           f"{'  held out' if entry.held_out else ''}")
            return
        if dataset is None:
            _fail("name a dataset (kb-tvm replay --list shows them) or pass --list")
        entry, data = catalog.load(dataset, folders)
    except DatasetError as err:
        _fail(str(err))
    env = ReplayEnv(data, budget=budget, snap=not no_snap)
    try:
        strategy = agent_policy(agent_path) if policy == "agent" else POLICIES[policy]()
    except ValueError as err:  # an agent file of another schema
        _fail(str(err))
    strategy.run(env, seed=seed)
    summary = {"policy": policy, "seed": seed, "held_out": entry.held_out, "snap": not no_snap, **env.summary()}
    best = None
    for point in env.curve:
        if point["best_ms"] is not None and point["best_ms"] != best:
            best = point["best_ms"]
            click.echo(f"[{format_seconds(point['seconds']):>7}] trials {point['trials']:5d}  best {best:.4f} ms")
    leaned = f", {env.surrogate_trials} from the surrogate" if env.surrogate_trials else ""
    click.echo(f"{data.name} {policy}: best {summary['best_ms'] or float('nan'):.4f} ms (dataset best "
               f"{summary['dataset_best_ms'] or float('nan'):.4f}), area under curve {summary['area_under_curve']:.3f}, "
               f"{env.trials} trials{leaned} in {format_seconds(env.seconds)} simulated")
    if json_out:
        Path(json_out).write_text(json.dumps(summary, indent=1))


@main.command("train-agent")
@click.option("--datasets", "folders", multiple=True, type=click.Path(file_okay=False),
              help="A folder of datasets besides those shipped (repeatable); held-out ones are never used.")
@click.option("--budget", default="240s", show_default=True, callback=_budget, help="Simulated seconds per episode.")
@click.option("--episodes", default=4, show_default=True, type=click.IntRange(1), help="Runs per dataset.")
@click.option("--seconds-cost", default=0.01, show_default=True, type=click.FloatRange(0.0),
              help="What a whole budget of seconds is worth in relative speed-up (the reward's price of time).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(1), help="Processes replaying episodes.")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="The agent (JSON).")
def train_agent_command(folders, budget, episodes, seconds_cost, seed, jobs, out) -> None:
    """Train the agent offline: kb's search replayed on every training dataset under random
    macro-actions, then fitted Q-iteration. No GPU."""
    from .agent import collect, fit
    from .replay import DatasetError, catalog

    try:
        entries = [e for e in catalog.entries(folders) if not e.held_out]
        datasets = [catalog.load(str(e.path))[1] for e in entries]
    except DatasetError as err:
        _fail(str(err))
    if not datasets:
        _fail("no training dataset: every dataset found is held out")
    click.echo(f"collecting: {len(datasets)} datasets x {episodes} episodes of {budget}")
    transitions = collect(datasets, budget=parse_budget(budget), episodes=episodes, seed=seed,
                          seconds_cost=seconds_cost, jobs=jobs)
    policy = fit(transitions, seed=seed, source=f"kb-tvm train-agent ({len(transitions)} transitions)",
                 trained_on=[e.name for e in entries])
    click.echo(f"trained on {len(transitions)} transitions: {policy.save(out)}")


def _dataset_head(path: Path) -> dict:
    import gzip

    with gzip.open(path, "rt") as f:
        return json.loads(f.readline())


def _register_experience() -> None:
    from .experience.cli import experience_group

    main.add_command(experience_group)


_register_experience()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
