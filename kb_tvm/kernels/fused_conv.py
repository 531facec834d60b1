"""A task read as a fused 2-D convolution, the problem the CPU convolution family computes, read
off the task's TIR as Relax legalizes `conv2d` (NCHW data, OIHW weights, one group): an optional
"pad" block, one reduction C[n, o, y, x] += In[n, c, y*sh + r*dh, x*sw + s*dw] * W[o, c, r, s],
then any chain of elementwise blocks over C's shape (bias, residual, ReLU), the kernel's epilogue.
A task the family cannot compute is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from .family import NotApplicable, root_blocks
from .fused_gemm import REDUCE, SPATIAL, epilogue_output, kernel_inputs, kernel_shape, rebuild_at, region_indices


class NotAConv(NotApplicable):
    """The task is not a convolution the family computes; the message says why."""


@dataclass(frozen=True)
class ConvProblem:
    batch: int
    in_channels: int
    height: int  # of the input
    width: int
    out_channels: int
    kernel: tuple[int, int]  # rows, columns
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[int, int]  # zeros before the first row and column
    padded: tuple[int, int]  # the padded input's rows and columns
    out: tuple[int, int]  # the output's rows and columns

    @property
    def pixels(self) -> int:
        """Output pixels over the batch: the rows of the implicit GEMM."""
        return self.batch * self.out[0] * self.out[1]

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_channels, *self.kernel)

    def record(self) -> dict:
        """The shape, for a kernels.jsonl row: the implicit GEMM's and the convolution's."""
        return {"m": self.pixels, "n": self.out_channels, "k": self.in_channels * self.kernel[0] * self.kernel[1],
                "conv": f"{self.in_channels}x{self.height}x{self.width} -> {self.out_channels}x{self.out[0]}x"
                        f"{self.out[1]}, kernel {self.kernel[0]}x{self.kernel[1]}, stride {self.stride[0]}"}


@dataclass(frozen=True, eq=False)
class FusedConv:
    """A task the convolution family computes: its convolution and the elementwise blocks it runs
    on each sum before it stores."""

    problem: ConvProblem
    func: object  # the task's PrimFunc
    x: object  # its buffers: the data, the weights and the output
    w: object
    c: object
    conv_out: object  # the convolution block's output buffer (C itself when nothing is fused)
    epilogue: tuple

    @property
    def extras(self) -> list:
        return [buf for buf in self.func.params if not any(buf.same_as(v) for v in (self.x, self.w, self.c))]

    def value(self, acc, pixel, channel, inputs: list):
        """What the task stores for output pixel `pixel` (over the batch) and channel `channel`,
        given the fp32 sum there. inputs: (task buffer, kernel buffer) pairs."""
        p = self.problem
        n, rest = pixel // (p.out[0] * p.out[1]), pixel % (p.out[0] * p.out[1])
        at = (n, channel, rest // p.out[1], rest % p.out[1])
        computed, value = [], acc
        for block in self.epilogue:
            coords = {iv.var: _typed(iv.var, v) for iv, v in zip(block.iter_vars, at)}
            value = rebuild_at(block.body.value, coords, [(self.conv_out, acc), *computed], inputs,
                               [iv.var for iv in block.iter_vars])
            computed.append((block.body.buffer, value))
        return value

    def reference(self, symbol: str):
        """The kernel's twin in plain TIR: the task's signature (W unpacked), a "pad" block where
        the convolution pads, "conv" into D[pixels, channels], then "epilogue"."""
        from tvm.tirx import PrimFunc

        inputs = kernel_inputs(self.extras)
        main = _plain_conv(self.problem, lambda acc, q, o: self.value(acc, q, o, inputs))
        x2, w2, c2 = main.params
        pairs = [(self.x, x2), (self.w, w2), (self.c, c2), *inputs]  # the task's buffer, the kernel's
        params = [next(mine for theirs, mine in pairs if buf.same_as(theirs)) for buf in self.func.params]
        return PrimFunc(params, main.body, attrs=main.attrs).with_attr("global_symbol", symbol)

    @property
    def weight_index(self) -> int:
        return next(i for i, buf in enumerate(self.func.params) if buf.same_as(self.w))

    def kernel_shapes(self, packed_weight: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The shape the kernel takes each parameter in: the task's, the weights packed."""
        return [packed_weight if buf.same_as(self.w) else kernel_shape(buf) for buf in self.func.params]


