"""Timing on the device: the whole model's latency, and each task's kernel alone (where
the untuned model spends its time: what the task scheduler starts from)."""

from __future__ import annotations

import time

import numpy as np


def calls_for(first_s: float, number: int, repeat: int) -> tuple[int, int]:
    """(calls per repeat, repeats) for something whose first call took `first_s`: the asked
    ones for fast kernels, fewer for slow ones, so that timing a model whose untuned forward
    takes 50 s (BERT-base on 2 cores) costs seconds' worth of calls, not 50 of them."""
    if first_s >= 0.5:
        return 1, min(repeat, 3)
    if first_s >= 0.02:
        return 1, repeat
    return number, repeat


def run_and_time(executable, target, input_sets: list[list[np.ndarray]],
                 repeat: int = 10) -> tuple[list[list[np.ndarray]], float]:
    """The main function's outputs for each set of inputs, and its median latency (seconds) on
    the first set. All sets run on one VM, the later ones after the timing: a build with CUDA
    graphs captures them on the first call, and later inputs must still be read, not the
    captured ones."""
    import tvm
    from tvm import relax

    device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    vm = relax.VirtualMachine(executable, device)
    tensor_sets = [[tvm.runtime.tensor(a, device) for a in inputs] for inputs in input_sets]

    def run(args):
        out = vm["main"](*args)
        return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]

    started = time.perf_counter()
    outputs = [run(tensor_sets[0])]
    number, repeat = calls_for(time.perf_counter() - started, 5, repeat)
    vm.set_input("main", *tensor_sets[0])
    timer = vm.time_evaluator("invoke_stateful", device, number=number, repeat=repeat,
                             min_repeat_ms=50 if number > 1 else 0)
    seconds = float(np.median(timer("main").results))
    return outputs + [run(args) for args in tensor_sets[1:]], seconds


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
        once = library.time_evaluator(str(task.task_name), device, number=1, repeat=1)(*args).mean
        number, times = calls_for(once, 10, repeat)
        timer = library.time_evaluator(str(task.task_name), device, number=number, repeat=times,
                                       min_repeat_ms=10 if number > 1 else 0)
        seconds[str(task.task_name)] = float(np.median(timer(*args).results))
    return seconds


def _random_array(shape: list[int], dtype: str, rng) -> np.ndarray:
    if "int" in dtype:  # indices (gather, embedding): 0 is valid for any table
        return np.zeros(shape, dtype=dtype)
    return rng.uniform(-1, 1, size=shape).astype(dtype)
