"""The default schedule of a CPU task that nobody tuned: its threads and vectors.

A task kb leaves at its default (trivial ones, reshapes, norms, softmaxes below the floor) would
otherwise lower as TVM writes it: serial loops on one core, vectorized only where LLVM manages
it. In a small decoder on 2 cores such tasks were 6% of the model's time. Here, as dlight's GPU
`Fallback` does for threads, each function's injective blocks are inlined where they can be;
each remaining block runs its leading spatial loops across the threads (where there is enough
work to pay for waking them), and an injective block's innermost loop as vectors where its reads
are contiguous and its extent is a multiple of the vector width. Reductions of the softmax and norm kind get dlight's CPU
`Reduction` first (relax_build.py); matmuls and convolutions keep TVM's serial loops (kb tunes
them, or a kernel family takes them).
"""

from __future__ import annotations

# element reads (a block's elements x the buffers it reads) below which waking the thread pool
# (about a microsecond) costs more than the second thread saves: an embedding's gather of 128 x 256
# ran slower across threads, a rotary embedding of the same size faster
PARALLEL_MIN = 1 << 17


def leading_spatial(dom_kind: str) -> int:
    """How many of a block's loops, outermost first, are spatial ("SSR" -> 2)."""
    return len(dom_kind) - len(dom_kind.lstrip("S"))


