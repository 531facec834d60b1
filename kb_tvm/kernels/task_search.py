"""One task's variant search for one kernel family on the local device: each variant the family
proposes built, checked against the task's own output and timed, a line of kernels.jsonl each.
tune-op's region (tuning.py) and a model's stage (model_stage.py) both run it."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..measure.targets import tvmscript_stack_from_linecache
from ..measure.timer import time_function
from ..measure.timing import TimingPolicy
from .extern import packed_from
from .family import KernelFamily, NotApplicable

FILE_NAME = "kernels.jsonl"

SHARE_OF_BUDGET = 0.2  # at most this much of the job's seconds: the families' searches are short


@dataclass(frozen=True, eq=False)
class KernelChoice:
    """A task's best right variant of a family: what rebuilds its kernel, and its seconds."""

    task: str
    family: KernelFamily
    problem: object  # what family.match read off the task
    params: object  # the family's parameters of the variant
    seconds: float
    target: object = None

    def kernel(self):
        return build_variant(self.family, self.problem, self.params, self.target, self.task)

    def describe(self) -> str:
        """The family and variant, one line (report rows, events)."""
        return f"{self.family.name} {self.family.describe(self.params)}"


def build_variant(family: KernelFamily, problem, params, target, task: str):
    """`family.build`, its TVMScript made without `inspect.stack`'s module lookups: the families
    write their kernels in TVMScript, and those lookups took a third of a CPU GEMM variant's
    build on 2 cores (0.16 s a variant against 0.11 without)."""
    with tvmscript_stack_from_linecache():
        return family.build(problem, params, target, task)


def local_device(target):
    """The device of this machine that runs `target`'s kernels (the families' are measured here)."""
    import tvm

    return tvm.device("cpu" if target.kind.name == "llvm" else target.kind.name, 0)


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


def search_task(family: KernelFamily, problem, func, name: str, target, device, reference, *, until,
                work_dir: Path, earlier: list[dict], constants: frozenset[int] = frozenset(),
                first_right_only: bool = False, notify=lambda event: None) -> KernelChoice | None:
    """The family's variant search for task `name` (`func`: its PrimFunc) until `until()` or until
    it stops itself (with `first_right_only`, once some variant ran right): each variant built,
    compared with `reference(arrays)` (the task's output on those arrays) on two input sets, then
    timed, and appended to the work dir's kernels.jsonl. Variants measured before
    (`earlier`, that file's rows) are not measured again. `constants`: the task's inputs a model
    holds constant (`KernelFamily.variants`). None when the family admits no variant of this
    shape or none computed right."""
    run = start_search(family, problem, func, name, target, device, reference, work_dir=work_dir,
                       earlier=earlier, constants=constants, notify=notify)
    return None if run is None else run(until, first_right_only)


def start_search(family: KernelFamily, problem, func, name: str, target, device, reference, *, work_dir: Path,
                 earlier: list[dict], constants: frozenset[int] = frozenset(), notify=lambda event: None):
    """`search_task`'s search, started: `run(until, first_right_only=False)` measures until either
    stops it and gives the best right variant so far (or None); a later call goes on where the
    last stopped, with the same inputs and references. None when the family admits no variant of
    this shape."""
    try:
        search = family.variants(problem, target, constants=constants)
    except NotApplicable as why:  # no variant fits the shape
        notify({"event": "kernel_skip", "family": family.name, "task": name, "why": str(why)})
        return None
    for row in earlier:
        if row["task"] == name and row.get("family") == family.name:
            params = family.from_record(row)
            # a variant an earlier kb_tvm proposed and this one does not (a constant B it now
            # packs at build) is not this search's: its row is left out of it
            if params in search.pool:
                search.tell(params, row["seconds"])
    inputs = [family.check_inputs(problem, task_inputs(list(func.params), seed), seed) for seed in (0, 1)]
    references = [reference(arrays) for arrays in inputs]

    def run(until, first_right_only: bool = False) -> KernelChoice | None:
        with (Path(work_dir) / FILE_NAME).open("a") as log:
            while not until() and not (first_right_only and search.best) and (params := search.ask()) is not None:
                row = _measure(family, problem, params, target, device, inputs, references, name)
                search.tell(params, row["seconds"])
                log.write(json.dumps(row) + "\n")
                log.flush()
                notify({"event": "kernel_variant", **row})
        if search.best is None:
            return None
        params, seconds = search.best
        return KernelChoice(task=name, family=family, problem=problem, params=params, seconds=seconds, target=target)

    return run


def task_inputs(params: list, seed: int) -> list[np.ndarray]:
    """Activation-like arrays for the task's parameters (`params`: its buffers) in its own shapes,
    the output last (zeros)."""
    from ..measure.timer import activation_like

    arrays = []
    for i, buf in enumerate(params):
        shape = [int(d) for d in buf.ty.shape]
        dtype = str(buf.ty.dtype)
        last = i == len(params) - 1
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


