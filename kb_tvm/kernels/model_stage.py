"""The kernel families' stage of `kb-tvm tune`: their kernels for a model's tasks, searched first
inside the budget (`search_kernels`), then built into the model in sets (`options`), the fastest
right one kept. Not measured through an RPC runner; not in MetaSchedule's database."""

from __future__ import annotations

from pathlib import Path

from . import applicable
from .family import NotApplicable
from .task_search import SHARE_OF_BUDGET, KernelChoice, local_device, read_rows, start_search, task_output


def search_kernels(tasks, untuned, target, *, precision: str | None, budget, work_dir: Path,
                   default_latency: dict[str, float], constants: dict[str, frozenset[int]],
                   share: float = SHARE_OF_BUDGET, notify=lambda event: None) -> dict[str, KernelChoice]:
    """The best right variant per task some family computes (of every family that serves `target`
    and `precision`), within `share` of what is left of `budget` (a started TuningBudget), split
    among the tasks by their model time, hottest first (`slice_end`), after a first pass that gives
    each task its first right variant, on this machine's device.
    `untuned`: the untuned executable, whose kernels are the reference: every variant is run on
    the same activation-like inputs and compared before it is timed (a wrong one is never
    chosen). Every measured variant is a row of the work dir's kernels.jsonl, which `--resume`
    replays, so that a measured variant is not measured again. `constants`: each task's inputs
    the model holds constant (extern.constant_inputs), which a family may pack once at build."""
    families = applicable(target, precision)
    if not families:
        return {}
    stop_at = budget.spent + share * budget.remaining
    device = local_device(target)
    library = untuned.mod.imports[0]
    model_time = {str(t.task_name): float(t.weight) * default_latency[str(t.task_name)] for t in tasks}
    matched = []  # (task, its PrimFunc, family, problem), hottest task first
    for task in sorted(tasks, key=lambda t: -model_time[str(t.task_name)]):
        name, mod = str(task.task_name), task.dispatched[0]
        for family in families:
            try:
                matched.append((name, mod["main"], family, family.match(mod, target)))
            except NotApplicable as why:  # not a task the family computes
                if family.shows_refusals_of and family.shows_refusals_of in name:
                    notify({"event": "kernel_skip", "family": family.name, "task": name, "why": str(why)})
    # a task two families compute shares its model time between their searches
    families_of = {name: sum(n == name for n, *_ in matched) for name, *_ in matched}
    weight = {name: model_time[name] / families_of[name] for name in families_of}

    earlier = read_rows(work_dir)
    started = {}  # one search per (task, family), its inputs and references made once for both passes

    def search_one(entry, until, first_right_only):
        name, func, family, problem = entry
        if (name, family.name) not in started:
            started[name, family.name] = start_search(
                family, problem, func, name, target, device,
                lambda arrays: task_output(library, name, arrays, device), work_dir=work_dir, earlier=earlier,
                constants=constants.get(name, frozenset()), notify=notify)
        run = started[name, family.name]
        return None if run is None else run(until, first_right_only)

    out = run_stage(matched, weight, stop_at, lambda: budget.spent, search_one)
    for name, choice in sorted(out.items()):
        notify({"event": "kernel_best", "family": choice.family.name, "task": name, "seconds": choice.seconds,
                "variant": choice.family.describe(choice.params), "default_s": default_latency[name]})
    return out


def run_stage(matched: list[tuple], weight: dict[str, float], stop_at: float, clock, search_one) -> dict:
    """Two passes over `matched` ((task name, ...), hottest first): each task's first right
    variant, all within the stage's seconds (`stop_at` on `clock()`), then each task's slice of
    what is left (`slice_end`). Without the first pass a hot task's variants that run over its
    slice take the slices of the tasks after it, and the last ones get none.
    `search_one(entry, until, first_right_only)` searches one task, going on where its last call
    stopped (task_search.start_search). The best choice per task name."""
    out: dict = {}
    searched = matched
    for first_pass in (True, False):
        found = []
        for i, entry in enumerate(searched):
            name = entry[0]
            task_stop = stop_at if first_pass else slice_end(
                clock(), stop_at, weight[name], sum(weight[e[0]] for e in searched[i:]))
            choice = search_one(entry, lambda task_stop=task_stop: clock() >= task_stop, first_pass)
            if choice is not None:
                found.append(entry)
                if name not in out or choice.seconds < out[name].seconds:
                    out[name] = choice
        searched = found  # a task with no right variant by the stage's end gets none later
    return out


def left_to_search(tasks: list, found: dict[str, KernelChoice]) -> list:
    """The tasks MetaSchedule still searches: all but those whose family's kernel its space
    cannot reach (`KernelFamily.metaschedule_competes`)."""
    return [t for t in tasks if str(t.task_name) not in found or found[str(t.task_name)].family.metaschedule_competes]


def slice_end(now: float, end: float, model_time: float, model_time_left: float) -> float:
    """When one task's variant search stops: its share, by the model time of the tasks still to
    search (this one's included), of the stage's seconds left. What a task leaves unspent goes
    to those after it."""
    return now + (end - now) * model_time / model_time_left


def choose(found: dict[str, KernelChoice], used_latency: dict[str, float]) -> list[KernelChoice]:
    """The family's kernel for each task where it beats what the build would use otherwise."""
    return [c for name, c in sorted(found.items()) if c.seconds < used_latency[name]]


def options(found: dict[str, KernelChoice], used_latency: dict[str, float]) -> list[list[KernelChoice]]:
    """The sets of the families' kernels worth building the model with, to keep the fastest end
    to end: none, those that win alone (`choose`), all. Alone, a kernel's time counts the host's
    work of each call (TVM encodes both TMA descriptors of a Hopper GEMM on every call) and so
    understates it for a CUDA-graph build, which does that work once: on BERT-base, stock's
    schedules with all four matmul kernels ran 0.797 ms in graphs, against 1.026 without them,
    where the kernels alone won only one of four against kb's (H200, fp16)."""
    out: list[list[KernelChoice]] = []
    for kernels in ([], choose(found, used_latency), [c for _, c in sorted(found.items())]):
        if [c.task for c in kernels] not in [[c.task for c in o] for o in out]:
            out.append(kernels)
    return out
