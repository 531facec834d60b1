"""Kernels that only move data, taken out of a model before it is fused. An export's layout steps
(a batch-first transpose around an attention, a scalar index into a packed QKV tensor, a Linear
flattening its input to 2-D) each end up a kernel of their own after Relax's FuseOps: these
rewrites take six a layer out of torchvision's ViT-B/16, each a launch of about 3.6 us on an H100
for almost no work. Each rewrite is exact: it moves values, never computes them differently.

- A transpose that moves only axes of extent 1 is a reshape (a view once built).
- `take` at a constant index is a slice, which fuses with what reads it (a `take` is opaque to
  FuseOps: its index is read from memory).
- A reshape of the leading axes after a Linear and its elementwise epilogue (bias, cast, GELU)
  moves to the Linear's input, so the epilogue fuses on with what follows (a residual add) and
  the input's reshape cancels against the one before it.
- A cast after a reshape goes before it, so it fuses into the kernel producing its input (a norm).
- Moves read by several moves (a packed QKV tensor unpacked, then sliced three ways) are copied
  into each reader, so that each fuses them rather than reading what a kernel of its own wrote.
"""

from __future__ import annotations

from .rewrites import static_shape, use_counts

# elementwise ops an epilogue chain may hold between a Linear and a reshape of its leading axes
UNARY = frozenset(f"relax.{name}" for name in (
    "astype", "erf", "tanh", "sigmoid", "exp", "negative", "sqrt", "rsqrt", "nn.relu", "nn.gelu",
    "nn.gelu_tanh", "nn.silu"))
BINARY = frozenset(f"relax.{name}" for name in ("add", "subtract", "multiply", "divide"))
# ops that only move values (or cast them): a chain of them is index arithmetic in its reader's kernel
MOVES = frozenset(f"relax.{name}" for name in (
    "reshape", "permute_dims", "expand_dims", "squeeze", "astype", "strided_slice"))
ROUNDS = 8  # rewrites enable each other (a reshape moved makes two cancel); a model needs 2-3


def keeps_order(dims: list[int], axes: list[int]) -> bool:
    """Whether permuting `dims` by `axes` keeps the order of the axes longer than 1 (so the
    permutation is a reshape: the values stay where they are in memory)."""
    moved = [a for a in axes if dims[a] != 1]
    return moved == sorted(moved)


def leading_only(before: list[int], after: list[int]) -> bool:
    """Whether a reshape from `before` to `after` regroups only the leading axes (the last stays)."""
    return len(before) >= 1 and len(after) >= 1 and before[-1] == after[-1]


def broadcasts_over_leading(operand_dims: list[int], last: int) -> bool:
    """Whether an epilogue operand of these dims broadcasts along every axis but the last (a
    bias, a scalar): it stays right whatever the leading axes become."""
    return all(d == 1 for d in operand_dims[:-1]) and (not operand_dims or operand_dims[-1] in (1, last))


def layout_moves_removed():
    """The module pass: the rewrites above, over every Relax function, until none applies, then
    the bindings they left unused removed."""
    import tvm
    from tvm import relax

    moves = _mutator_class()

    @tvm.transform.module_pass(opt_level=0, name="LayoutMovesRemoved")
    def remove(mod, _ctx):
        mod = relax.transform.FoldConstant()(mod)  # an index the importer computes (a negative one wrapped)
        for _ in range(ROUNDS):
            rewrite = moves(mod)
            for gvar, func in list(mod.functions.items()):
                if isinstance(func, relax.Function):
                    rewrite.builder_.update_func(gvar, rewrite.visit_expr(func))
            if not rewrite.moved:
                break
            mod = relax.transform.CanonicalizeBindings()(rewrite.builder_.get())  # a reshape that cancelled: an alias
            for gvar, func in list(mod.functions.items()):
                if isinstance(func, relax.Function):
                    mod[gvar] = relax.analysis.remove_all_unused(func)
        return mod

    return remove


