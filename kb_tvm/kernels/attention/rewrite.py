"""A model's attention as one task: the Relax graph an ONNX export's attention imports as (two
matmuls around a softmax, fp16/bf16 inputs with fp32 accumulation) replaced by one call of
`kb_attention`, a PrimFunc computing the same thing, which the attention family then replaces by
its fused kernel. Without the rewrite the scores are three tasks (QKᵀ with the mask's add, the
softmax, ·V) that write and read a [heads, seq, seq] tensor in between.

What is matched, from the second matmul back (optional steps in brackets):

    s = matmul(q, kᵀ, fp32)  [astype half [* scale], astype fp32 | * scale]  [+ bias]
    p = softmax(s, last axis)  [where(isnan(p), 0, p)]
    o = matmul(astype(p, half), v, fp32)  [astype half]

(a scale: times a scalar constant, or divided by a power of two; casts to the dtype a value has
are skipped). q, kᵀ and v are [.., seq, d], [.., d, seq_kv] and [.., seq_kv, d_v] with the same
leading axes (the heads); or kᵀ and v each a repeat of fewer heads (grouped-query attention as
transformers writes it, repeat_kv: expand_dims, broadcast_to, reshape; then on kᵀ its transpose
and a scalar scale), which the kernel reads unrepeated; or kᵀ and v of one head that the matmuls
broadcast (multi-query attention, Falcon's). The bias (the mask: causal, padding) broadcasts to
the scores. The exports of transformers' Llama, GPT-2, BERT and ViT and torchvision's ViT import
as this, and so do 24 of the 30 architectures with attention in benchmarks/zoo.py (not: Gemma 2's
capped scores, BLOOM's ALiBi, and the position biases of DeBERTa-v2, MPNet, BEiT and Swin).
Anything else is left as it was, and so is an attention whose heads no tile of the kernel takes
(d not a multiple of 16). The rewrite keeps every op's order and rounding, so the
untuned build computes what it did: the tests compare the two."""

from __future__ import annotations

from dataclasses import dataclass, replace

HALF = ("float16", "bfloat16")
NAME = "kb_attention"  # the PrimFunc's name hint: its task is "kb_attention", "kb_attention1", ...
ATTR = "kb_attention"  # the PrimFunc attribute the family reads the problem from
OUT_LAYOUTS = ("bhsd", "bshd")


@dataclass(frozen=True)
class AttentionShape:
    """One attention call as the kernel computes it: `heads` independent (seq x seq_kv) problems
    (the leading axes, flattened), inputs in `dtype`, output in `out_dtype`; `bias_dims`: the
    bias's four dims (batch, heads, seq, seq_kv), each 1 where it broadcasts, or None."""

    batch: int
    heads: int
    seq: int
    seq_kv: int
    d: int
    d_v: int
    dtype: str
    out_dtype: str
    bias_dims: tuple[int, int, int, int] | None
    round_scores: bool  # the scores are rounded to `dtype` before the bias (an fp16 model's cast)
    nan_to_zero: bool  # a row whose scores are all -inf gives 0 (the export's isnan guard), not NaN
    # the scores times this before the bias (BERT's 1/sqrt(d)): in `dtype` after the rounding where
    # round_scores, else in fp32
    scale: float = 1.0
    # query heads a K/V head serves (grouped-query attention: `heads` // kv_group K and V heads,
    # query head h reading K/V head h // kv_group)
    kv_group: int = 1
    # the output's axes: "bhsd" [batch, heads, seq, d_v], or "bshd" [batch, seq, heads, d_v], the
    # layout the model's output projection reads the heads in (`_out_layout_mutator`)
    out_layout: str = "bhsd"

    def __post_init__(self) -> None:
        if self.out_layout not in OUT_LAYOUTS:
            raise ValueError(f"out_layout {self.out_layout!r} is not one of {', '.join(OUT_LAYOUTS)}")

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        if self.out_layout == "bshd":
            return (self.batch, self.seq, self.heads, self.d_v)
        return (self.batch, self.heads, self.seq, self.d_v)

    def attrs(self) -> dict:
        return {"batch": self.batch, "heads": self.heads, "seq": self.seq, "seq_kv": self.seq_kv, "d": self.d,
                "d_v": self.d_v, "dtype": self.dtype, "out_dtype": self.out_dtype,
                "bias_dims": list(self.bias_dims) if self.bias_dims is not None else [],
                "round_scores": int(self.round_scores), "nan_to_zero": int(self.nan_to_zero), "scale": self.scale,
                "kv_group": self.kv_group, "out_layout": self.out_layout}

    @classmethod
    def from_attrs(cls, attrs) -> "AttentionShape":
        bias = [int(d) for d in attrs["bias_dims"]]
        return cls(batch=int(attrs["batch"]), heads=int(attrs["heads"]), seq=int(attrs["seq"]),
                   seq_kv=int(attrs["seq_kv"]), d=int(attrs["d"]), d_v=int(attrs["d_v"]),
                   dtype=str(attrs["dtype"]), out_dtype=str(attrs["out_dtype"]),
                   bias_dims=tuple(bias) if bias else None, round_scores=bool(int(attrs["round_scores"])),
                   nan_to_zero=bool(int(attrs["nan_to_zero"])), scale=float(attrs["scale"]),
                   kv_group=int(attrs["kv_group"]) if "kv_group" in attrs else 1,
                   out_layout=str(attrs["out_layout"]) if "out_layout" in attrs else "bhsd")


