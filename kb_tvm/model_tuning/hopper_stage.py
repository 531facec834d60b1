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

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FILE_NAME = "hopper.jsonl"
SHARE_OF_BUDGET = 0.2  # at most this much of the job's seconds: the template's search is short
ARCH = "sm_90a"  # wgmma and setmaxnreg need the arch-specific target; MetaSchedule and dlight keep sm_90


def on_hopper(target) -> bool:
    """Whether the target is an sm_90 (Hopper) GPU, where the template's kernels run."""
    arch = str(target.attrs.get("arch", "")) if target.kind.name == "cuda" else ""
    return arch.startswith("sm_9")


def applies(target, precision: str) -> bool:
    """Whether the template can serve this job: half precision on an sm_90 (Hopper) GPU."""
    return precision in ("fp16", "bf16") and on_hopper(target)


@dataclass(frozen=True, eq=False)
class HopperChoice:
    task: str
    fused: object  # search.hopper_match.FusedGemm
    tile: object  # schedules.hopper_gemm.GemmTile
    seconds: float

    def kernel(self):
        return _extern(self.fused, self.tile, self.task)


def _extern(fused, tile, task: str):
    from .extern_kernels import ExternKernel

    symbol = f"kb_hopper_{task}"
    splits = tile.k_splits
    if splits > 1:  # the template's partial sums, then the sum with the task's epilogue
        return ExternKernel(task=task, symbol=symbol, func=fused.kernel(tile, symbol),
                            shapes=tuple(fused.partial_shapes(splits)), arch=ARCH, takes=fused.gemm_inputs,
                            then=fused.summed(splits, f"{symbol}_then"), then_shapes=tuple(fused.summed_shapes(splits)))
    return ExternKernel(task=task, symbol=symbol, func=fused.kernel(tile, symbol), shapes=tuple(fused.kernel_shapes()),
                        arch=ARCH)


def read_rows(work_dir: Path) -> list[dict]:
    path = Path(work_dir) / FILE_NAME
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line torn by a kill: that variant is measured again
            continue
    return rows


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


def search_task(fused, name: str, target, device, reference, *, until, work_dir: Path, earlier: list[dict],
                notify=lambda event: None) -> HopperChoice | None:
    """kb's variant search for one task (search/hopper_variants.py) until `until()` or until it
    stops itself: each variant built, compared with `reference(arrays)` (the task's output on
    those arrays) on two input sets, then timed, and appended to the work dir's hopper.jsonl.
    Variants measured before (`earlier`, that file's rows) are not measured again. None when the
    template admits no variant of this shape or none computed right."""
    from ..search.hopper_variants import VariantSearch

    p = fused.problem
    try:
        search = VariantSearch(p.m, p.n, p.k, p.dtype, p.b_layout, batch=p.batch, b_batched=p.b_batched)
    except ValueError as why:  # no tile fits the shape
        notify({"event": "hopper_skip", "task": name, "why": str(why)})
        return None
    search.replay([r for r in earlier if r["task"] == name])
    inputs = [_inputs(fused, seed) for seed in (0, 1)]
    references = [reference(arrays) for arrays in inputs]
    with (Path(work_dir) / FILE_NAME).open("a") as log:
        while not until() and (tile := search.ask()) is not None:
            row = _measure(fused, tile, target, device, inputs, references, name)
            search.tell(tile, row["seconds"])
            log.write(json.dumps(row) + "\n")
            log.flush()
            notify({"event": "hopper_variant", **row})
    if search.best is None:
        return None
    tile, seconds = search.best
    return HopperChoice(task=name, fused=fused, tile=tile, seconds=seconds)


def choose(found: dict[str, HopperChoice], used_latency: dict[str, float]) -> list[HopperChoice]:
    """The template's kernel for each task where it beats what the build would use otherwise."""
    return [c for name, c in sorted(found.items()) if c.seconds < used_latency[name]]


def options(found: dict[str, HopperChoice], used_latency: dict[str, float]) -> list[list[HopperChoice]]:
    """The sets of the template's kernels worth building the model with, to keep the fastest end
    to end: none, those that win alone (`choose`), all. Alone, a kernel's time counts the host's
    work of each call (TVM encodes both TMA descriptors on every call) and so understates it for
    a CUDA-graph build, which does that work once: on BERT-base, stock's schedules with all four
    matmul kernels ran 0.797 ms in graphs, against 1.026 without them, where the kernels alone
    won only one of four against kb's (bench-results/h200-issue12/run7)."""
    out: list[list[HopperChoice]] = []
    for kernels in ([], choose(found, used_latency), [c for _, c in sorted(found.items())]):
        if [c.task for c in kernels] not in [[c.task for c in o] for o in out]:
            out.append(kernels)
    return out