def _mutator_class():
    import tvm
    from tvm import relax
    from tvm.ir.expr import GenericConst
    from tvm.relax.expr_functor import PyExprMutator, mutator

    op = tvm.ir.Op.get
    reshape, permute, take, astype, matmul = (op(f"relax.{n}") for n in (
        "reshape", "permute_dims", "take", "astype", "matmul"))

    @mutator
    class LayoutMoves(PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.uses: dict = {}
            self.moved = 0  # rewrites made in this round

        def visit_function_(self, func):
            self.uses = use_counts(func)
            return super().visit_function_(func)

        def bound(self, expr):
            """The call `expr` (a var) is bound to, or None."""
            value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
            return value if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) else None

        def once(self, var) -> bool:
            return self.uses.get(var, 0) == 1

        def reshaped(self, x, dims: list[int]):
            """x as `dims`, through the reshapes and single-use casts that produced it."""
            if static_shape(x) == dims:
                return x
            producer = self.bound(x)
            if producer is not None and producer.op.same_as(reshape):
                return self.reshaped(producer.args[0], dims)
            if producer is not None and producer.op.same_as(astype) and self.once(x):
                inner = self.reshaped(producer.args[0], dims)
                return self.builder_.emit(relax.op.astype(inner, producer.attrs.dtype))
            return self.builder_.emit(relax.op.reshape(x, dims))

        def visit_call_(self, call):
            call = super().visit_call_(call)
            rewritten = call
            if not isinstance(call.op, tvm.ir.Op):
                return call
            if call.op.same_as(permute):
                rewritten = self.permute_as_reshape(call)
            elif call.op.same_as(take):
                rewritten = self.take_as_slice(call)
            elif call.op.same_as(reshape):
                rewritten = self.reshape_moved(call)
            elif call.op.same_as(astype):
                rewritten = self.cast_before_reshape(call)
            if rewritten is call and call.op.name in MOVES:
                rewritten = self.own_copy_of_moves(call)
            self.moved += rewritten is not call
            return rewritten

        def permute_as_reshape(self, call):
            dims, out = static_shape(call.args[0]), static_shape(call)
            if dims is None or out is None or call.attrs.axes is None:
                return call
            axes = [int(a) for a in call.attrs.axes]
            return relax.op.reshape(call.args[0], out) if keeps_order(dims, axes) else call

        def take_as_slice(self, call):
            x, index = call.args
            dims, out = static_shape(x), static_shape(call)
            if dims is None or out is None or not isinstance(index, GenericConst) or index.value.numpy().ndim != 0:
                return call
            axis = int(call.attrs.axis) % len(dims) if call.attrs.axis is not None else None
            if axis is None:  # a flat take
                return call
            i = int(index.value.numpy())
            if not -dims[axis] <= i < dims[axis]:  # out of bounds: left to fail as it would
                return call
            i %= dims[axis]
            piece = self.builder_.emit(relax.op.strided_slice(x, axes=[axis], begin=[i], end=[i + 1]))
            return relax.op.reshape(piece, out)

        def reshape_moved(self, call):
            x, out = call.args[0], static_shape(call)
            dims = static_shape(x)
            if out is None or dims is None:
                return call
            if dims == out:
                return x
            producer = self.bound(x)
            if producer is not None and producer.op.same_as(reshape):
                return relax.op.reshape(producer.args[0], out)
            if not leading_only(dims, out):
                return call
            moved = self.through_linear(x, out)
            return moved if moved is not None else call

        def through_linear(self, x, out: list[int]):
            """The epilogue chain ending in x, recomputed on a Linear whose input is reshaped to
            `out`'s leading axes; None where x is not such a chain, or a step of it is read twice."""
            chain = []  # (call, position of the chain's value among its args), from x back
            value = x
            while True:
                producer = self.bound(value)
                if producer is None or not self.once(value):
                    return None
                if producer.op.same_as(matmul):
                    break
                name = producer.op.name
                if name in UNARY:
                    position = 0
                elif name in BINARY:
                    position = self.chain_operand(producer, out)
                    if position is None:
                        return None
                else:
                    return None
                chain.append((producer, position))
                value = producer.args[position]
            a, w = producer.args
            a_dims, w_dims = static_shape(a), static_shape(w)
            if a_dims is None or w_dims is None or len(w_dims) != 2:
                return None
            result = self.builder_.emit(relax.op.matmul(self.reshaped(a, [*out[:-1], a_dims[-1]]), w,
                                                        out_dtype=producer.attrs.out_dtype))
            for step, position in reversed(chain):
                args = list(step.args)
                args[position] = result
                result = self.builder_.emit(relax.Call(step.op, args, step.attrs, step.ty_args))
            return result

        def chain_operand(self, call, out: list[int]) -> int | None:
            """Which of a binary op's args continues the chain: the one whose other arg
            broadcasts along the leading axes only, before the reshape to `out` and after."""
            for position in (0, 1):
                other = static_shape(call.args[1 - position])
                mine = static_shape(call.args[position])
                if other is not None and mine == static_shape(call) and len(other) <= min(len(mine), len(out)) \
                        and broadcasts_over_leading(other, out[-1]):
                    return position
            return None

        def own_copy_of_moves(self, call):
            """A move reading a chain of moves that others read too (a packed QKV tensor
            unpacked once, then sliced three ways) reads its own copy of the chain: FuseOps fuses
            no value read twice into its readers, so the shared chain was a kernel of its own that
            wrote what each slice reads again."""
            x = call.args[0]
            if self.uses.get(x, 0) < 2:
                return call
            copy = self.copy_of_moves(x)
            return call if copy is x else relax.Call(call.op, [copy, *call.args[1:]], call.attrs, call.ty_args)

        def is_move(self, x) -> bool:
            producer = self.bound(x)
            return producer is not None and producer.op.name in MOVES

        def copy_of_moves(self, x):
            producer = self.bound(x)
            if producer is None or producer.op.name not in MOVES or (
                    producer.op.same_as(astype) and not self.is_move(producer.args[0])):
                return x  # a cast of what a kernel computes stays in that kernel's epilogue
            args = [self.copy_of_moves(producer.args[0]), *producer.args[1:]]
            return self.builder_.emit(relax.Call(producer.op, args, producer.attrs, producer.ty_args))

        def cast_before_reshape(self, call):
            x, out = call.args[0], static_shape(call)
            producer = self.bound(x)
            if out is None or producer is None or not producer.op.same_as(reshape) or not self.once(x):
                return call
            return relax.op.reshape(self.builder_.emit(relax.op.astype(producer.args[0], call.attrs.dtype)), out)

    return LayoutMoves