def vector_lanes(target, bits: int) -> int:
    """Lanes of a `bits`-wide value in the target's vector registers (at least 1)."""
    from tvm.target.codegen import llvm_get_vector_width

    width = llvm_get_vector_width(target)
    return max((width if width > 0 else 128) // max(bits, 1), 1)


class Refusable:
    """A dlight rule whose ScheduleError means "not this function" (None) rather than a failed
    build: dlight's rules assume the block shapes they match, and a model's rarer functions break
    that (the next rule, or TVM's unscheduled lowering, takes them)."""

    def __init__(self, rule) -> None:
        self.rule = rule

    def apply(self, func, target, tunable: bool):
        from tvm.s_tir import ScheduleError

        try:
            return self.rule.apply(func, target, tunable)
        except ScheduleError:
            return None


class CpuReduction(Refusable):
    """dlight's CPU `Reduction` for softmaxes and norms with enough work for the threads (matmuls
    and convolutions are `CpuFallback`'s). It vectorizes every injective block, and LLVM refused
    its vectors of bools (a mask's padding and causal parts combined: "and <16 x i1>, <16 x i8>"):
    the blocks that compute bools are inlined into their consumers first; where one cannot be,
    the function is `CpuFallback`'s."""

    def __init__(self) -> None:
        from tvm.s_tir import dlight as dl

        super().__init__(dl.cpu.Reduction())

    def apply(self, func, target, tunable: bool):
        from tvm import s_tir, tirx
        from tvm.s_tir import ScheduleError

        if not isinstance(func, tirx.PrimFunc):
            return None
        sch = s_tir.Schedule(func)
        try:
            root = sch.get_sblock("root")
        except ScheduleError:  # no blocks to read: TOPI writes a cumsum (OPT's positions) as plain loops
            return None
        blocks = [sch.get(b) for b in sch.get_child_blocks(root)]
        if any(is_contraction(b) for b in blocks) or sum(work(b) for b in blocks) < PARALLEL_MIN:
            return None  # a matmul's or convolution's default (CpuFallback's), or too little for threads
        for block in blocks:
            if block.writes[0].source.dtype == "bool":
                try:
                    sch.compute_inline(sch.get_sblock(block.name_hint))
                except ScheduleError:
                    return None
        return super().apply(sch.mod["main"], target, tunable)


def is_contraction(block) -> bool:
    """A reduction along two tensors (a matmul's, a convolution's), not along one (a softmax's sum,
    which also reads the row's max; a norm's mean)."""
    axes = [v.var for v in block.iter_vars if v.iter_type == v.CommReduce]
    along = {region.source.name for region in block.reads
             if any(_uses(r.min, var) for r in region.region for var in axes)}
    return len(along) > 1


def work(block) -> int:
    """A block's element reads: its iterations x the buffers it reads (symbolic extents: PARALLEL_MIN)."""
    from tvm import tirx

    total = max(len(block.reads), 1)
    for var in block.iter_vars:
        extent = var.dom.extent
        if not isinstance(extent, tirx.IntImm):
            return PARALLEL_MIN
        total *= int(extent)
    return total


class CpuFallback:
    """dlight's `ScheduleRule.apply(func, target, tunable) -> Schedule | None` for llvm targets:
    None where the function is not a PrimFunc for a CPU or its blocks cannot be read."""

    def apply(self, func, target, tunable: bool):
        from tvm import s_tir, tirx
        from tvm.s_tir.dlight.analysis import normalize_prim_func

        if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        for info in inline_into_injective(sch, infos):
            self._schedule_block(sch, info, target)
        return sch

    def _schedule_block(self, sch, info, target) -> None:
        loops = sch.get_loops(info.block_rv)
        spatial = leading_spatial(info.dom_kind())
        block = sch.get(info.block_rv)
        # a matmul's or convolution's sum inside a parallel loop went through memory at every step
        # (2x slower than serial at ViT's patch embedding): those keep TVM's serial loops
        if not loops or spatial == 0 or is_contraction(block):
            return
        if info.is_injective() and contiguous_inner(block):
            lanes = vector_lanes(target, block.writes[0].source.dtype.bits if block.writes else 32)
            inner = _int_extent(sch, loops[-1])
            # an empty tensor's loop (extent 0: Phi-3's rotary slices at a short context) is no vector
            if lanes > 1 and inner and inner % lanes == 0:
                if inner > lanes:
                    outer, vector = sch.split(loops[-1], [None, lanes])
                    loops = [*loops[:-1], outer]
                    sch.vectorize(vector)
                else:
                    sch.vectorize(loops[-1])
                    loops, spatial = loops[:-1], spatial - 1
        if spatial == 0 or work(block) < PARALLEL_MIN:
            return
        # the innermost spatial loop stays serial (LLVM vectorizes it) unless it is the only one:
        # a pooling with every spatial loop fused across the threads ran 10x slower than serial
        across = spatial - 1 if spatial > 1 else 1
        threads = sch.fuse(*loops[:across]) if across > 1 else loops[0]
        sch.parallel(threads)


def contiguous_inner(block, buffer=None) -> bool:
    """Whether vectors along the block's innermost variable read and write contiguous elements
    (of `buffer` alone, where given): the variable appears in no index of theirs but the last (a
    transpose's strided loads, gathered lane by lane, ran 1.7x slower than LLVM's scalar loop),
    and none is a bool buffer (TVM's lowering cannot store a vector of bools: int8x16 into bool)."""
    inner = block.iter_vars[-1].var
    for region in [*block.reads, *block.writes]:
        if buffer is not None and not region.source.same_as(buffer):
            continue
        if region.source.dtype == "bool":
            return False
        if any(_uses(axis.min, inner) for axis in region.region[:-1]):
            return False
    return True


def _uses(expr, var) -> bool:
    import tvm_ffi
    from tvm import tirx

    found = []
    tvm_ffi.structural_walk(expr, [(tirx.Var, lambda v: found.append(v.same_as(var)))], order="post")
    return any(found)


def inline_into_injective(sch, infos: list) -> list:
    """Inline each injective block into its consumers where they are all injective and read it
    contiguously, and return the blocks left. Not into a reduction: a pooling that computed its
    padding inline ran 1.6x slower than the padding's own vectorized loop and the pooling after
    it. Not across a transpose: a rotary embedding inlined into the transpose after it read every
    input strided (1.5x slower than computing it in place, then transposing)."""
    from tvm.s_tir import ScheduleError

    injective = {sch.get(info.block_rv).name_hint for info in infos if info.is_injective()}
    left = list(infos)
    for info in infos:
        block = sch.get(info.block_rv)
        consumers = [sch.get(c) for c in sch.get_consumers(info.block_rv)]
        if block.name_hint not in injective or not consumers or any(
                c.name_hint not in injective or not contiguous_inner(c, block.writes[0].source) for c in consumers):
            continue
        try:
            sch.compute_inline(info.block_rv)
        except ScheduleError:  # it writes an output, or its consumers read it in ways inlining cannot follow
            continue
        left.remove(info)
    return left


def _int_extent(sch, loop) -> int | None:
    from tvm import tirx

    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else None
