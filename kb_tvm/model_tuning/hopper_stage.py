"""The Hopper template's kernels for a model's matmul tasks (fp16/bf16 on an sm_90 GPU).

Each task the template computes, epilogue included (search/hopper_match.py), gets kb's variant
search (search/hopper_variants.py) before MetaSchedule's search starts, hottest task first, on
this machine's GPU. Every variant is run once and compared with the task as the untuned build
computes it, on the same activation-like inputs, before it is timed: a wrong result is a failed
variant, never a choice. After MetaSchedule's search, the model is built with each set of
`options` (none, those faster alone than the task's schedule, all) and the fastest end to end
that still matches the reference is kept.

Every measured variant is a line of `hopper.jsonl` in the work dir (task, shape, the template's
parameters, seconds, build and run seconds, whether it computed right): `--resume` replays it, so
a measured variant is not measured again. Left out: an RPC runner does not measure these variants
(the local GPU does), and MetaSchedule's database does not hold them (they are not schedules of
the task's TIR)."""

from __future__ import annotations

from pathlib import Path

from ..search.hopper_task import SHARE_OF_BUDGET, HopperChoice, on_hopper, read_rows, search_task, task_output


def applies(target, precision: str) -> bool:
    """Whether the template can serve this job: half precision on an sm_90 (Hopper) GPU."""
    return precision in ("fp16", "bf16") and on_hopper(target)


def search_kernels(tasks, untuned, target, *, budget, work_dir: Path, default_latency: dict[str, float],
                   share: float = SHARE_OF_BUDGET, notify=lambda event: None) -> dict[str, HopperChoice]:
    """The best right variant per task the template computes, within `share` of what is left of
    `budget` (a started TuningBudget), split among the tasks by their model time, hottest first
    (`slice_end`). `untuned`: the untuned executable, whose kernels are the reference."""
    import tvm

    from ..search.hopper_match import NotAHopperGemm, match_fused_gemm

    earlier = read_rows(work_dir)
    stop_at = budget.spent + share * budget.remaining
    device = tvm.cuda(0)
    library = untuned.mod.imports[0]
    out: dict[str, HopperChoice] = {}
    model_time = {str(t.task_name): float(t.weight) * default_latency[str(t.task_name)] for t in tasks}
    matched = []
    for task in sorted(tasks, key=lambda t: -model_time[str(t.task_name)]):  # hottest first
        name = str(task.task_name)
        try:
            matched.append((name, match_fused_gemm(task.dispatched[0])))
        except NotAHopperGemm as why:  # not a GEMM the template computes
            if "matmul" in name:
                notify({"event": "hopper_skip", "task": name, "why": str(why)})
    for i, (name, fused) in enumerate(matched):
        task_stop = slice_end(budget.spent, stop_at, model_time[name], sum(model_time[n] for n, _ in matched[i:]))
        choice = search_task(fused, name, target, device,
                             lambda arrays, name=name: task_output(library, name, arrays, device),
                             until=lambda task_stop=task_stop: budget.spent >= task_stop, work_dir=work_dir,
                             earlier=earlier, notify=notify)
        if choice is not None:
            out[name] = choice
            notify({"event": "hopper_best", "task": name, "seconds": choice.seconds, "tile": choice.tile.describe(),
                    "default_s": default_latency[name]})
    return out


def slice_end(now: float, end: float, model_time: float, model_time_left: float) -> float:
    """When one task's variant search stops: its share, by the model time of the tasks still to
    search (this one's included), of the stage's seconds left. What a task leaves unspent goes
    to those after it."""
    return now + (end - now) * model_time / model_time_left


def choose(found: dict[str, HopperChoice], used_latency: dict[str, float]) -> list[HopperChoice]:
    """The template's kernel for each task where it beats what the build would use otherwise."""
    return [c for name, c in sorted(found.items()) if c.seconds < used_latency[name]]


def options(found: dict[str, HopperChoice], used_latency: dict[str, float]) -> list[list[HopperChoice]]:
    """The sets of the template's kernels worth building the model with, to keep the fastest end
    to end: none, those that win alone (`choose`), all. Alone, a kernel's time counts the host's
    work of each call (TVM encodes both TMA descriptors on every call) and so understates it for
    a CUDA-graph build, which does that work once: on BERT-base, stock's schedules with all four
    matmul kernels ran 0.797 ms in graphs, against 1.026 without them, where the kernels alone
    won only one of four against kb's (H200, fp16)."""
    out: list[list[HopperChoice]] = []
    for kernels in ([], choose(found, used_latency), [c for _, c in sorted(found.items())]):
        if [c.task for c in kernels] not in [[c.task for c in o] for o in out]:
            out.append(kernels)
    return out
