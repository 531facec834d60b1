"""A kernel built outside MetaSchedule (the Hopper template's) that replaces a task, and the
compilation of such kernels into one runtime module (model_tuning/extern_kernels.py links them
into a model's build)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class ExternKernel:
    """One task's replacement: the PrimFunc (exported as `symbol`) and the shape it takes each of
    its parameters in, the output last. By default it takes all of the task's inputs and computes
    its output. With `then` (a split-K kernel), it takes the inputs at `takes` and computes an
    intermediate, and `then`, a PrimFunc the build compiles and schedules as its own, computes the
    task's output from that and the task's other inputs (shapes: `then_shapes`)."""

    task: str
    symbol: str
    func: object  # tirx PrimFunc
    shapes: tuple
    pipeline: str = "tirx"  # the TIR pipeline `func` compiles with
    arch: str | None = None  # a CUDA arch of its own (the Hopper template's sm_90a), else the build's
    takes: tuple | None = None  # which of the task's inputs `func` takes (None: all, in order)
    then: object | None = None
    then_shapes: tuple = ()

    @property
    def then_symbol(self) -> str:
        return f"{self.symbol}_then"


def compile_kernels(kernels: list[ExternKernel], target):
    """One runtime module holding every kernel (they share a TIR pipeline and arch), or None."""
    import tvm

    if not kernels:
        return None
    kinds = {(k.pipeline, k.arch) for k in kernels}
    if len(kinds) != 1:
        raise ValueError(f"kernels of several TIR pipelines or archs ({sorted(kinds, key=str)}) in one build")
    pipeline, arch = kinds.pop()
    if arch is not None:
        target = tvm.target.Target({**target.export(), "arch": arch})
    mod = tvm.IRModule({k.symbol: k.func for k in kernels})
    with target:
        return tvm.compile(mod, target=target, tir_pipeline=pipeline).mod
