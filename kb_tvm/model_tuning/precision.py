"""The precision a model is tuned and deployed in. fp16 and bf16 feed the model's matmuls and
convolutions half-precision inputs and keep fp32 accumulators and outputs (Relax's
ToMixedPrecision; bf16 rewrites its fp16 casts, as Relax has no bf16 variant); weights are cast
once, at build time. On CUDA those tasks tune in kb's tensor-core space. The numerics check
against onnxruntime's fp32 outputs uses a tolerance per precision, stated in the report.

The math a model's nonlinear functions use is chosen here too: on CPUs erf, exp, tanh, sigmoid
and softmax become TVM's fast approximations (topi.fast_*), which vectorize, where libm's erf and
exp are scalar calls: the GELU of the shipped transformer block took 55 of its 100 us of kernel time
with libm's erf. onnxruntime approximates them too; the numerics check still applies.
`--exact-math` keeps libm's. On CUDA the math stays exact: the approximations are not
measured there (CUDA's own exp is already fast)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .rewrites import fp16_casts_to_bf16, outline_non_tensor_argument_calls, over_relax_functions

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
    # ToMixedPrecision (TVM 0.27) stops at any call with an argument other than a tensor ("Expected
    # TensorType"): such calls sit out in fp32
    passes = [relax.transform.ConvertToDataflow(), outline_non_tensor_argument_calls(), relax.transform.Normalize(),
              relax.transform.ToMixedPrecision(out_dtype="float32"), relax.transform.InlinePrivateFunctions(),
              relax.transform.ConvertToDataflow()]
    if precision == "bf16":
        passes.append(fp16_casts_to_bf16())
    passes.append(relax.transform.FoldConstant())  # the weights' casts, done once
    # ToMixedPrecision casts a tensor once per consumer: BERT's Q, K and V projections each cast
    # the layer norm's output, 24 redundant kernel launches in BERT-base
    passes.append(relax.transform.EliminateCommonSubexpr())
    return tvm.transform.Sequential(passes)(mod)


def math_for(target, *, exact: bool) -> str:
    """"fast" (TVM's approximations of erf, exp, tanh, sigmoid and softmax) or "exact" (libm's): fast on
    CPUs unless `exact`; exact on CUDA."""
    return "exact" if exact or target.kind.name == "cuda" else "fast"


def apply_math(mod, math: str):
    """The Relax module with its erf, exp, tanh, sigmoid and softmax as TVM's fast approximations
    when `math` is "fast" (Relax's FastMathTransform, before legalization: it rewrites Relax ops)."""
    from tvm import relax

    if math not in MATH:
        raise ValueError(f"math={math!r}: use one of {', '.join(MATH)}")
    return relax.transform.FastMathTransform()(sigmoid_as_exp()(mod)) if math == "fast" else mod


def sigmoid_as_exp():
    """sigmoid(x) as 1 / (1 + exp(-x)), whose exp FastMathTransform then makes TVM's fast_exp:
    LLVM lowers a sigmoid's exp to a scalar libm call per element, and the SiLU in the epilogue
    of a decoder's gate projection (SwiGLU) took a third of that GEMM kernel's time on a Zen 4."""
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    sigmoid = tvm.ir.Op.get("relax.sigmoid")

    @mutator
    class ThroughExp(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(sigmoid):
                return call
            one = relax.const(np.ones((), str(call.ty.dtype)))
            exp = self.builder_.emit(relax.op.exp(self.builder_.emit(relax.op.negative(call.args[0]))))
            return relax.op.divide(one, self.builder_.emit(relax.op.add(one, exp)))

    return over_relax_functions(ThroughExp, "SigmoidAsExp")


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
