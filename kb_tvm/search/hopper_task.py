"""The Hopper template's variant search for one task on the local GPU: each variant built, checked
against the task's own output and timed, a line of hopper.jsonl each. tune-op's template region
(tuning.py) and a model's Hopper stage (model_tuning/hopper_stage.py) both run it."""

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



@dataclass(frozen=True, eq=False)
class HopperChoice:
    task: str
    fused: object  # search.hopper_match.FusedGemm
    tile: object  # schedules.hopper_gemm.GemmTile
    seconds: float

    def kernel(self):
        return _extern(self.fused, self.tile, self.task)



def _extern(fused, tile, task: str):
    from ..measure.extern_kernel import ExternKernel

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



def search_task(fused, name: str, target, device, reference, *, until, work_dir: Path, earlier: list[dict],
                notify=lambda event: None) -> HopperChoice | None:
    """kb's variant search for one task (search/hopper_variants.py) until `until()` or until it
    stops itself: each variant built, compared with `reference(arrays)` (the task's output on
    those arrays) on two input sets, then timed, and appended to the work dir's hopper.jsonl.
    Variants measured before (`earlier`, that file's rows) are not measured again. None when the
    template admits no variant of this shape or none computed right."""
    from .hopper_variants import VariantSearch

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
    from .hopper_variants import VariantSearch

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

    from ..measure.extern_kernel import compile_kernels

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