def attention_te(q, k_t, v, bias, shape: AttentionShape):
    """The computation, in TE, on 4-D q [B, H, S, D], kᵀ [B, H/G, D, Skv], v [B, H/G, Skv, Dv] (G:
    kv_group) and bias [b, h, s, Skv] (dims of 1 broadcast): the reference the family's kernels
    are checked against, and what MetaSchedule schedules where no kernel is chosen."""
    from tvm import te, tirx, topi

    f32, g = "float32", shape.kv_group
    d = te.reduce_axis((0, shape.d), name="d")
    scores = te.compute((shape.batch, shape.heads, shape.seq, shape.seq_kv),
                        lambda b, h, i, j: te.sum(q[b, h, i, d].astype(f32) * k_t[b, h // g, d, j].astype(f32), axis=d),
                        name="scores")
    if shape.round_scores:
        exact = scores
        if shape.scale != 1.0:
            scores = te.compute(exact.shape, lambda *i: (exact(*i).astype(shape.dtype) * tirx.const(
                shape.scale, shape.dtype)).astype(f32), name="rounded")
        else:
            scores = te.compute(exact.shape, lambda *i: exact(*i).astype(shape.dtype).astype(f32), name="rounded")
    elif shape.scale != 1.0:
        exact = scores
        scores = te.compute(exact.shape, lambda *i: exact(*i) * tirx.const(shape.scale, f32), name="scaled")
    if bias is not None:
        dims = shape.bias_dims

        def at(b, h, i, j):
            return bias[b if dims[0] > 1 else 0, h if dims[1] > 1 else 0, i if dims[2] > 1 else 0, j]

        plain = scores
        scores = te.compute(plain.shape, lambda b, h, i, j: plain[b, h, i, j] + at(b, h, i, j), name="biased")
    probs = topi.nn.softmax(scores, axis=3)
    if shape.nan_to_zero:
        raw = probs
        probs = te.compute(raw.shape, lambda *i: tirx.Select(tirx.isnan(raw(*i)), tirx.const(0, f32), raw(*i)),
                           name="finite")
    half = te.compute(probs.shape, lambda *i: probs(*i).astype(shape.dtype), name="probs")
    j = te.reduce_axis((0, shape.seq_kv), name="j")

    def out_at(b, h, i, e):
        return te.sum(half[b, h, i, j].astype(f32) * v[b, h // g, j, e].astype(f32), axis=j)

    if shape.out_layout == "bshd":
        out = te.compute(shape.out_shape, lambda b, i, h, e: out_at(b, h, i, e), name="out")
    else:
        out = te.compute(shape.out_shape, out_at, name="out")
    if shape.out_dtype != f32:
        acc = out
        out = te.compute(acc.shape, lambda *i: acc(*i).astype(shape.out_dtype), name="out_cast")
    return out


def fuse_attention(mod):
    """`mod` with every attention it matches computed by one `kb_attention` call (its PrimFunc
    carries the AttentionShape as attribute ATTR and is opaque to fusion, so that it stays one
    task); unchanged where nothing matches."""
    from tvm import relax

    from ...model_tuning.rewrites import over_relax_functions

    fused = over_relax_functions(_attention_mutator(), "FuseAttention")(mod)
    return relax.transform.DeadCodeElimination()(over_relax_functions(_out_layout_mutator(), "AttentionOutLayout")(
        relax.transform.DeadCodeElimination()(fused)))


def keeps_bshd_order(names: list[str], axes: list[int], extents: dict[str, int]) -> bool:
    """Whether permuting axes named `names` (of "b", "h", "s", "e": batch, heads, query rows, d_v)
    by `axes` lays the values out as [batch, seq, heads, d_v] does, axes of extent 1 aside."""
    order = [names[a] for a in axes if extents[names[a]] != 1]
    return order == [n for n in "bshe" if extents[n] != 1 and n in names]


def _out_layout_mutator():
    """A transpose of an attention's output into [batch, seq, heads, d_v] order (the heads merged
    back for the output projection: a kernel of its own, a launch and a pass over the output)
    made the attention's own store: its `kb_attention` call computes that layout (out_layout
    "bshd") and the transpose becomes a reshape, a view. Only where the output is read by the
    transpose alone."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from ...model_tuning.rewrites import use_counts

    permute, reshape = tvm.ir.Op.get("relax.permute_dims"), tvm.ir.Op.get("relax.reshape")
    call_tir = tvm.ir.Op.get("relax.call_tir")

    @mutator
    class OutLayout(PyExprMutator):
        def visit_function_(self, func):
            self.uses = use_counts(func)
            return super().visit_function_(func)

        def producer(self, var):
            """(the call bound to `var` through aliases, every var on the way read once), or None."""
            expr = var
            while isinstance(expr, relax.Var):
                if self.uses.get(expr, 0) != 1:
                    return None
                expr = self.lookup_binding(expr)
            return expr if isinstance(expr, relax.Call) else None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(permute) or call.attrs.axes is None:
                return call
            source = self.producer(call.args[0])
            while source is not None and source.op.same_as(reshape):  # values stay where they are
                source = self.producer(source.args[0])
            if source is None or not source.op.same_as(call_tir):
                return call
            func = self.builder_.get()[source.args[0]]
            if func.attrs is None or ATTR not in func.attrs:
                return call
            shape = AttentionShape.from_attrs(func.attrs[ATTR])
            extents = {"b": shape.batch, "h": shape.heads, "s": shape.seq, "e": shape.d_v}
            read_as = [int(x) for x in call.args[0].ty.shape.values]
            # the transpose reads the output as [batch, heads, seq, d_v], or [heads, seq, d_v] at batch 1
            names = ["b", "h", "s", "e"] if len(read_as) == 4 else ["h", "s", "e"]
            if shape.out_layout != "bhsd" or read_as != [extents[n] for n in names] or (
                    len(names) == 3 and shape.batch != 1):
                return call
            if not keeps_bshd_order(names, [int(a) for a in call.attrs.axes], extents):
                return call
            moved = replace(shape, out_layout="bshd")
            args = list(source.args[1].fields)
            func_te = (lambda q_, k_, v_, b_: attention_te(q_, k_, v_, b_, moved)) if len(args) == 4 else \
                (lambda q_, k_, v_: attention_te(q_, k_, v_, None, moved))
            out = self.builder_.emit(self.builder_.call_te(
                func_te, *args, primfunc_name_hint=NAME, primfunc_attrs={ATTR: moved.attrs(), "op_pattern": 8}))
            return relax.op.reshape(out, [int(x) for x in call.ty.shape.values])

    return OutLayout


def _attention_mutator():
    import math

    from ...schedules.flash_attention import AttentionTile
    import ml_dtypes  # noqa: F401 - numpy's bfloat16, for a bf16 model's scale
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from ...model_tuning.rewrites import scalar_constant, static_shape, use_counts

    op = {name: tvm.ir.Op.get(f"relax.{name}") for name in ("matmul", "astype", "add", "multiply", "divide", "where",
                                                            "isnan", "permute_dims", "reshape", "broadcast_to",
                                                            "expand_dims")}
    softmax = tvm.ir.Op.get("relax.nn.softmax")

    def call_of(expr, name_or_op):
        target = op[name_or_op] if isinstance(name_or_op, str) else name_or_op
        return expr if isinstance(expr, relax.Call) and expr.op.same_as(target) else None

    def cast_to_half_once(func) -> set:
        """The variables of `func` whose one use is a cast to a half dtype."""
        uses, casts = use_counts(func), set()
        for block in getattr(func.body, "blocks", []):
            for binding in block.bindings:
                cast = call_of(binding.value, "astype")
                if cast is not None and str(cast.ty.dtype) in HALF and isinstance(cast.args[0], relax.Var):
                    casts.add(cast.args[0])
        return {var for var in casts if uses.get(var) == 1}

    @mutator
    class FuseAttention(PyExprMutator):
        def value(self, expr):
            """What a dataflow variable is bound to, through aliases and casts to the dtype it has
            (GPT-J's softmax, cast to fp32 again; the expression itself otherwise)."""
            while True:
                while isinstance(expr, relax.Var):
                    bound = self.lookup_binding(expr)
                    if bound is None:
                        return expr
                    expr = bound
                same = call_of(expr, "astype")
                if same is None or str(same.args[0].ty.dtype) != str(same.ty.dtype):
                    return expr
                expr = same.args[0]

        def visit_function_(self, func):
            self.cast_later = cast_to_half_once(func)
            return super().visit_function_(func)

        def visit_var_binding_(self, binding):
            self.bound = binding.var  # the variable visit_call_'s call is bound to
            super().visit_var_binding_(binding)

        def visit_call_(self, call):
            call = super().visit_call_(call)
            out_dtype = "float32"
            second = call_of(call, "astype")
            if second is not None and str(call.ty.dtype) in HALF:
                out_dtype = str(call.ty.dtype)
                second = call_of(self.value(call.args[0]), "matmul")
            else:
                second = call_of(call, "matmul")
                if second is not None and getattr(self, "bound", None) in self.cast_later:
                    return call  # matched at its cast, so that the kernel stores halves
            if second is None or str(second.ty.dtype) != "float32":
                return call
            matched = self.match(second, out_dtype)
            return call if matched is None else matched

        def match(self, second, out_dtype):
            """The kb_attention call computing `second` (then cast to `out_dtype`), or None."""
            probs16 = call_of(self.value(second.args[0]), "astype")
            v = second.args[1]
            if probs16 is None or str(probs16.ty.dtype) not in HALF or str(v.ty.dtype) != str(probs16.ty.dtype):
                return None
            dtype = str(probs16.ty.dtype)
            probs, nan_to_zero = self.value(probs16.args[0]), False
            guarded = call_of(probs, "where")
            if guarded is not None:  # where(isnan(p), 0, p)
                test = call_of(self.value(guarded.args[0]), "isnan")
                if (test is None or not test.args[0].same_as(guarded.args[2])
                        or scalar_constant(guarded.args[1]) != 0.0):
                    return None
                probs, nan_to_zero = self.value(guarded.args[2]), True
            sm = call_of(probs, softmax)
            if sm is None or str(sm.ty.dtype) != "float32" or int(sm.attrs.axis) not in (-1, len(sm.ty.shape) - 1):
                return None
            scores, bias = self.value(sm.args[0]), None
            added = call_of(scores, "add")
            if added is not None:
                left, right = self.value(added.args[0]), self.value(added.args[1])
                # the scores are the operand that a matmul (or its casts) computes
                if self.scores_matmul(left)[0] is not None:
                    scores, bias = left, added.args[1]
                elif self.scores_matmul(right)[0] is not None:
                    scores, bias = right, added.args[0]
                else:
                    return None
            first, round_scores, scale = self.scores_matmul(scores)
            if first is None:
                return None
            q, k_t = first.args
            k_t, v, kv_group = self.unrepeated(k_t, v)
            qd, kd, vd = static_shape(q), static_shape(k_t), static_shape(v)
            if None in (qd, kd, vd) or not (len(qd) == len(kd) == len(vd) >= 2):
                return None
            lead, (seq, d), (d_k, seq_kv), (seq_v, d_v) = qd[:-2], qd[-2:], kd[-2:], vd[-2:]
            if kv_group == 1 and lead and lead[-1] > 1 and kd[:-2] == vd[:-2] == [*lead[:-1], 1]:
                kv_group = lead[-1]  # one K/V head that the matmuls broadcast (Falcon's multi-query attention)
            kv_lead = [*lead[:-1], lead[-1] // kv_group] if lead else []
            if kd[:-2] != kv_lead or vd[:-2] != kv_lead or d_k != d or seq_v != seq_kv or len(lead) > 2:
                return None
            if static_shape(sm) != [*lead, seq, seq_kv]:  # a bias that broadcasts the scores to more heads
                return None
            if str(q.ty.dtype) != dtype or str(k_t.ty.dtype) != dtype:
                return None
            if AttentionTile(bm=64, bn=32).fits(d, d_v):  # the smallest tile: no kernel takes these heads
                return None
            batch, heads = ([1] * (2 - len(lead)) + lead)
            bias_dims = None
            if bias is not None:
                bd = static_shape(bias)
                if bd is None or str(bias.ty.dtype) != "float32" or len(bd) > 4:
                    return None
                bd = [1] * (4 - len(bd)) + bd
                if any(got not in (1, full) for got, full in zip(bd, (batch, heads, seq, seq_kv))) or bd[3] != seq_kv:
                    return None
                bias_dims = tuple(bd)
            shape = AttentionShape(batch=batch, heads=heads, seq=seq, seq_kv=seq_kv, d=d, d_v=d_v, dtype=dtype,
                                   out_dtype=out_dtype, bias_dims=bias_dims, round_scores=round_scores,
                                   nan_to_zero=nan_to_zero, scale=scale, kv_group=kv_group)
            as4 = [self.four_d(q, batch, heads)] + [self.four_d(x, batch, heads // kv_group) for x in (k_t, v)]
            args = as4 + ([self.builder_.emit(relax.op.reshape(bias, bias_dims))] if bias is not None else [])
            func = (lambda q_, k_, v_, b_: attention_te(q_, k_, v_, b_, shape)) if bias is not None else \
                (lambda q_, k_, v_: attention_te(q_, k_, v_, None, shape))
            out = self.builder_.emit(self.builder_.call_te(
                func, *args, primfunc_name_hint=NAME, primfunc_attrs={ATTR: shape.attrs(), "op_pattern": 8}))
            return relax.op.reshape(out, [*lead, seq, d_v]) if len(lead) != 2 else out

        def unrepeated(self, k_t, v):
            """(kᵀ, v, G): kᵀ and v computed from their K/V heads without the repeat where both
            repeat each head G > 1 times (`repeated_heads`), as they were otherwise (G = 1)."""
            k_rep, v_rep = self.repeated_heads(k_t), self.repeated_heads(v)
            if k_rep is None or v_rep is None or k_rep[1] != v_rep[1]:
                return k_t, v, 1
            (k_small, group, k_steps), (v_small, _, v_steps) = k_rep, v_rep
            for step in k_steps:
                k_small = self.builder_.emit(step(k_small))
            for step in v_steps:
                v_small = self.builder_.emit(step(v_small))
            return k_small, v_small, group

        def repeated_heads(self, expr):
            """(x, G, steps) where `expr` is `steps` (head-wise: a multiply by a scalar, a swap of
            the last two axes, a cast: a decode step's fp32 cache is repeated, then cast to half;
            in the order to apply) applied to 4-D x [B, Hkv, S, D] with each
            head repeated G times (expand_dims at axis 2, broadcast_to [B, Hkv, G, S, D], reshape
            [B, Hkv * G, S, D]); None otherwise."""
            steps = []
            expr = self.value(expr)
            while True:
                scaled, swapped = call_of(expr, "multiply"), call_of(expr, "permute_dims")
                cast = call_of(expr, "astype")
                if cast is not None:
                    steps.append(lambda y, dtype=str(cast.ty.dtype): relax.op.astype(y, dtype))
                    expr = self.value(cast.args[0])
                elif scaled is not None and self.scalar(scaled.args[1]) is not None:
                    steps.append(lambda y, c=scaled.args[1]: relax.op.multiply(y, c))
                    expr = self.value(scaled.args[0])
                elif swapped is not None and swapped.attrs.axes is not None and [
                        int(a) for a in swapped.attrs.axes] == [0, 1, 3, 2]:
                    steps.append(lambda y: relax.op.permute_dims(y, [0, 1, 3, 2]))
                    expr = self.value(swapped.args[0])
                else:
                    break
            reshaped = call_of(expr, "reshape")
            wide = call_of(self.value(reshaped.args[0]), "broadcast_to") if reshaped is not None else None
            expanded = call_of(self.value(wide.args[0]), "expand_dims") if wide is not None else None
            if expanded is None or [int(a) for a in expanded.attrs.axis] != [2]:
                return None
            x = expanded.args[0]
            xd, wd, rd = static_shape(x), static_shape(wide), static_shape(reshaped)
            if None in (xd, wd, rd) or len(xd) != 4 or len(wd) != 5:
                return None
            (b, kv_heads, s, d), group = xd, wd[2]
            if wd != [b, kv_heads, group, s, d] or rd != [b, kv_heads * group, s, d] or group < 2:
                return None
            return x, group, steps[::-1]

        def scores_matmul(self, expr):
            """(the fp32 matmul of half inputs computing `expr`, whether it is rounded to half on
            the way: astype(astype(mm, half) [* scale], fp32), and the scale: a scalar constant it
            is multiplied by, 1.0 if none), or (None, False, 1.0)."""
            none = None, False, 1.0
            up, rounded, scale, half = call_of(expr, "astype"), False, 1.0, None
            if up is not None and str(up.ty.dtype) == "float32":
                inner = self.value(up.args[0])
                if (scaled := self.scaling(inner)) is not None:
                    inner, scale = scaled
                down = call_of(inner, "astype")
                if down is None or str(down.ty.dtype) not in HALF:
                    return none
                expr, rounded, half = self.value(down.args[0]), True, str(down.ty.dtype)
            elif (scaled := self.scaling(expr)) is not None:
                expr, scale = scaled
            mm = call_of(expr, "matmul")
            if mm is None or str(mm.ty.dtype) != "float32" or str(mm.args[0].ty.dtype) not in HALF:
                return none
            if rounded and half != str(mm.args[0].ty.dtype):
                return none
            return mm, rounded, scale

        def scaling(self, expr):
            """(x, c) where `expr` is x times a scalar constant c, or x divided by one whose
            reciprocal c is exact, a power of two (GPT-J divides the scores by sqrt(d)); else None."""
            scaled, divided = call_of(expr, "multiply"), call_of(expr, "divide")
            if scaled is not None and (c := self.scalar(scaled.args[1])) is not None:
                return self.value(scaled.args[0]), c
            if divided is not None and (c := self.scalar(divided.args[1])) and abs(math.frexp(c)[0]) == 0.5:
                return self.value(divided.args[0]), 1.0 / c
            return None

        def scalar(self, expr) -> float | None:
            """The value of a one-element constant (through variables and casts, rounded as they
            round), or None."""
            expr = self.value(expr)
            if (value := scalar_constant(expr)) is not None:
                return value
            cast = call_of(expr, "astype")
            inner = self.scalar(cast.args[0]) if cast is not None else None
            return None if inner is None else float(np.array(inner, dtype=str(cast.ty.dtype)).astype(np.float64))

        def four_d(self, x, batch, heads):
            shape = [int(s) for s in x.ty.shape.values]
            return x if len(shape) == 4 else self.builder_.emit(relax.op.reshape(x, [batch, heads, *shape[-2:]]))

    return FuseAttention