def _measure(family: KernelFamily, problem, params, target, device, inputs, references, name: str) -> dict:
    """Build, check on both input sets, time: one line of kernels.jsonl. A kernel with a `then`
    (a split-K's sum) is its two kernels, checked and timed together."""
    row = {"family": family.name, "task": name, **family.problem_record(problem), **family.record(params),
           "seconds": None, "build_s": None, "run_s": None, "ok": False, "error": None}
    started = time.perf_counter()
    try:
        kernel = build_variant(family, problem, params, target, name)
        steps = _compile(kernel, target)
        packers = compile_packings(kernel, target)
    # TVM's rejections (ScheduleError, InternalError) and nvcc's "Compilation error" are RuntimeErrors:
    # the variant failed; a TypeError or the like from the family's own code propagates
    except (RuntimeError, TimeoutError) as err:
        row.update(build_s=time.perf_counter() - started, error=f"build: {_first_line(err)}")
        return row
    row["build_s"] = time.perf_counter() - started
    started = time.perf_counter()
    for arrays, expected in zip(inputs, references):
        calls = kernel_arguments(kernel, arrays, device, packers)
        for (library, symbol), args in zip(steps, calls):
            library[symbol](*args)
        got = calls[-1][-1].numpy().astype(np.float32).reshape(expected.shape)
        wrong = kernel_mismatch(expected, got, family.tolerance)
        if wrong:
            row.update(run_s=time.perf_counter() - started, error=f"wrong result: {wrong}")
            return row
    cpu = target.kind.name != "cuda"
    seconds = sum(time_function(library, symbol, device, args, TimingPolicy(), cpu=cpu)["median_s"]
                  for (library, symbol), args in zip(steps, calls))
    row.update(run_s=time.perf_counter() - started, ok=True, seconds=seconds)
    return row


def _compile(kernel, target) -> list[tuple[object, str]]:
    """(library, symbol) of each kernel a variant runs: the family's, then its `then` (a split-K's
    sum), which is scheduled as the build schedules it (dlight)."""
    import tvm

    from .extern import compile_kernels

    steps = [(compile_kernels([kernel], target), kernel.symbol)]
    if kernel.then is not None:
        name = kernel.then_symbol
        steps.append((_compile_unscheduled(tvm.IRModule({name: kernel.then.with_attr("global_symbol", name)}),
                                           target), name))
    return steps


def compile_packings(kernel, target) -> dict:
    """The kernel's packings (`ExternKernel.packs`), compiled: input index -> library (a model's
    build folds them on its constants, on the CPU)."""
    import tvm

    return {i: _compile_unscheduled(tvm.IRModule({"main": pack}), target) for i, pack in kernel.packs}


def _compile_unscheduled(mod, target):
    """A module of plain TIR compiled for `target`: on a GPU scheduled first as the build
    schedules what no tuning covered (dlight's fallback)."""
    import tvm
    from tvm.s_tir import dlight as dl

    with target:
        if target.kind.name == "cuda":
            mod = dl.ApplyDefaultSchedule(dl.gpu.Fallback())(mod)
        return tvm.compile(mod, target=target).mod


def kernel_arguments(kernel, arrays, device, packers: dict) -> list[list]:
    """Each kernel's arguments on the device from the task's arrays (its output last); the inputs
    it takes packed (`packers`: index -> its packing, compiled) packed before, untimed, as the
    build packs constant weights once."""
    import tvm

    if kernel.then is None:
        pack_of, args = dict(kernel.packs), []
        for i, (a, shape) in enumerate(zip(arrays, kernel.shapes)):
            if i in packers:
                packed = tvm.runtime.empty(list(shape), str(a.dtype), device)
                packers[i]["main"](tvm.runtime.tensor(a.reshape(packed_from(pack_of[i])), device), packed)
                args.append(packed)
            else:
                args.append(tvm.runtime.tensor(a.reshape(shape), device))
        return [args]
    *inputs, output = arrays
    partials = tvm.runtime.empty(list(kernel.shapes[-1]), "float32", device)
    first = [tvm.runtime.tensor(inputs[i].reshape(shape), device) for i, shape in zip(kernel.takes, kernel.shapes)]
    rest = [a for i, a in enumerate(inputs) if i not in kernel.takes]
    then = [partials] + [tvm.runtime.tensor(a.reshape(shape), device) for a, shape in
                         zip([*rest, output], kernel.then_shapes[1:])]
    return [[*first, partials], then]


def kernel_mismatch(expected: np.ndarray, got: np.ndarray, tolerance: float = 0.02) -> str | None:
    """Half-precision outputs of two fp32-accumulating kernels agree to about 1% of the output's
    scale (the default `tolerance`, a family's); a wrong kernel is off by far more."""
    scale = float(np.abs(expected).max()) or 1.0
    error = float(np.abs(expected - got).max())
    if not np.isfinite(got).all():
        return "non-finite values"
    return None if error <= tolerance * scale else f"max error {error:.3g} against a scale of {scale:.3g}"


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[-1][:300] if text else type(err).__name__
