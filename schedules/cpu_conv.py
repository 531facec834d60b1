"""The CPU convolution template: Out = epilogue(conv2d(X, W)) in fp32 on the host's vector units, as
an implicit GEMM over the task's own plain TIR (kb_tvm/kernels/fused_conv.py's
`FusedConv.reference`: blocks "pad" (where the convolution pads), "conv" into sums D[pixels,
output channels], then "epilogue").

- A register block of `rows` output pixels x `cols` output channels (a multiple of the vector
  width) is kept in registers over all of K (input channels x kernel rows x kernel columns): each
  K step broadcasts `rows` input values, read in place from the padded input (the pixels' patch
  offsets stay loop-invariant), and multiplies them with cols / lanes vectors of weights. As in
  the GEMM template, the block's sums are in `global` scope and under 1 KB, or TVM puts them on
  the heap.
- The kernel reads its weights packed as `packed_weights` says, [CO / cols, CI, KH, KW, cols],
  so that a K step's weights are contiguous vectors: `prepacked` (a model's constant weights,
  which the build packs once: kb_tvm/kernels/extern.py), or copied so on each call.
- The blocks run across threads output-channel panel first, so that the blocks a thread runs one
  after another read the same weights from its cache.
- The epilogue (bias, residual, ReLU) runs on each block as its sums are done, storing NCHW.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cpu_gemm import STACK_BYTES, packing, take_packed


@dataclass(frozen=True)
class CpuConvTile:
    rows: int  # output pixels of the register block: input values broadcast per K step
    cols: int  # output channels of the register block, a multiple of the vector width
    prepacked: bool = False  # the kernel takes its weights packed, else it packs them each call

    def __post_init__(self) -> None:
        if self.rows < 1 or self.cols < 1:
            raise ValueError(f"rows={self.rows!r}, cols={self.cols!r}: at least 1 each")
        if self.rows * self.cols * 4 >= STACK_BYTES:
            raise ValueError(f"rows={self.rows}, cols={self.cols}: {self.rows * self.cols * 4} bytes of "
                             f"accumulators, not under the {STACK_BYTES} that stay on the stack")

    def describe(self) -> str:
        return f"rows={self.rows}, cols={self.cols}" + (", prepacked" if self.prepacked else "")


def packed_weights(cols: int):
    """The index map from W[o, c, r, s] to where the kernel reads it: [o // cols, c, r, s, o % cols]."""
    return lambda o, c, r, s: (o // cols, c, r, s, o % cols)


def schedule(func, tile: CpuConvTile):
    """`func` (main(X, W, .., Out) with blocks "conv" into D[pixels, channels] and "epilogue", and
    "pad" where it pads) scheduled as `tile` says (prepacked: W is then taken as `packed_weights`
    lays it out). A ValueError where the tile does not divide the pixels or the channels."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    conv, epilogue = sch.get_sblock("conv"), sch.get_sblock("epilogue")
    pixels, channels, *_ = (int(iv.dom.extent) for iv in sch.get(conv).iter_vars)
    if pixels % tile.rows or channels % tile.cols:
        raise ValueError(f"CpuConvTile({tile.describe()}) does not divide {pixels} pixels x {channels} channels")
    p, o, *k = sch.get_loops(conv)
    p_outer, p_inner = sch.split(p, [None, tile.rows])
    o_outer, o_inner = sch.split(o, [None, tile.cols])
    sch.reorder(o_outer, p_outer, *k, p_inner, o_inner)
    blocks = sch.fuse(o_outer, p_outer)
    sch.parallel(blocks)
    sch.unroll(p_inner)
    sch.vectorize(o_inner)
    sch.decompose_reduction(conv, k[0])
    sch.reverse_compute_at(epilogue, blocks)
    take_packed(sch, conv, "W", packed_weights(tile.cols), prepacked=tile.prepacked)
    if any(sch.get(b).name_hint == "pad" for b in sch.get_child_blocks(sch.get_sblock("root"))):
        batch, channel, *_ = sch.get_loops(sch.get_sblock("pad"))  # else it reads X in place
        sch.parallel(sch.fuse(batch, channel))
    return sch.mod["main"]


def weight_packing(shape: tuple[int, int, int, int], cols: int):
    """main(W, W_packed): W[CO, CI, KH, KW] as `packed_weights` lays it out."""
    return packing(shape, packed_weights(cols))
