"""One way to time a kernel, and the numbers it runs on.

Every latency kb reports is the median of repeats timed by `time_function` under a `TimingPolicy`
(timing.py: repeats of `number` calls that last at least `repeat_s`, until the median is stable or
a cap is reached), on `activation_like` arguments wherever kb fills them itself:
- a tuning record (each candidate; tune-op's best_ms; a model's tuned tasks): the runner
  (`workers.measure`, or `remote.RemoteMeasurer` on RPC servers), under the runner's policy,
  racing each candidate against the best of its task;
- tune-op's final_ms: `tuning.time_best` on a fresh build, under the runner's policy with at
  least `repeat` repeats and no race (through an RPC tracker: the runner's protocol on a server);
- a model's kernel profile (each task's untuned seconds, which split the budget):
  `model_tuning.profiling.profile_kernels`, default policy, no race;
- a model's end-to-end latency (untuned, tuned, with and without CUDA graphs):
  `model_tuning.profiling.run_and_time`, the VM's `invoke_stateful` on the model's example inputs,
  default policy, no race.
- a kernel family's variant (kernels/task_search.py): default policy, no race, summed over its
  kernels (a split-K's sum is a second one).
"""

from __future__ import annotations

from .timing import TimingPolicy, calls_per_repeat, first_verdict, repeats_next, report, verdict


def time_function(module, name: str, device, args: list, policy: TimingPolicy, best_s: float | None = None,
                  *, cpu: bool) -> dict:
    """Seconds per call of `module`'s function `name` on `args`, under `policy`, racing against
    `best_s` (None: no race). `module` is anything with TVM's `time_evaluator`: a loaded library
    (here or through an RPC session) or a relax VirtualMachine (name "invoke_stateful", args the
    function's name after `set_input`). On a CPU (`cpu`) caches are flushed before each repeat
    where the policy says so. The report: median_s, repeats, number (calls per repeat), verdict
    ("stable", "capped" or "slow")."""
    flush = "cache_flush_cpu_non_first_arg" if policy.cache_flush and cpu else ""

    def timed(number: int, repeat: int):
        return module.time_evaluator(name, device, number=number, repeat=repeat, min_repeat_ms=0,
                                     f_preproc=flush)(*args)

    device.sync()
    first = float(timed(1, 1).mean)
    number = calls_per_repeat(first, policy)
    why = first_verdict(first, best_s, policy)
    samples: list[float] = [first] if why else []
    while why is None:
        samples.extend(float(s) for s in timed(number, repeats_next(samples, policy)).results)
        why = verdict(samples, number, best_s, policy)
    return report(samples, number, why)


def activation_like(shape, dtype: str, seed: int = 0):
    """The numbers kb measures and re-times on (a numpy array): floats uniform in [-1, 1), as
    activations and weights are; integers 0, a valid index for any gather. Not TVM's measure fill:
    it draws floats from [1, 10), where erf and tanh saturate, and libm's erf then ran a tuned
    GEMM+GELU 3-4x faster than on data in [-1, 1]."""
    import ml_dtypes  # TVM's own dependency: numpy has no bfloat16
    import numpy as np

    dtype = str(dtype)
    shape = [int(d) for d in shape]
    if dtype.startswith(("int", "uint", "bool")):
        return np.zeros(shape, dtype=dtype)
    values = np.random.default_rng(seed).uniform(-1, 1, size=shape)
    return values.astype(getattr(ml_dtypes, dtype) if hasattr(ml_dtypes, dtype) else dtype)


def device_arguments(device, signature: tuple) -> list:
    """Tensors on `device` (local or an RPC server's) for a signature of ("TENSOR", dtype, shape)
    tuples: `activation_like` data, argument i drawn with seed i."""
    import tvm

    args = []
    for kind, dtype, shape in signature:
        if kind != "TENSOR":
            raise ValueError(f"argument kind {kind!r} cannot be measured (only TENSOR)")
        tensor = tvm.runtime.empty([int(d) for d in shape], dtype=str(dtype), device=device)
        tensor.copyfrom(activation_like(shape, str(dtype), seed=len(args)))
        args.append(tensor)
    return args
