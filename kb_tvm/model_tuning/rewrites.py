"""Relax rewrites a model needs before TVM can build it right: each works around one thing TVM
0.27 gets wrong, and says which."""

from __future__ import annotations


def over_relax_functions(mutator_class, name: str):
    """A module pass that rewrites every Relax function with `mutator_class` (a PyExprMutator)."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name=name)
    def rewrite_functions(mod, _ctx):
        rewrite = mutator_class(mod)
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                rewrite.builder_.update_func(gvar, rewrite.visit_expr(func))
        return rewrite.builder_.get()

    return rewrite_functions


def use_counts(func) -> dict:
    """How many times each variable of a Relax function is read (its definitions aside)."""
    from tvm.relax.expr_functor import PyExprVisitor, visitor

    counts: dict = {}

    @visitor
    class Uses(PyExprVisitor):
        def visit_var_(self, var):
            counts[var] = counts.get(var, 0) + 1

        def visit_dataflow_var_(self, var):
            counts[var] = counts.get(var, 0) + 1

    Uses().visit_expr(func)
    return counts


def static_shape(expr) -> list[int] | None:
    """The static shape of a tensor expression, or None (not a tensor, or a symbolic extent)."""
    from tvm import relax
    from tvm.tirx import IntImm

    shape = getattr(expr.ty, "shape", None) if isinstance(expr.ty, relax.TensorType) else None
    if shape is None or not all(isinstance(d, IntImm) for d in shape):
        return None
    return [int(d) for d in shape]


def scalar_constant(expr) -> float | None:
    """The value of a one-element Relax constant, or None for anything else."""
    from tvm.ir.expr import GenericConst

    if not isinstance(expr, GenericConst) or expr.value.numpy().size != 1:
        return None
    return float(expr.value.numpy().reshape(()))


# exponents `integer_powers_as_products` writes out: a square, a cube (GELU's tanh form), a fourth
SMALL_POWERS = (1, 2, 3, 4)


def integer_powers_as_products():
    """x ** n for a constant n in 1..4 (or its negative) as n - 1 multiplies (and a reciprocal).
    TVM compiles CUDA with --use_fast_math, where powf is __powf, exp2(n * log2(x)): NaN for
    every negative x. RMSNorm squares its input with Pow and GPT-2's GELU cubes it, so a
    decoder's output was all NaN on CUDA. The products are exact and cheaper on any target."""
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    power = tvm.ir.Op.get("relax.power")

    def exponent(expr) -> int | None:
        value = scalar_constant(expr)
        return int(value) if value is not None and value.is_integer() and abs(int(value)) in SMALL_POWERS else None

    @mutator
    class Products(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            n = exponent(call.args[1]) if call.op.same_as(power) else None
            base = call.args[0] if n is not None else None
            if base is None or str(base.ty) != str(call.ty):  # the exponent broadcasts it
                return call
            product = base
            for _ in range(abs(n) - 1):
                product = self.builder_.emit(relax.op.multiply(product, base))
            return product if n > 0 else relax.op.divide(relax.const(np.ones((), str(base.ty.dtype))), product)

    return over_relax_functions(Products, "IntegerPowersAsProducts")


def outline_non_tensor_argument_calls():
    """Each operator call that takes more than tensors moved into a private function of its own:
    ToMixedPrecision fails on the operator itself ("Expected TensorType, but got T.int64" on a
    causal mask's triu, T.float64 on a clip's bounds, R.Callable on a call_tir of the PrimFunc the
    ONNX importer writes for a Pad, as in Swin), and leaves calls of functions alone (their inputs
    cast back to fp32). InlinePrivateFunctions puts them back."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    def refused(arg) -> bool:  # what ToMixedPrecision fails on (a shape it takes: a reshape's)
        return tvm.ir.expr.is_prim_expr(arg) or isinstance(arg, (tvm.ir.GlobalVar, relax.ExternFunc))

    def stays(arg) -> bool:  # what the private function keeps in its body
        return refused(arg) or isinstance(arg, relax.ShapeExpr)

    @mutator
    class Outline(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and any(refused(arg) for arg in call.args)):
                return call
            params, tensors = [], []

            def parameter(arg):
                if stays(arg):
                    return arg
                if isinstance(arg, relax.Tuple):  # call_tir's inputs
                    return relax.Tuple([parameter(field) for field in arg.fields])
                params.append(relax.Var(f"arg{len(params)}", arg.ty))
                tensors.append(arg)
                return params[-1]

            body = relax.Call(call.op, [parameter(arg) for arg in call.args], call.attrs, call.ty_args)
            name = f"non_tensor_argument_{call.op.name.split('.')[-1]}"
            callee = self.builder_.add_func(relax.Function(params, body, call.ty), name)
            return relax.Call(callee, tensors, ret_ty=call.ty)

    return over_relax_functions(Outline, "OutlineNonTensorArgumentCalls")


# operators that only move or pick bf16 values: TVM lowers them for any dtype
MOVES_DATA = frozenset(f"relax.{name}" for name in (
    "astype", "reshape", "permute_dims", "expand_dims", "squeeze", "flatten", "broadcast_to", "concat", "split",
    "strided_slice", "take", "repeat", "tile", "matmul", "nn.conv1d", "nn.conv2d", "nn.conv3d"))


def fp16_casts_to_bf16():
    """ToMixedPrecision's fp16 casts made bf16 casts. Every other operator that would take bf16
    tensors computes in fp32 between two casts (fused into its kernel): TVM 0.27 lowers power
    and layer_norm, among others, for fp32 and fp16 only ("power only applies to float")."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    astype = tvm.ir.Op.get("relax.astype")

    def is_bf16(expr) -> bool:
        return isinstance(expr.ty, relax.TensorType) and str(expr.ty.dtype) == "bfloat16"

    @mutator
    class CastsToBf16(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op.same_as(astype) and str(call.attrs.dtype) == "float16":
                return relax.op.astype(call.args[0], "bfloat16")
            if not isinstance(call.op, tvm.ir.Op) or call.op.name in MOVES_DATA or not any(
                    is_bf16(arg) for arg in call.args if not tvm.ir.expr.is_prim_expr(arg)):
                return call
            args = [self.builder_.emit(relax.op.astype(arg, "float32"))
                    if not tvm.ir.expr.is_prim_expr(arg) and is_bf16(arg) else arg for arg in call.args]
            result = self.builder_.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
            return relax.op.astype(result, "bfloat16") if is_bf16(call) else result

    return over_relax_functions(CastsToBf16, "FP16CastsToBF16")


def means_of_products_as_one_reduction():
    """mean(a * b) (RMSNorm's mean of squares) as one function that multiplies inside its sum.
    Relax's FuseOps fuses neither an elementwise producer into a mean nor a sum with what follows
    it, so the square was a kernel of its own, writing and reading the whole fp32 tensor once
    more (5 of a 2-layer decoder's tasks, 4 us each on the H200). The one function fuses with
    the norm after it; it computes what legalized mean does, sum then divide by the count."""
    import tvm
    from tvm import relax, topi
    from tvm.relax.expr_functor import PyExprMutator, mutator

    mean, multiply = tvm.ir.Op.get("relax.mean"), tvm.ir.Op.get("relax.multiply")

    def mean_of_product(a, b, axis, keepdims):
        count = 1
        for dim in axis:
            count = count * a.shape[dim]
        return topi.divide(topi.sum(topi.multiply(a, b), axis, keepdims), count)

    @mutator
    class OneReduction(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(mean) or call.attrs.axis is None:
                return call
            product = call.args[0]
            while isinstance(product, relax.Var) and self.lookup_binding(product) is not None:
                product = self.lookup_binding(product)
            if not (isinstance(product, relax.Call) and product.op.same_as(multiply)):
                return call
            a, b = product.args
            if not all(str(x.ty) == str(product.ty) for x in (a, b)):  # a broadcasting product
                return call
            rank = len(product.ty.shape)
            axis = sorted(int(d) % rank for d in call.attrs.axis)
            return self.builder_.call_te(mean_of_product, a, b, axis, bool(call.attrs.keepdims),
                                         primfunc_name_hint="mean_of_product")

    return over_relax_functions(OneReduction, "MeansOfProductsAsOneReduction")


def empty_loops_removed():
    """A module pass: each PrimFunc with a loop of extent 0 (a slice that is empty at this shape,
    as Phi-3's rotary pass-through is where the rotary covers the whole head) without it, by
    TVM's RemoveNoOp: such a block writes nothing, and dlight's GPU fallback fused its loops with
    others and divided by zero. Functions without one are left as they are."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    def has_empty_loop(func) -> bool:
        found = []
        tvm_ffi.structural_walk(func.body, [(tirx.For, lambda loop: found.append(
            isinstance(loop.extent, tirx.IntImm) and loop.extent.value == 0))], order="post")
        return any(found)

    @tvm.transform.module_pass(opt_level=0, name="EmptyLoopsRemoved")
    def remove(mod, _ctx):
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, tirx.PrimFunc) and has_empty_loop(func):
                mod[gvar] = tirx.transform.RemoveNoOp()(tvm.IRModule({gvar: func}))[gvar]
        return mod

    return remove