def _inputs(fused, seed: int) -> list[np.ndarray]:
    """Activation-like arrays for the task's parameters in its own shapes, the output last (zeros)."""
    from ..measure.workers import activation_like

    arrays = []
    for i, buf in enumerate(fused.params):
        shape = [int(d) for d in buf.ty.shape]
        dtype = str(buf.ty.dtype)
        last = i == len(fused.params) - 1
        arrays.append(np.zeros(shape, dtype=activation_like([1], dtype).dtype) if last
                      else activation_like(shape, dtype, seed=seed * 100 + i))
    return arrays


def task_output(library, name: str, arrays, device) -> np.ndarray:
    """The output of function `name` of a built module (the untuned build: the reference) on
    `arrays`, the output array last."""
    import tvm

    args = [tvm.runtime.tensor(a, device) for a in arrays]
    library[name](*args)
    return args[-1].numpy().astype(np.float32)


def _measure(fused, tile, target, device, inputs, references, name: str) -> dict:
    """Build, check on both input sets, time: one line of hopper.jsonl. A split-K variant is its
    two kernels, checked and timed together."""
    from ..search.hopper_variants import VariantSearch

    p = fused.problem
    row = {"task": name, "m": p.m, "n": p.n, "k": p.k, "batch": p.batch, "dtype": p.dtype,
           **VariantSearch.record(tile, None),
           "build_s": None, "run_s": None, "ok": False, "error": None}
    started = time.perf_counter()
    try:
        kernel = _extern(fused, tile, name)
        steps = _compile(kernel, target)
    except Exception as err:  # noqa: BLE001 - TVM's compiler raises many kinds; the variant failed
        row.update(build_s=time.perf_counter() - started, error=f"build: {_first_line(err)}")
        return row
    row["build_s"] = time.perf_counter() - started
    started = time.perf_counter()
    for arrays, expected in zip(inputs, references):
        calls = _arguments(kernel, arrays, device)
        for (library, symbol), args in zip(steps, calls):
            library[symbol](*args)
        got = calls[-1][-1].numpy().astype(np.float32).reshape(expected.shape)
        wrong = _mismatch(expected, got)
        if wrong:
            row.update(run_s=time.perf_counter() - started, error=f"wrong result: {wrong}")
            return row
    seconds = sum(float(np.median(library.time_evaluator(symbol, device, number=20, repeat=5, min_repeat_ms=10)(
        *args).results)) for (library, symbol), args in zip(steps, calls))
    row.update(run_s=time.perf_counter() - started, ok=True, seconds=seconds)
    return row


def _compile(kernel, target) -> list[tuple[object, str]]:
    """(library, symbol) of each kernel a variant runs: the template's, then a split-K's sum, which
    is scheduled as the build schedules it (dlight)."""
    import tvm
    from tvm.s_tir import dlight as dl

    from .extern_kernels import compile_kernels

    steps = [(compile_kernels([kernel], target), kernel.symbol)]
    if kernel.then is not None:
        name = kernel.then_symbol
        mod = tvm.IRModule({name: kernel.then.with_attr("global_symbol", name)})
        with target:
            mod = dl.ApplyDefaultSchedule(dl.gpu.Fallback())(mod)
            steps.append((tvm.compile(mod, target=target).mod, name))
    return steps


def _arguments(kernel, arrays, device) -> list[list]:
    """Each kernel's arguments on the device from the task's arrays (its output last)."""
    import tvm

    if kernel.then is None:
        return [[tvm.runtime.tensor(a.reshape(shape), device) for a, shape in zip(arrays, kernel.shapes)]]
    *inputs, output = arrays
    partials = tvm.runtime.empty(list(kernel.shapes[-1]), "float32", device)
    first = [tvm.runtime.tensor(inputs[i].reshape(shape), device) for i, shape in zip(kernel.takes, kernel.shapes)]
    rest = [a for i, a in enumerate(inputs) if i not in kernel.takes]
    then = [partials] + [tvm.runtime.tensor(a.reshape(shape), device) for a, shape in
                         zip([*rest, output], kernel.then_shapes[1:])]
    return [[*first, partials], then]


def _mismatch(expected: np.ndarray, got: np.ndarray) -> str | None:
    """Half-precision outputs of two fp32-accumulating kernels agree to about 1% of the output's
    scale; a wrong kernel is off by far more."""
    scale = float(np.abs(expected).max()) or 1.0
    error = float(np.abs(expected - got).max())
    if not np.isfinite(got).all():
        return "non-finite values"
    return None if error <= 0.02 * scale else f"max error {error:.3g} against a scale of {scale:.3g}"


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[-1][:300] if text else type(err).__name__
