"""The precision a model is tuned and deployed in. fp16 and bf16 feed the model's matmuls and
convolutions half-precision inputs and keep fp32 accumulators and outputs (Relax's
ToMixedPrecision; bf16 rewrites its fp16 casts, as Relax has no bf16 variant); weights are cast
once, at build time. On CUDA those tasks tune in kb's tensor-core space. The numerics check
against onnxruntime's fp32 outputs uses a tolerance per precision, stated in the report.

The math a model's nonlinear functions use is chosen here too: on CPUs erf, exp, tanh and
softmax become TVM's fast approximations (topi.fast_*), which vectorize, where libm's erf and exp
are scalar calls: the GELU of the shipped transformer block took 55 of its 100 us of kernel time
with libm's erf. onnxruntime approximates them too; the numerics check still applies.
`--exact-math` keeps libm's. On CUDA the math stays exact: the approximations are not
measured there (CUDA's own exp is already fast)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

PRECISIONS = ("fp32", "fp16", "bf16")
MATH = ("fast", "exact")


@dataclass(frozen=True)
class Tolerance:
    """|tuned - reference| <= atol + rtol * |reference|, elementwise, where atol is
    `atol_of_scale` times the reference's largest magnitude (half-precision errors scale with
    the values) but at least `atol_floor`."""

    rtol: float
    atol_of_scale: float
    atol_floor: float

    def atol(self, reference: np.ndarray) -> float:
        scale = float(np.max(np.abs(reference))) if reference.size else 0.0
        return max(self.atol_floor, self.atol_of_scale * scale)

    def to_json(self) -> dict:
        return asdict(self)


# fp16 keeps 11 significant bits, bf16 8; products accumulate in fp32 either way
TOLERANCES = {
    "fp32": Tolerance(rtol=1e-3, atol_of_scale=0.0, atol_floor=1e-4),
    "fp16": Tolerance(rtol=1e-2, atol_of_scale=1e-2, atol_floor=1e-4),
    "bf16": Tolerance(rtol=4e-2, atol_of_scale=4e-2, atol_floor=1e-4),
}


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return precision


def lower_precision(mod, precision: str):
    """The Relax module with its matmuls and convolutions in `precision` (fp32: unchanged)."""
    import tvm
    from tvm import relax

    if check_precision(precision) == "fp32":
        return mod
    # ToMixedPrecision (TVM 0.27) stops at any call with a scalar argument: "Expected TensorType, but
    # got T.int64" on a causal mask's triu, T.float64 on a clip; such calls sit out in fp32
    passes = [relax.transform.ConvertToDataflow(), _outline_scalar_argument_calls(), relax.transform.Normalize(),
              relax.transform.ToMixedPrecision(out_dtype="float32"), relax.transform.InlinePrivateFunctions(),
              relax.transform.ConvertToDataflow()]
    if precision == "bf16":
        passes.append(_fp16_casts_to_bf16())
    passes.append(relax.transform.FoldConstant())  # the weights' casts, done once
    # ToMixedPrecision casts a tensor once per consumer: BERT's Q, K and V projections each cast
    # the layer norm's output, 24 redundant kernel launches in BERT-base
    passes.append(relax.transform.EliminateCommonSubexpr())
    return tvm.transform.Sequential(passes)(mod)


def math_for(target, *, exact: bool) -> str:
    """"fast" (TVM's approximations of erf, exp, tanh and softmax) or "exact" (libm's): fast on
    CPUs unless `exact`; exact on CUDA."""
    return "exact" if exact or target.kind.name == "cuda" else "fast"


def apply_math(mod, math: str):
    """The Relax module with its erf, exp, tanh and softmax as TVM's fast approximations when
    `math` is "fast" (Relax's FastMathTransform, before legalization: it rewrites Relax ops)."""
    from tvm import relax

    if math not in MATH:
        raise ValueError(f"math={math!r}: use one of {', '.join(MATH)}")
    return relax.transform.FastMathTransform()(mod) if math == "fast" else mod


def _outline_scalar_argument_calls():
    """Each operator call that takes a scalar (triu's k, clip's bounds) moved into a private
    function of its own: ToMixedPrecision leaves calls of functions alone (their inputs cast back
    to fp32) where it fails on the operator itself. InlinePrivateFunctions puts them back."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    is_scalar = tvm.ir.expr.is_prim_expr

    @mutator
    class Outline(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and any(is_scalar(arg) for arg in call.args)):
                return call
            tensors = [arg for arg in call.args if not is_scalar(arg)]
            params = [relax.Var(f"arg{index}", arg.ty) for index, arg in enumerate(tensors)]
            inner = iter(params)
            body = relax.Call(call.op, [arg if is_scalar(arg) else next(inner) for arg in call.args],
                              call.attrs, call.ty_args)
            name = f"scalar_argument_{call.op.name.split('.')[-1]}"
            callee = self.builder_.add_func(relax.Function(params, body, call.ty), name)
            return relax.Call(callee, tensors, ret_ty=call.ty)

    @tvm.transform.module_pass(opt_level=0, name="OutlineScalarArgumentCalls")
    def outline(mod, _ctx):
        rewrite = Outline(mod)
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                rewrite.builder_.update_func(gvar, rewrite.visit_expr(func))
        return rewrite.builder_.get()

    return outline


# operators that only move or pick bf16 values: TVM lowers them for any dtype
MOVES_DATA = frozenset(f"relax.{name}" for name in (
    "astype", "reshape", "permute_dims", "expand_dims", "squeeze", "flatten", "broadcast_to", "concat", "split",
    "strided_slice", "take", "repeat", "tile", "matmul", "nn.conv1d", "nn.conv2d", "nn.conv3d"))


def _fp16_casts_to_bf16():
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

    @tvm.transform.module_pass(opt_level=0, name="FP16CastsToBF16")
    def casts_to_bf16(mod, _ctx):
        rewrite = CastsToBf16()
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mod[gvar] = rewrite.visit_expr(func)
        return mod

    return casts_to_bf16


def model_space(target, precision: str):
    """The design space of every task: on CUDA in half precision, kb's tensor-core space
    (WMMA sketches where a task's matmul qualifies, MetaSchedule's CUDA sketches elsewhere);
    else MetaSchedule's default."""
    if target.kind.name == "cuda" and check_precision(precision) != "fp32":
        from ..search.tensor_core_space import TensorCoreSpace

        return TensorCoreSpace()
    return "post-order-apply"


def mismatch(expected: list[np.ndarray], actual: list[np.ndarray], tolerance: Tolerance) -> str | None:
    """Why `actual` is not `expected` within `tolerance`, or None."""
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want.shape != got.shape:
            return f"output {index}: shape {got.shape} != {want.shape}"
        got64, want64 = got.astype(np.float64), want.astype(np.float64)
        atol = tolerance.atol(want64)
        if not np.allclose(got64, want64, rtol=tolerance.rtol, atol=atol):
            worst = float(np.max(np.abs(got64 - want64)))
            return f"output {index}: max abs difference {worst:.3g} (allowed {atol:.3g} + " \
                   f"{tolerance.rtol:g} x |reference|)"
    return None


def compare_sets(expected: list[list[np.ndarray]], actual: list[list[np.ndarray]],
                 tolerance: Tolerance) -> tuple[str | None, float | None]:
    """Outputs for several sets of inputs against their references: why the first set that
    misses `tolerance` misses (None: all within it), and the largest abs error over all sets."""
    why = next((f"input set {index + 1}: {why}" for index, why in enumerate(
        mismatch(want, got, tolerance) for want, got in zip(expected, actual)) if why), None)
    errors = [e for e in (max_abs_error(want, got) for want, got in zip(expected, actual)) if e is not None]
    return why, max(errors) if errors else None


def max_abs_error(expected: list[np.ndarray], actual: list[np.ndarray]) -> float | None:
    errors = [float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
              for w, g in zip(expected, actual) if w.shape == g.shape and w.size]
    return max(errors) if errors else None
