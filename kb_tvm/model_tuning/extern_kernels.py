"""Kernels built outside MetaSchedule (the Hopper template) in a model's build: each chosen task's
`call_tir` becomes a `call_dps_packed` of the kernel's symbol, its arguments reshaped to the shapes
the kernel takes (views, no copies), and the compiled kernels go into the executable as external
modules. Relax's CUDA-graph rewrite captures these calls like any kernel launch.

A kernel that MetaSchedule's database cannot hold (it is not a schedule of the task's TIR) is
kept as what rebuilds it: the task, the template's parameters, its measured seconds (see
`hopper_stage.py`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class ExternKernel:
    """One task's replacement: the PrimFunc (exported as `symbol`) and the shape it takes each of
    the task's parameters in, the output last."""

    task: str
    symbol: str
    func: object  # tirx PrimFunc
    shapes: tuple  # per parameter of the task, in its order
    pipeline: str = "tirx"  # the TIR pipeline `func` compiles with
    arch: str | None = None  # a CUDA arch of its own (the Hopper template's sm_90a), else the build's


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


def use_kernels(mod, kernels: list[ExternKernel]):
    """`mod` (a prepared Relax module) with each kernel's task called through its symbol and the
    task's PrimFunc removed."""
    import tvm
    from tvm import relax

    by_task = {k.task: k for k in kernels}
    missing = sorted(set(by_task) - {gv.name_hint for gv in mod.get_global_vars()})
    if missing:
        raise ValueError(f"no task {', '.join(missing)} in this model")
    call_tir = tvm.ir.Op.get("relax.call_tir")

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(call_tir) or call.args[0].name_hint not in by_task:
                return call
            kernel = by_task[call.args[0].name_hint]
            *inputs, out_shape = kernel.shapes
            args = [self._as(arg, shape) for arg, shape in zip(call.args[1].fields, inputs)]
            out = call.ty
            result = self.builder_.emit(relax.call_dps_packed(
                relax.ExternFunc(kernel.symbol), relax.Tuple(args), relax.TensorType(list(out_shape), out.dtype)))
            return result if _dims(out.shape) == tuple(out_shape) else relax.op.reshape(result, out.shape)

        def _as(self, arg, shape):
            return arg if _dims(arg.ty.shape) == tuple(shape) else \
                self.builder_.emit(relax.op.reshape(arg, shape))

    functions = {gv: Rewrite().visit_expr(func) if isinstance(func, relax.Function) else func
                 for gv, func in mod.functions.items() if gv.name_hint not in by_task}
    return tvm.IRModule(functions, attrs=mod.attrs)


def _dims(shape) -> tuple[int, ...]:
    """A static Relax shape (a ShapeExpr) as ints."""
    return tuple(int(d) for d in shape.values)
