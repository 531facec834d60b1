"""Kernels built outside MetaSchedule (the Hopper template) in a model's build: each chosen task's
`call_tir` becomes a `call_dps_packed` of the kernel's symbol, its arguments reshaped to the shapes
the kernel takes (views, no copies), and the compiled kernels go into the executable as external
modules. Relax's CUDA-graph rewrite captures these calls like any kernel launch. The kernels
themselves (`ExternKernel`, `compile_kernels`) are measure/extern_kernel.py's.

A kernel that MetaSchedule's database cannot hold (it is not a schedule of the task's TIR) is
kept as what rebuilds it: the task, the template's parameters, its measured seconds (see
`hopper_stage.py`)."""

from __future__ import annotations

from ..measure.extern_kernel import ExternKernel


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
        def __init__(self, mod):
            super().__init__(mod)
            self.then = {}  # task -> the GlobalVar of its kernel's `then`, added once

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(call_tir) or call.args[0].name_hint not in by_task:
                return call
            kernel = by_task[call.args[0].name_hint]
            given, out = list(call.args[1].fields), call.ty
            takes = kernel.takes if kernel.takes is not None else range(len(given))
            *inputs, out_shape = kernel.shapes
            args = [self._as(given[i], shape) for i, shape in zip(takes, inputs)]
            out_dtype = "float32" if kernel.then is not None else out.dtype  # the partial sums are fp32
            result = self.builder_.emit(relax.call_dps_packed(
                relax.ExternFunc(kernel.symbol), relax.Tuple(args), relax.TensorType(list(out_shape), out_dtype)))
            if kernel.then is not None:
                if kernel.task not in self.then:
                    name = kernel.then_symbol
                    self.then[kernel.task] = self.builder_.add_func(kernel.then.with_attr("global_symbol", name), name)
                rest = [arg for i, arg in enumerate(given) if i not in takes]
                *_, then_out = kernel.then_shapes
                then_args = [result] + [self._as(arg, shape) for arg, shape in zip(rest, kernel.then_shapes[1:-1])]
                result = self.builder_.emit(relax.call_tir(self.then[kernel.task], relax.Tuple(then_args),
                                                           relax.TensorType(list(then_out), out.dtype)))
                out_shape = then_out
            return result if _dims(out.shape) == tuple(out_shape) else relax.op.reshape(result, out.shape)

        def _as(self, arg, shape):
            return arg if _dims(arg.ty.shape) == tuple(shape) else \
                self.builder_.emit(relax.op.reshape(arg, shape))

    rewrite = Rewrite(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewrite.builder_.update_func(gv, rewrite.visit_expr(func))
    rewritten = rewrite.builder_.get()
    return tvm.IRModule({gv: func for gv, func in rewritten.functions.items() if gv.name_hint not in by_task},
                        attrs=mod.attrs)


def _dims(shape) -> tuple[int, ...]:
    """A static Relax shape (a ShapeExpr) as ints."""
    return tuple(int(d) for d in shape.values)
