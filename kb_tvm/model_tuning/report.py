"""What a run reports: the per-task rows, the estimated latency curve and its plot, the
numerics check of the tuned build's outputs, and report.md."""

from __future__ import annotations

from pathlib import Path

from .numerics import CONSTANT_WARNING


def _task_row(name, weight, default, after, total, total_after, stats, device_seconds=None, kernel=None, *,
              flop: float | None = None, ceiling_s: float | None = None) -> dict:
    """kernel: the family and variant that replaces the task (KernelChoice.describe), if one does.
    flop: its FLOPs per call; ceiling_s: the least seconds per call the machine allows (`of_ceiling`
    is the fraction of that it reaches)."""
    return {"task": name, "weight": weight, "share_of_model_time": weight * default / total,
            "gflops": flop / after / 1e9 if flop and after else None,
            "of_ceiling": ceiling_s / after if ceiling_s and after else None,
            "share_at_end": weight * after / total_after,
            "seconds": stats.seconds if stats else None, "trials": stats.trials if stats else None,
            "device_seconds": device_seconds,
            "latency_before_ms": default * 1e3, "latency_after_ms": after * 1e3,
            "schedule": kernel if kernel else "default" if after == default else "tuned",
            "retired": stats.retired if stats else None, "revived": stats.revivals if stats else 0}


def device_seconds(rows) -> dict:
    """Seconds the devices spent timing candidates (each candidate's run_s, repeats included),
    per task and per device ("this machine" where no RPC server did it). Runners that report no
    run seconds (MetaSchedule's own) leave both empty."""
    per_task: dict[str, float] = {}
    per_device: dict[str, float] = {}
    for row in rows:
        if row.get("run_s") is None:
            continue
        device = row.get("measured_on") or "this machine"
        per_task[row["task"]] = per_task.get(row["task"], 0.0) + row["run_s"]
        per_device[device] = per_device.get(device, 0.0) + row["run_s"]
    return {"per_task": {k: round(v, 3) for k, v in per_task.items()},
            "per_device": {k: round(v, 3) for k, v in sorted(per_device.items())}}


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



def _tolerance_text(numerics: dict) -> str:
    tolerance, error = numerics.get("tolerance"), numerics.get("max_abs_error")
    if not tolerance:
        return ""
    measured = "" if error is None else f"max abs error {error:.3g}; "
    return (f" ({measured}allowed: {tolerance['rtol']:g} x |reference| + max({tolerance['atol_floor']:g}, "
            f"{tolerance['atol_of_scale']:g} x max |reference|))")


def _numerics_verdict(numerics: dict) -> str:
    if not numerics["ok"]:
        return f"**MISMATCH: {numerics['mismatch']}**"
    if numerics.get("constant_reference"):  # ok proves nothing there
        return f"**UNVERIFIED**: {CONSTANT_WARNING}"
    return "ok"


def _untuned_line(numerics: dict) -> list[str]:
    untuned = numerics.get("untuned")
    if not untuned or untuned["ok"]:
        return []
    where = f"; {untuned['first_divergence']}" if untuned.get("first_divergence") else ""
    return [f"- **the untuned build already disagreed** (tuned with --tune-anyway): {untuned['mismatch']}{where}"]


def _device_lines(seconds: dict | None) -> list[str]:
    if not seconds or not seconds["per_device"]:
        return []
    spent = ", ".join(f"{device} {s:.0f} s" for device, s in seconds["per_device"].items())
    return [f"- device seconds timing candidates: {spent}"]


def _number(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _space_lines(report: dict) -> list[str]:
    fallback, refused = report.get("tasks_on_fallback_space") or {}, report.get("tasks_without_design_space") or {}
    return ([f"- searched with elementwise producers inlined (TVM's rules fail on them as they are): "
             f"{', '.join(fallback)}"] if fallback else []) + \
        ([f"- default schedule (no design space: TVM's rules fail on them): {', '.join(refused)}"] if refused else []) + \
        [f"- default schedule (its tuned schedule computed something else, {why}): {task}"
         for task, why in (report.get("wrong_schedules_dropped") or {}).items()]


def report_markdown(report: dict) -> str:
    lines = [
        f"# kb-tvm report: {report['model']}",
        "",
        f"- end-to-end latency: untuned {report['latency_untuned_ms']:.4f} ms -> tuned "
        f"{report['latency_tuned_ms']:.4f} ms ({report['speedup']:.2f}x)",
        *([("- CUDA graphs: both builds launch their kernels as CUDA graphs; the tuned build without them: "
             f"{report['latency_tuned_without_cuda_graph_ms']:.4f} ms")] if report.get("cuda_graph") else []),
        f"- budget: {report['seconds_spent']:.0f} s spent of {report['budget_s']:.0f} s, {report['trials']} trials "
        f"({report['strategy']})",
        f"- precision: {report.get('precision', 'fp32')} (matmuls and convolutions; fp32 accumulation)",
        f"- math: {report.get('math', 'exact')} ("
        + ("TVM's fast approximations of erf, exp, tanh, sigmoid and softmax; --exact-math keeps libm's)"
           if report.get("math") == "fast" else "libm's erf, exp, tanh, sigmoid and softmax)"),
        f"- numerics vs {report['numerics']['checked_against']}, "
        f"{report['numerics'].get('input_sets', 1)} sets of inputs: "
        + _numerics_verdict(report["numerics"])
        + _tolerance_text(report["numerics"]),
        *_untuned_line(report["numerics"]),
        f"- library: `{report['library']}`",
        *_device_lines(report.get("device_seconds")),
        *([f"- CPU threads: {report['cpu_threads']} (every timing here; run the library with "
           f"TVM_NUM_THREADS={report['cpu_threads']}: TVM alone takes half of an x86 machine's CPUs)"]
          if report.get("cpu_threads") else []),
        *_space_lines(report),
        "",
        "![end-to-end latency against seconds spent](latency.png)",
        "",
        "Latency before = the task's default schedule in the untuned build; after = the schedule the "
        "tuned build uses (a tuned record only where it beats the default; a kernel family's name "
        "and parameters = that family's kernel (kb_tvm/kernels), its row in kernels.jsonl). Share of model time: "
        "weight x latency over all tasks, untuned and at the end. GFLOP/s and of ceiling: at the end; the "
        f"ceiling is {report['ceiling']}." if report.get("ceiling") else
        "weight x latency over all tasks, untuned and at the end. GFLOP/s: at the end.",
        "",
        "| task | weight | share untuned | share at end | seconds | device s | trials | before ms | after ms | GFLOP/s "
        "| of ceiling | schedule | retired |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in report["tasks"]:
        seconds = "-" if t["seconds"] is None else f"{t['seconds']:.0f}"
        trials = "-" if t["trials"] is None else str(t["trials"])
        on_device = "-" if t.get("device_seconds") is None else f"{t['device_seconds']:.1f}"
        lines.append(f"| {t['task']} | {t['weight']:g} | {t['share_of_model_time']:.1%} | {t['share_at_end']:.1%} | "
                     f"{seconds} | {on_device} | {trials} | "
                     f"{t['latency_before_ms']:.4f} | {t['latency_after_ms']:.4f} | {_number(t.get('gflops'), '.1f')} | "
                     f"{_number(t.get('of_ceiling'), '.0%')} | {t['schedule']} | {t['retired'] or ''} |")
    return "\n".join(lines) + "\n"
