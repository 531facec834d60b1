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
    from ..measure.timer import time_function

    vm, device = _virtual_machine(executable, target)
    tensor_sets = [_on_device(inputs, device) for inputs in input_sets]
    outputs = [_main_outputs(vm, tensor_sets[0])]
    vm.set_input("main", *tensor_sets[0])
    report = time_function(vm, "invoke_stateful", device, ["main"], at_least(TimingPolicy(), repeat),
                           cpu=target.kind.name != "cuda")
    if on_report is not None:
        on_report(report)
    return outputs + [_main_outputs(vm, args) for args in tensor_sets[1:]], report["median_s"]


def time_in_turns(executables: list, target, input_sets: list[list[np.ndarray]],
                  rounds: int = 2) -> list[tuple[list[list[np.ndarray]], float]]:
    """`run_and_time` of each executable, timed in turns for `rounds` rounds where there are
    several, each keeping its fastest round: builds compared one after the other once were
    compared across whatever else the machine did meanwhile (on a busy 2-core VM a decoder's
    build with the families' kernels timed 4.93 ms against 4.20 without, where a quiet machine
    gives 0.15 against 4.6, and the slower library was kept)."""
    results = [run_and_time(executable, target, input_sets) for executable in executables]
    for _ in range(rounds - 1 if len(executables) > 1 else 0):
        for i, executable in enumerate(executables):
            _, latency = run_and_time(executable, target, input_sets[:1])
            outputs, best = results[i]
            results[i] = (outputs, min(best, latency))
    return results


def run_outputs(executable, target, input_sets: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """The main function's outputs for each set of inputs, untimed."""
    vm, device = _virtual_machine(executable, target)
    return [_main_outputs(vm, _on_device(inputs, device)) for inputs in input_sets]


def _device(target):
    import tvm

    return tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)


def _virtual_machine(executable, target):
    from tvm import relax

    device = _device(target)
    return relax.VirtualMachine(executable, device), device


def _on_device(arrays: list[np.ndarray], device) -> list:
    import tvm

    return [tvm.runtime.tensor(a, device) for a in arrays]


def _main_outputs(vm, args) -> list[np.ndarray]:
    out = vm["main"](*args)
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def profile_kernels(executable, target, tasks, repeat: int = 5, *,
                    on_report: Callable[[str, dict], None] | None = None) -> dict[str, float]:
    """Seconds per call of each task's kernel as built in `executable` (timed alone, on the
    runner's `activation_like` arguments, at least `repeat` repeats): where the model's time goes
    before tuning. The bottleneck analysis. on_report gets each task's name and timing report."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from ..measure.timer import device_arguments, time_function
    from ..measure.workers import argument_signature

    device = _device(target)
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
