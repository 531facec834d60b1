"""The CPU GEMM template: C = epilogue(A @ B) in fp32 on the host's vector units, written as a
schedule of the task's own plain TIR (kb_tvm/kernels/fused_gemm.py's `FusedGemm.reference`: blocks
"gemm", then "epilogue", over A, B and C as 2-D views).

- A register block of `rows` x `cols` accumulators (`cols` a multiple of the vector width) is kept
  in registers over all of K: each K step broadcasts `rows` values of A and multiplies them with
  cols / lanes vectors of B. The block's buffer must be in `global` scope and under TVM's stack
  limit (1 KB), or TVM allocates it on the heap, where LLVM stores every accumulator at every K
  step (half the speed on a Zen 4).
- With `pack_b`, B is read from panels [N / cols, K, cols], so that a block reads its panel
  contiguously: copied on each call, or `prepacked` (a model's constant B, packed once at
  build). A B[N, K] (a Linear layer's weight) needs it: read in place it costs strided loads
  across rows. A B[K, N] may not: its panel is `cols` contiguous floats a row.
  Where N is no multiple of `cols` (GPT-2's 50257 words), the last panel is padded with zero
  columns, which the epilogue does not store; prepacked, the build pads it (the kernel's B has
  the padded columns: `FusedGemm.reference(b_columns=)`).
- The blocks are spread over the threads column panel outermost, so that the blocks a thread
  runs one after another read the same panel of B from its cache.
- The epilogue (bias, GELU, residual) runs on each block as soon as its sums are done.
"""

from __future__ import annotations

from dataclasses import dataclass

from .padding import zero_padded

# TVM keeps a CPU buffer on the stack below this many bytes (LowerTVMBuiltin's kMaxStackAlloca)
STACK_BYTES = 1024


@dataclass(frozen=True)
class CpuGemmTile:
    rows: int  # rows of the register block: values of A broadcast per K step
    cols: int  # columns of the register block, a multiple of the vector width
    pack_b: bool = True  # read B from [N / cols, K, cols] panels
    prepacked: bool = False  # the kernel takes B's panels (a constant B, packed once at build), else copies them

    def __post_init__(self) -> None:
        if self.prepacked and not self.pack_b:
            raise ValueError("prepacked=True needs pack_b=True: it is how B's panels reach the kernel")
        if self.rows < 1:
            raise ValueError(f"rows={self.rows!r}: at least 1")
        if self.cols < 1:
            raise ValueError(f"cols={self.cols!r}: at least 1")
        if self.rows * self.cols * 4 >= STACK_BYTES:
            raise ValueError(f"rows={self.rows}, cols={self.cols}: {self.rows * self.cols * 4} bytes of "
                             f"accumulators, not under the {STACK_BYTES} that stay on the stack")

    def describe(self) -> str:
        return f"rows={self.rows}, cols={self.cols}, pack_b={self.pack_b}" + (", prepacked" if self.prepacked else "")


def panels(b_layout: str, cols: int):
    """The index map from B[k, j] ("kn") or B[j, k] ("nk") to its panels [j // cols, k, j % cols]."""
    return (lambda kk, jj: (jj // cols, kk, jj % cols)) if b_layout == "kn" else \
        (lambda jj, kk: (jj // cols, kk, jj % cols))


def take_packed(sch, block, buffer: str, index_map, *, prepacked: bool, copy: str | None = None) -> None:
    """`block` reads input `buffer` in `index_map`'s layout: prepacked, the kernel takes it so (the
    build packs it: `packing`); else the kernel copies it so on each call (in block `copy` where
    one already copies it, as pad_einsum's), the copy's outer loop across the threads and its
    last one a vector."""
    index = [region.source.name for region in sch.get(block).reads].index(buffer)
    if prepacked:
        sch.transform_layout(block, ("read", index), index_map)
        return
    packed = sch.get_sblock(copy) if copy else sch.cache_read(block, index, "global")
    sch.transform_layout(block, ("read", index), index_map)
    sch.transform_block_layout(packed, index_map)  # its loops follow the packed layout: contiguous writes
    outer, *_, lane = sch.get_loops(packed)
    sch.parallel(outer)
    sch.vectorize(lane)


def packing(shape: tuple[int, ...], index_map, dtype: str = "float32", padded: tuple[int, ...] | None = None):
    """main(X, X_packed): X of `shape` copied into `index_map`'s layout, what the build runs once
    on a constant input a kernel takes prepacked (and the variant search on the task's input);
    with `padded` (a larger shape), X is first padded with zeros to it."""
    from tvm import s_tir, te

    if padded is None:
        source = te.placeholder(shape, dtype, name="X")
        copy = te.compute(shape, lambda *i: source(*i), name="pack")
    else:
        source, copy = zero_padded(shape, padded, dtype, "pack")
    sch = s_tir.Schedule(te.create_prim_func([source, copy]))
    sch.transform_layout(sch.get_sblock("pack"), ("write", 0), index_map)
    return sch.mod["main"]


def schedule(func, tile: CpuGemmTile, b_layout: str):
    """`func` (main(..A.., ..B.., ..C..) with blocks "gemm" and "epilogue", B[K, N] for b_layout
    "kn", B[N, K] for "nk") scheduled as `tile` says: a ScheduleError where TVM refuses it; a
    ValueError for an unpacked B whose N is no multiple of `cols`."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    gemm, epilogue = sch.get_sblock("gemm"), sch.get_sblock("epilogue")
    n = int(sch.get(gemm).iter_vars[1].dom.extent)
    padded = n % tile.cols != 0
    b_name = "B"
    if padded:  # B's last panel and the sums get zero columns, which the epilogue does not store
        if not tile.pack_b or tile.prepacked:
            raise ValueError(f"N={n} is no multiple of cols={tile.cols}: B must be packed on each call "
                             "(or given padded: FusedGemm.reference(b_columns=))")
        sch.pad_einsum(gemm, [1, tile.cols, 1])
        sch.compute_inline(sch.get_sblock("D_pad"))  # the epilogue reads the padded sums
        b_name = "B_pad"
    # the epilogue stores fewer columns than the sums have where B is padded, here or at build
    narrow_epilogue = padded or int(sch.get(epilogue).iter_vars[1].dom.extent) != n
    i, j, k = sch.get_loops(gemm)
    i_outer, i_inner = sch.split(i, [None, tile.rows])
    j_outer, j_inner = sch.split(j, [None, tile.cols])
    sch.reorder(j_outer, i_outer, k, i_inner, j_inner)
    blocks = sch.fuse(j_outer, i_outer)
    sch.parallel(blocks)
    sch.unroll(i_inner)
    sch.vectorize(j_inner)
    sch.decompose_reduction(gemm, k)
    sch.reverse_compute_at(epilogue, blocks)
    if not narrow_epilogue:  # a padded block's epilogue stores only the columns below N: not one vector
        sch.vectorize(sch.get_loops(epilogue)[-1])
    if tile.pack_b:  # padded: B_pad, which pad_einsum made, copies B into its panels on each call
        take_packed(sch, gemm, b_name, panels(b_layout, tile.cols), prepacked=tile.prepacked,
                    copy="B_pad" if padded else None)
    return sch.mod["main"]
