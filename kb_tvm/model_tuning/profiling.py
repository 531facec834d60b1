"""Timing on the device: the whole model's latency, and each task's kernel alone (where
the untuned model spends its time: what the task scheduler starts from). Both time as the tuning
runner does (`measure.timer.time_function`: adaptive repeats, a median), without its race: their
numbers are set against the runner's records."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..measure.timing import TimingPolicy, at_least


def run_and_time(executable, target, input_sets: list[list[np.ndarray]], repeat: int = 10, *,
                 on_report: Callable[[dict], None] | None = None) -> tuple[list[list[np.ndarray]], float]:
    """The main function's outputs for each set of inputs, and its median latency (seconds) on
    the first set, over at least `repeat` repeats (fewer for a model so slow that they would pass
    the policy's time cap). All sets run on one VM, the later ones after the timing: a build with
    CUDA graphs captures them on the first call, and later inputs must still be read, not the
    captured ones. on_report gets the timing report (repeats, number, verdict)."""
    import tvm
    from tvm import relax

    from ..measure.timer import time_function

    device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    vm = relax.VirtualMachine(executable, device)
    tensor_sets = [[tvm.runtime.tensor(a, device) for a in inputs] for inputs in input_sets]

    def run(args):
        out = vm["main"](*args)
        return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]

    outputs = [run(tensor_sets[0])]
    vm.set_input("main", *tensor_sets[0])
    report = time_function(vm, "invoke_stateful", device, ["main"], at_least(TimingPolicy(), repeat),
                           cpu=target.kind.name != "cuda")
    if on_report is not None:
        on_report(report)
    return outputs + [run(args) for args in tensor_sets[1:]], report["median_s"]


def run_outputs(executable, target, input_sets: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """The main function's outputs for each set of inputs, untimed."""
    import tvm
    from tvm import relax

    device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    vm = relax.VirtualMachine(executable, device)
    results = []
    for inputs in input_sets:
        out = vm["main"](*[tvm.runtime.tensor(a, device) for a in inputs])
        results.append([out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out])
    return results


def profile_kernels(executable, target, tasks, repeat: int = 5, *,
                    on_report: Callable[[str, dict], None] | None = None) -> dict[str, float]:
    """Seconds per call of each task's kernel as built in `executable` (timed alone, on the
    runner's `activation_like` arguments, at least `repeat` repeats): where the model's time goes
    before tuning. The bottleneck analysis. on_report gets each task's name and timing report."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from ..measure.timer import device_arguments, time_function
    from ..measure.workers import argument_signature

    device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    library = executable.mod.imports[0]  # the compiled kernels, named as the tasks
    policy = at_least(TimingPolicy(), repeat)
    seconds = {}
    for task in tasks:
        name = str(task.task_name)
        func = next(iter(task.mod.functions.values()))
        args = device_arguments(device, argument_signature(ArgInfo.from_prim_func(func)))
        report = time_function(library, name, device, args, policy, cpu=target.kind.name != "cuda")
        if on_report is not None:
            on_report(name, report)
        seconds[name] = report["median_s"]
    return seconds