def _typed(var, x):
    from tvm.ir.prim import expr as prim

    return x if str(x.ty) == str(var.ty) else prim.Cast(str(var.ty), x)


def _plain_conv(p: ConvProblem, epilogue):
    """main(X, W, C) for `p` in plain TIR, as schedules/cpu_conv.py expects it."""
    from tvm.script import tirx as T

    n, ci, h, w, co = p.batch, p.in_channels, p.height, p.width, p.out_channels
    (kh, kw), (sh, sw), (dh, dw), (pt, pl), (hp, wp), (ho, wo) = p.kernel, p.stride, p.dilation, p.pad, p.padded, p.out
    pads = (pt, pl) != (0, 0) or (hp, wp) != (h, w)

    # fmt: off
    @T.prim_func(s_tir=True, check_well_formed=False)
    def main(x: T.handle, wt: T.handle, c: T.handle):
        T.func_attr({"tirx.noalias": True})
        X = T.match_buffer(x, (n, ci, h, w), "float32")
        W = T.match_buffer(wt, (co, ci, kh, kw), "float32")
        C = T.match_buffer(c, (n, co, ho, wo), "float32")
        Xp = T.sblock_alloc_buffer((n, ci, hp, wp), "float32")
        D = T.sblock_alloc_buffer((n * ho * wo, co), "float32")
        if pads:
            for b, ch, y, xx in T.grid(n, ci, hp, wp):
                with T.sblock("pad"):
                    vb, vc, vy, vx = T.axis.remap("SSSS", [b, ch, y, xx])
                    Xp[vb, vc, vy, vx] = T.if_then_else(pt <= vy and vy < h + pt and pl <= vx and vx < w + pl,
                                                        X[vb, vc, vy - pt, vx - pl], T.float32(0))
        for q, o, ch, r, s in T.grid(n * ho * wo, co, ci, kh, kw):
            with T.sblock("conv"):
                vq, vo, vc, vr, vs = T.axis.remap("SSRRR", [q, o, ch, r, s])
                with T.init():
                    D[vq, vo] = T.float32(0)
                if pads:
                    D[vq, vo] = D[vq, vo] + Xp[vq // (ho * wo), vc, vq % (ho * wo) // wo * sh + vr * dh,
                                                vq % wo * sw + vs * dw] * W[vo, vc, vr, vs]
                else:
                    D[vq, vo] = D[vq, vo] + X[vq // (ho * wo), vc, vq % (ho * wo) // wo * sh + vr * dh,
                                               vq % wo * sw + vs * dw] * W[vo, vc, vr, vs]
        for q, o in T.grid(n * ho * wo, co):
            with T.sblock("epilogue"):
                vq, vo = T.axis.remap("SS", [q, o])
                C[vq // (ho * wo), vo, vq % (ho * wo) // wo, vq % wo] = epilogue(D[vq, vo], vq, vo)
    # fmt: on
    return main


def _affine(expr, var_values: dict) -> int:
    """`expr` (an index) evaluated with its variables set as `var_values` (names) says, others 0."""
    from tvm import tirx
    from tvm.sym import Analyzer
    from tvm.tirx.analysis import undefined_vars

    analyzer = Analyzer()
    for var in undefined_vars(expr):
        analyzer.bind(var, tirx.IntImm(str(var.ty), var_values.get(str(var), 0)))
    return int(analyzer.simplify(expr))


def match_fused_conv(mod, *, dtypes: tuple[str, ...] = ("float32",)) -> FusedConv:
    """The convolution and epilogue `mod`'s "main" (a MetaSchedule task or workload) computes, or NotAConv."""
    from tvm import s_tir, tirx

    func = mod["main"]
    params = list(func.params)
    sch = s_tir.Schedule(mod)
    blocks = root_blocks(sch, NotAConv)
    reductions = [i for i, b in enumerate(blocks) if REDUCE in [int(iv.iter_type) for iv in b.iter_vars]]
    if len(reductions) != 1:
        raise NotAConv(f"{len(reductions)} reduction blocks of {len(blocks)}, not one convolution")
    first = reductions[0]
    block, before, epilogue = blocks[first], blocks[:first], blocks[first + 1:]
    kinds = [int(iv.iter_type) for iv in block.iter_vars]
    if kinds != [SPATIAL] * 4 + [REDUCE] * 3:
        raise NotAConv(f"axes {kinds}: a 2-D convolution has 4 spatial and 3 reduction axes")
    if len(block.reads) != 2 or len(block.writes) != 1:
        raise NotAConv(f"reads {len(block.reads)} and writes {len(block.writes)} buffers (a convolution: 2 and 1)")
    nn, ff, yy, xx, rc, ry, rx = (str(iv.var) for iv in block.iter_vars)
    (data, weight), c = block.reads, block.writes[0]
    if region_indices(c) != [nn, ff, yy, xx] or region_indices(weight) != [ff, rc, ry, rx]:
        raise NotAConv(f"indexed as {c.source.name}{region_indices(c)} from {weight.source.name}"
                       f"{region_indices(weight)}: the family computes NCHW from OIHW weights")
    index = [r.min for r in data.region]
    if [str(i) for i in index[:2]] != [nn, rc]:
        raise NotAConv(f"reads {data.source.name}{region_indices(data)}: one group (a grouped or depthwise "
                       "convolution's channels are offset)")
    stride = tuple(_affine(i, {v: 1}) - _affine(i, {}) for i, v in ((index[2], yy), (index[3], xx)))
    dilation = tuple(_affine(i, {v: 1}) - _affine(i, {}) for i, v in ((index[2], ry), (index[3], rx)))
    if any(_affine(i, {}) for i in index[2:]) or min(*stride, *dilation) < 1:
        raise NotAConv(f"reads {data.source.name}{region_indices(data)}: not y * stride + r * dilation")
    for dtype in (data.source.dtype, weight.source.dtype, c.source.dtype):
        if str(dtype) not in dtypes:
            raise NotAConv(f"computes in {dtype}: the family takes {' or '.join(dtypes)}")
    x = data.source
    pad = (0, 0)
    if before:
        if len(before) != 1 or not before[0].writes[0].source.same_as(x) or len(before[0].reads) != 1:
            raise NotAConv(f"{len(before)} block(s) before the convolution; the family pads its input itself")
        padding = before[0]
        x = padding.reads[0].source
        at = [r.min for r in padding.reads[0].region]
        pad = (-_affine(at[2], {}), -_affine(at[3], {}))
        if [str(i) for i in at[:2]] != [str(iv.var) for iv in padding.iter_vars[:2]] or min(pad) < 0:
            raise NotAConv(f"block {padding.name_hint!r} before the convolution is not a zero padding")
    for name, buf in (("the data", x), ("the weights", weight.source)):
        if not any(buf.same_as(p) for p in params):
            raise NotAConv(f"{name} ({buf.name}) are computed inside the task, not one of its inputs")
    out = epilogue_output(c.source, epilogue, params, "convolution", NotAConv)
    if str(out.dtype) not in dtypes:
        raise NotAConv(f"output {out.dtype}: the family writes {' or '.join(dtypes)}")
    n, ci, h, w = (int(d) for d in x.shape)
    co, _, kh, kw = (int(d) for d in weight.source.shape)
    padded = tuple(int(d) for d in data.source.shape[2:])
    problem = ConvProblem(batch=n, in_channels=ci, height=h, width=w, out_channels=co, kernel=(kh, kw),
                          stride=stride, dilation=dilation, pad=pad, padded=padded,
                          out=tuple(int(d) for d in c.source.shape[2:]))
    fused = FusedConv(problem=problem, func=func, x=x, w=weight.source, c=out, conv_out=c.source,
                      epilogue=tuple(epilogue))
    # the epilogue rebuilt once at symbolic coordinates: what it cannot fuse is refused now, with why
    fused.value(tirx.Var("acc", "float32"), tirx.Var("q", "int32"), tirx.Var("o", "int32"), [])
    return fused
