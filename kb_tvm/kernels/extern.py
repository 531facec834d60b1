"""A kernel built outside MetaSchedule (by a kernel family) that replaces a task: `ExternKernel`,
its compilation (`compile_kernels`) and its place in a Relax model's build (`use_kernels`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class ExternKernel:
    """One task's replacement: the PrimFunc (exported as `symbol`) and the shape it takes each of
    its parameters in, the output last. By default it takes all of the task's inputs and computes
    its output. With `then` (a split-K kernel), it takes the inputs at `takes` and computes an
    intermediate, and `then`, a PrimFunc the build compiles and schedules as its own, computes the
    task's output from that and the task's other inputs (shapes: `then_shapes`). `packs`: (the
    index of a task's input, main(input, packed)) for each input the kernel takes in a layout of
    its own (a convolution's weights); the build packs a constant input once, at compile time."""

    task: str
    symbol: str
    func: object  # tirx PrimFunc
    shapes: tuple
    pipeline: str = "tirx"  # the TIR pipeline `func` compiles with
    arch: str | None = None  # a CUDA arch of its own (e.g. sm_90a for wgmma), else the build's
    takes: tuple | None = None  # which of the task's inputs `func` takes (None: all, in order)
    then: object | None = None
    then_shapes: tuple = ()
    packs: tuple = ()

    def __post_init__(self) -> None:
        if self.packs and (self.then is not None or self.takes is not None):
            raise ValueError(f"kernel {self.symbol}: packed inputs with `then` or `takes` are not supported")

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
    # each exported under its symbol, whatever its PrimFunc was called
    mod = tvm.IRModule({k.symbol: k.func.with_attr("global_symbol", k.symbol) for k in kernels})
    with target:
        return tvm.compile(mod, target=target, tir_pipeline=pipeline).mod


# In a model's build each chosen task's `call_tir` becomes a `call_dps_packed` of the kernel's
# symbol, its arguments reshaped to the shapes the kernel takes (views, no copies), and the
# compiled kernels go into the executable as external modules. Relax's CUDA-graph rewrite captures
# these calls like any kernel launch. MetaSchedule's database cannot hold such a kernel (it is not
# a schedule of the task's TIR): it is kept as what rebuilds it (kernels.jsonl's rows).

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
            self.packs = {}  # (task, input) -> the GlobalVar of its packing, added once

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(call_tir) or call.args[0].name_hint not in by_task:
                return call
            kernel = by_task[call.args[0].name_hint]
            given, out = list(call.args[1].fields), call.ty
            takes = kernel.takes if kernel.takes is not None else range(len(given))
            *inputs, out_shape = kernel.shapes
            packs = dict(kernel.packs)
            args = [self._packed(kernel, i, packs[i], given[i], shape) if i in packs else self._as(given[i], shape)
                    for i, shape in zip(takes, inputs)]
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

        def _packed(self, kernel, index, pack, arg, shape):
            """`arg` as the kernel takes it: a call of its packing, computed at compile time
            where `arg` is a constant."""
            key = (kernel.task, index)
            if key not in self.packs:
                name = f"{kernel.symbol}_pack{index}"
                self.packs[key] = self.builder_.add_func(pack.with_attr("global_symbol", name), name)
            arg = self._as(arg, packed_from(pack))
            return self.builder_.emit(relax.call_tir(self.packs[key], relax.Tuple([arg]),
                                                     relax.TensorType(list(shape), arg.ty.dtype)))

        def _as(self, arg, shape):
            return arg if _dims(arg.ty.shape) == tuple(shape) else \
                self.builder_.emit(relax.op.reshape(arg, shape))

    rewrite = Rewrite(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewrite.builder_.update_func(gv, rewrite.visit_expr(func))
    rewritten = rewrite.builder_.get()
    out = tvm.IRModule({gv: func for gv, func in rewritten.functions.items() if gv.name_hint not in by_task},
                       attrs=mod.attrs)
    # a constant input (a model's weights) is packed here, once, not on each call
    return relax.transform.FoldConstant()(out) if rewrite.packs else out


def packed_from(pack) -> tuple[int, ...]:
    """The shape a packing (`ExternKernel.packs`) takes its input in (a view of the task's)."""
    return tuple(int(d) for d in pack.params[0].ty.shape)


def constant_inputs(mod) -> dict[str, frozenset[int]]:
    """For each task `mod` (a prepared Relax module) calls, the positions of its inputs that are
    constants (weights) at every call."""
    import tvm
    from tvm import relax
    from tvm.ir.expr import Constant

    call_tir = tvm.ir.Op.get("relax.call_tir")
    out: dict[str, frozenset[int]] = {}

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
            name = expr.args[0].name_hint
            here = frozenset(i for i, arg in enumerate(expr.args[1].fields) if isinstance(arg, Constant))
            out[name] = out[name] & here if name in out else here

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return out


def _dims(shape) -> tuple[int, ...]:
    """A static Relax shape (a ShapeExpr) as ints."""
    return tuple(int(d) for d in shape.values)
