"""A task read as a fused GEMM, the problem the GEMM kernel families (hopper_gemm/, cpu_gemm/)
compute, read off the task's TIR: one reduction block C[.., i, j] += A[.., i, k] * B[k, j] (or
B[j, k]) over inputs of the dtypes a family takes with fp32 accumulation, then any chain of
elementwise blocks over C's shape (casts, bias, residual, GELU: what Relax fuses after a Linear
layer), which becomes the kernel's epilogue. Leading axes are a batch (attention's heads): the
kernel takes A, B and C as 2-D views with the batch's matrices one after the other, and B either
batched as C is or one B for all. A task a family cannot compute is refused with the reason, so
that a user (and the search) sees why a matmul keeps MetaSchedule's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from .family import NotApplicable, root_blocks

SPATIAL, REDUCE = 0, 2  # TVM's IterVar kinds (DataPar, CommReduce)


class NotAGemm(NotApplicable):
    """The task is not a GEMM the family computes; the message says why."""


@dataclass(frozen=True)
class GemmProblem:
    m: int
    n: int
    k: int
    dtype: str  # of A and B
    out_dtype: str  # of what the task stores
    b_layout: str  # "kn": B[K, N]; "nk": B[N, K]
    batch: int = 1  # GEMMs of this shape (the product of the leading axes)
    b_batched: bool = False  # a B for each (else one B for all)

    def record(self) -> dict:
        """The shape, for a kernels.jsonl row."""
        return {"m": self.m, "n": self.n, "k": self.k, "batch": self.batch, "dtype": self.dtype}

    def padded_b_shape(self, columns: int) -> tuple[int, int]:
        """B (one for all rows) as a kernel takes it with its columns padded to `columns`."""
        return (self.k, columns) if self.b_layout == "kn" else (columns, self.k)

    @property
    def tiling(self) -> tuple[int, int]:
        """(M, batch) as a tiled kernel takes the GEMMs: with one B for all, the batch's matrices
        are one GEMM of batch x m rows, so that a tile spans matrices (a sequence-first Linear's
        197 matrices of one row each are 4 tiles of 64 rows, not 197); with a B each, each its own."""
        return (self.m, self.batch) if self.b_batched else (self.batch * self.m, 1)

    @property
    def gemm_shapes(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """A, B and C as the kernels take them: 2-D, a batch's matrices one after the other."""
        b_rows = (self.batch if self.b_batched else 1) * (self.k if self.b_layout == "kn" else self.n)
        return ((self.batch * self.m, self.k), (b_rows, self.n) if self.b_layout == "kn" else (b_rows, self.k),
                (self.batch * self.m, self.n))


@dataclass(frozen=True, eq=False)
class FusedGemm:
    """A task a GEMM family computes: its GEMM, and the elementwise blocks the task runs on each
    accumulator before it stores (none for a plain GEMM). `value` gives the kernel's epilogue."""

    problem: GemmProblem
    func: object  # the task's PrimFunc
    a: object  # its buffers: the GEMM's inputs and the task's output
    b: object
    c: object
    gemm_out: object  # the GEMM block's output buffer (C itself when nothing is fused)
    epilogue: tuple  # (block, ...) after the GEMM, in order

    @property
    def params(self) -> list:
        """The task's buffers in its parameter order (what the kernel takes, A, B and C as 2-D)."""
        return list(self.func.params)

    @property
    def extras(self) -> list:
        return [buf for buf in self.params if not any(buf.same_as(x) for x in (self.a, self.b, self.c))]

    def value(self, acc, row, col, inputs: list | None = None):
        """The value the task stores at C[.., row, col] given the fp32 accumulator there. inputs:
        (task buffer, kernel buffer) pairs, the buffers the kernel reads in place of the task's."""
        computed = []  # (intermediate buffer, its value at (row, col))
        value = acc
        for block in self.epilogue:
            coords = _coords(block.iter_vars, row, col, self.problem.m)
            value = rebuild_at(block.body.value, coords, [(self.gemm_out, acc), *computed], inputs or [],
                               [iv.var for iv in block.iter_vars])
            computed.append((block.body.buffer, value))
        return value

    def kernel(self, tile, symbol: str, b_columns: int | None = None):
        """The Hopper template's kernel (schedules/hopper_gemm.py) for this task and variant,
        exported as `symbol`. It takes the task's parameters in the task's order, A, B and C as 2-D
        (the caller reshapes them: a view), the others as they are; with `b_columns`, B[K, N]
        padded to that many columns (`padded_b`)."""
        from ..schedules.hopper_gemm import gemm

        p = self.problem
        if tile.b_layout != p.b_layout or tile.dtype != p.dtype:
            raise ValueError(f"GemmTile({tile.describe()}) is for B {tile.b_layout} {tile.dtype}; this task's B is "
                             f"{p.b_layout} {p.dtype}")
        m, batch = p.tiling  # the epilogue's row counts across the batch either way
        batched = {"batch": batch, "b_batched": p.b_batched}
        if tile.k_splits > 1:  # main(A, B, P): the partial sums; `summed` applies the epilogue
            return gemm(m, p.n, p.k, tile, "float32", **batched).with_attr("global_symbol", symbol)
        return self._with_task_params(
            lambda epilogue: gemm(m, p.n, p.k, tile, p.out_dtype, epilogue=epilogue, b_columns=b_columns, **batched),
            symbol)

    def summed(self, splits: int, symbol: str):
        """After a split-K kernel: main(P[splits, m, n], the task's other inputs, C[m, n]) with
        C = the task's epilogue of P summed over the splits, in plain TIR (the build schedules it)."""
        from tvm.tirx import BufferLoad, PrimFunc

        p = self.problem
        inputs = self._kernel_inputs()
        main = _sum_of_partials(p, splits, lambda acc, row, col: self.value(acc, row, col, inputs), BufferLoad)
        partials, c2 = main.params
        return PrimFunc([partials, *(mine for _, mine in inputs), c2], main.body,
                        attrs=main.attrs).with_attr("global_symbol", symbol)

    def partial_shapes(self, splits: int) -> list[tuple[int, ...]]:
        """What a split-K kernel takes: A and B as 2-D, then its partial sums."""
        a, b, c = self.problem.gemm_shapes
        return [a, b, (splits, *c)]

    def summed_shapes(self, splits: int) -> list[tuple[int, ...]]:
        c = self.problem.gemm_shapes[2]
        return [(splits, *c), *(kernel_shape(x) for x in self.extras), c]

    @property
    def gemm_inputs(self) -> tuple[int, int]:
        """Where A and B are among the task's inputs."""
        params = self.params
        return (next(i for i, x in enumerate(params) if x.same_as(self.a)),
                next(i for i, x in enumerate(params) if x.same_as(self.b)))

    def reference(self, symbol: str, k_splits: int = 1, b_columns: int | None = None):
        """The kernel's twin in plain TIR (any target, unscheduled): the same signature, GEMM and
        epilogue (with k_splits > 1: main(A, B, P), the partial sums). On the CPU it checks what
        `kernel` is given against the task itself. `b_columns`: B's columns (and the sums') padded
        to this many, which the epilogue does not store (a B packed once, padded, at build)."""
        p = self.problem
        if k_splits > 1:
            return _plain_gemm(p, None, k_splits).with_attr("global_symbol", symbol)
        return self._with_task_params(lambda epilogue: _plain_gemm(p, epilogue, b_columns=b_columns), symbol)

    def _with_task_params(self, make, symbol: str):
        """`make(epilogue)` -> main(A, B, C), re-signed to take the task's parameters."""
        from tvm.tirx import PrimFunc

        inputs = self._kernel_inputs()
        main = make(lambda acc, row, col: self.value(acc, row, col, inputs))
        a2, b2, c2 = main.params
        params = [a2 if x.same_as(self.a) else b2 if x.same_as(self.b) else c2 if x.same_as(self.c)
                  else next(mine for theirs, mine in inputs if x.same_as(theirs)) for x in self.params]
        return PrimFunc(params, main.body, attrs=main.attrs).with_attr("global_symbol", symbol)

    def _kernel_inputs(self) -> list:
        return kernel_inputs(self.extras)

    def kernel_shapes(self, b_columns: int | None = None) -> list[tuple[int, ...]]:
        """The shape the kernel takes each parameter in (A, B, C as 2-D; B padded to `b_columns`)."""
        a, b, c = self.problem.gemm_shapes
        if b_columns is not None:
            b = self.problem.padded_b_shape(b_columns)
        flat = list(zip((self.a, self.b, self.c), (a, b, c)))
        return [next((shape for x, shape in flat if buf.same_as(x)), None) or kernel_shape(buf)
                for buf in self.params]


def _plain_gemm(p: GemmProblem, epilogue, k_splits: int = 1, b_columns: int | None = None):
    """main(A, B, C) for `p` in plain TIR, on the kernels' 2-D views (GemmProblem.gemm_shapes):
    C[r, j] = epilogue(sum_k A[r, k] * B of r's batch[k, j] in fp32, r, j); with k_splits > 1,
    C = P[k_splits, rows, n], each split's fp32 sum over its part of K. With `b_columns` (one B
    for all rows), B and the sums have that many columns, and C the first n of them."""
    from tvm.script import tirx as T

    m, n, k, dtype, out_dtype = p.m, p.n, p.k, p.dtype, p.out_dtype
    (rows, _), b_shape, _ = p.gemm_shapes
    kn = p.b_layout == "kn"
    sums = n
    if b_columns is not None:
        if p.b_batched or b_columns < n:
            raise ValueError(f"b_columns={b_columns!r}: at least n={n}, with one B for all rows")
        sums = b_columns
        b_shape = p.padded_b_shape(sums)
    splits = k_splits

    def b_at(B, r, j, kk):
        """B[kk, j] (or B[j, kk]) of row r's GEMM."""
        first = r // m * (k if kn else n) if p.b_batched else 0
        return B[first + kk, j] if kn else B[first + j, kk]

    if splits > 1:
        return _plain_partials(rows, n, k, dtype, b_shape, splits, b_at)

    # fmt: off
    @T.prim_func(s_tir=True, check_well_formed=False)
    def main(a: T.handle, b: T.handle, c: T.handle):
        A = T.match_buffer(a, (rows, k), dtype)
        B = T.match_buffer(b, b_shape, dtype)
        C = T.match_buffer(c, (rows, n), out_dtype)
        D = T.sblock_alloc_buffer((rows, sums), "float32")
        for i, j, r in T.grid(rows, sums, k):
            with T.sblock("gemm"):
                vi, vj, vr = T.axis.remap("SSR", [i, j, r])
                with T.init():
                    D[vi, vj] = T.float32(0)
                D[vi, vj] = D[vi, vj] + T.Cast("float32", A[vi, vr]) * T.Cast("float32", b_at(B, vi, vj, vr))
        for i, j in T.grid(rows, n):
            with T.sblock("epilogue"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = epilogue(D[vi, vj], vi, vj)
    # fmt: on
    return main


def _plain_partials(rows, n, k, dtype, b_shape, splits, b_at):
    from tvm.script import tirx as T

    part = k // splits

    # fmt: off
    @T.prim_func(s_tir=True)
    def partials(a: T.handle, b: T.handle, c: T.handle):
        A = T.match_buffer(a, (rows, k), dtype)
        B = T.match_buffer(b, b_shape, dtype)
        P = T.match_buffer(c, (splits, rows, n), "float32")
        for s, i, j, r in T.grid(splits, rows, n, part):
            with T.sblock("partial"):
                vs, vi, vj, vr = T.axis.remap("SSSR", [s, i, j, r])
                with T.init():
                    P[vs, vi, vj] = T.float32(0)
                P[vs, vi, vj] = P[vs, vi, vj] + T.Cast("float32", A[vi, vs * part + vr]) * \
                    T.Cast("float32", b_at(B, vi, vj, vs * part + vr))
    # fmt: on
    return partials


def _sum_of_partials(p: GemmProblem, splits: int, epilogue, load):
    """main(P, C) in plain TIR: C[r, j] = epilogue(P[0, r, j] + ... + P[splits - 1, r, j], r, j)."""
    from tvm.script import tirx as T

    (rows, _), _, _ = p.gemm_shapes
    n, out_dtype = p.n, p.out_dtype

    def total(P, i, j):
        value = load(P, [0, i, j])
        for s in range(1, splits):
            value = value + load(P, [s, i, j])
        return value

    # fmt: off
    @T.prim_func(s_tir=True, check_well_formed=False)
    def main(p_ptr: T.handle, c_ptr: T.handle):
        T.func_attr({"tirx.noalias": True})
        P = T.match_buffer(p_ptr, (splits, rows, n), "float32")
        C = T.match_buffer(c_ptr, (rows, n), out_dtype)
        for i, j in T.grid(rows, n):
            with T.sblock("epilogue"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = epilogue(total(P, vi, vj), vi, vj)
    # fmt: on
    return main


def padded_b(p: GemmProblem, columns: int):
    """main(B, B_padded): one B of `p` with zero columns (B[K, N]) or rows (B[N, K]) up to
    `columns`; what the build runs once on a constant B a kernel takes padded."""
    from tvm import te

    from ..schedules.padding import zero_padded

    _, shape, _ = p.gemm_shapes
    return te.create_prim_func(list(zero_padded(shape, p.padded_b_shape(columns), p.dtype, "pad")))


def kernel_inputs(extras: list) -> list:
    """(task buffer, kernel buffer) for each of a task's epilogue inputs: the task's own buffers
    do not flatten in TIRx's pipeline (a 3-D residual failed), so the kernel reads fresh ones of
    the same shapes."""
    from tvm.tirx import decl_buffer

    return [(x, decl_buffer(kernel_shape(x), str(x.ty.dtype), name=x.name)) for x in extras]


def kernel_shape(buf) -> tuple[int, ...]:
    """An epilogue input's shape in the kernel: its own, a scalar as [1] (TIRx's FlattenBuffer
    does not find a 0-d parameter)."""
    return tuple(int(d) for d in buf.ty.shape) or (1,)


def _coords(iter_vars, row, col, m: int) -> dict:
    """A block's iter vars -> the element they stand for, from its row in the kernel's C (a
    batch's matrices one after the other, `m` rows each) and its column: the leading axes from
    row // m (0 where all are of extent 1), i from row % m."""
    from tvm.ir.prim import expr as prim

    *lead, i, j = iter_vars

    def typed(iv, x):
        return x if str(x.ty) == str(iv.var.ty) else prim.Cast(str(iv.var.ty), x)

    if all(int(iv.dom.extent) == 1 for iv in lead):
        out = {iv.var: prim.IntImm(str(iv.var.ty), 0) for iv in lead}
        out[i.var] = typed(i, row)
    else:
        out, batch = {}, row // m
        for iv in reversed(lead):  # row-major: the last leading axis varies fastest
            extent = int(iv.dom.extent)
            out[iv.var] = typed(iv, batch % extent)
            batch = batch // extent
        out[i.var] = typed(i, row % m)
    out[j.var] = typed(j, col)
    return out


# the bit operations are fast_exp's (it builds 2^n in a float's exponent bits): a SiLU's under fast math
_BINARY = ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max",
           "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or", "LShift", "RShift", "BitwiseAnd", "BitwiseOr",
           "BitwiseXor")


def rebuild_at(expr, coords: dict, computed: list, inputs: list, axes: list):
    """`expr` of an epilogue block at one element: its iter vars replaced by that element's
    coordinates, loads of the GEMM's output and of earlier intermediates by their values
    (`computed`), loads of the task's other inputs kept at the element's indices (on the kernel's
    buffer where `inputs` pairs one with the task's)."""
    from tvm.ir import expr as ir_expr
    from tvm.ir.prim import expr as prim
    from tvm.tirx import BufferLoad, call_intrin

    def at_this_element(load) -> bool:
        return len(load.indices) == len(axes) and all(i.same_as(v) for i, v in zip(load.indices, axes))

    def go(e):
        if isinstance(e, ir_expr.TensorLoad):
            for buf, value in computed:
                if e.source.same_as(buf):
                    if not at_this_element(e):
                        raise NotAGemm(f"the epilogue reads {buf.name} at {list(e.indices)}, not at the "
                                       "element it computes (a transpose or shift is not elementwise)")
                    return value
            source = next((mine for theirs, mine in inputs if e.source.same_as(theirs)), e.source)
            indices = [go(i) for i in e.indices]
            if not indices and not source.same_as(e.source):  # a scalar, which the kernel takes as [1]
                indices = [prim.IntImm("int32", 0)]
            return BufferLoad(source, indices)
        if isinstance(e, tuple(getattr(prim, name) for name in _BINARY)):
            return type(e)(go(e.a), go(e.b))
        if isinstance(e, prim.Cast):
            return prim.Cast(str(e.ty), go(e.value))
        if isinstance(e, prim.Select):
            return prim.Select(go(e.condition), go(e.true_value), go(e.false_value))
        if isinstance(e, prim.Not):
            return prim.Not(go(e.a))
        if isinstance(e, ir_expr.Call):  # erf, exp, tanh, ...
            return call_intrin(str(e.ty), e.op, *[go(a) for a in e.args])
        if isinstance(e, (prim.IntImm, prim.FloatImm)):
            return e
        if isinstance(e, ir_expr.Var):
            if e in coords:
                return coords[e]
            raise NotAGemm(f"the epilogue reads a variable {e} that is not an axis")
        raise NotAGemm(f"the epilogue has a {type(e).__name__}, which the families do not fuse")

    return go(expr)


def region_indices(region) -> list[str]:
    return [str(r.min) for r in region.region]


def _loads(expr) -> list:
    """The buffer loads in `expr`, left to right."""
    from tvm.ir import expr as ir_expr
    from tvm.ir.prim import expr as prim

    if isinstance(expr, ir_expr.TensorLoad):
        return [expr]
    if isinstance(expr, prim.Cast):
        return _loads(expr.value)
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return _loads(expr.a) + _loads(expr.b)
    return []


def match_fused_gemm(mod, *, input_dtypes: tuple[str, ...], output_dtypes: tuple[str, ...]) -> FusedGemm:
    """The GEMM and epilogue `mod` ("main", a MetaSchedule task or workload) computes over A and B
    of one of `input_dtypes` into an output of one of `output_dtypes`, or NotAGemm."""
    from tvm import s_tir

    func = mod["main"]
    sch = s_tir.Schedule(mod)
    blocks = root_blocks(sch, NotAGemm)

    def kinds_of(block):
        return [int(iv.iter_type) for iv in block.iter_vars]

    gemms = [i for i, b in enumerate(blocks) if REDUCE in kinds_of(b)]
    if len(gemms) != 1:
        raise NotAGemm(f"{len(gemms)} reduction blocks of {len(blocks)}, not one GEMM")
    if gemms[0] != 0:
        raise NotAGemm(f"{gemms[0]} block(s) fused before the GEMM (the kernels read A and B as they are)")
    block, epilogue = blocks[0], blocks[1:]
    kinds = kinds_of(block)
    spatial = kinds.count(SPATIAL)
    if kinds.count(REDUCE) != 1 or kinds[-1] != REDUCE or spatial < 2:
        raise NotAGemm(f"{spatial} spatial and {kinds.count(REDUCE)} reduction axes (a GEMM has 2 and 1)")
    extents = [int(iv.dom.extent) for iv in block.iter_vars]
    batch = 1
    for extent in extents[:spatial - 2]:
        batch *= extent
    *lead, i, j, r = (str(iv.var) for iv in block.iter_vars)
    if len(block.reads) != 2 or len(block.writes) != 1:
        raise NotAGemm(f"reads {len(block.reads)} and writes {len(block.writes)} buffers (a GEMM: 2 and 1)")
    (a, b), c = block.reads, block.writes[0]
    if region_indices(c) != [*lead, i, j] or region_indices(a)[-2:] != [i, r] or len(a.source.shape) != spatial:
        raise NotAGemm(f"indexed as {c.source.name}{region_indices(c)} = {a.source.name}{region_indices(a)} x ...: "
                       "the kernels compute C[i, j] from A[i, k]")
    if batch > 1 and region_indices(a) != [*lead, i, r]:
        raise NotAGemm(f"A indexed as {a.source.name}{region_indices(a)}: a batched GEMM reads A[batch.., i, k]")
    b_index = region_indices(b)
    b_batched = any(int(d) != 1 for d in b.source.shape[:-2])
    if b_batched and (b_index[:-2] != lead or [int(d) for d in b.source.shape[:-2]] != extents[:spatial - 2]):
        raise NotAGemm(f"B indexed as {b.source.name}{b_index}: batched as C is, or one B for all")
    if b_index[-2:] == [r, j]:
        b_layout = "kn"
    elif b_index[-2:] == [j, r]:
        b_layout = "nk"
    else:
        raise NotAGemm(f"B indexed as {b_index}: the kernels read B[k, j] or B[j, k]")
    dtype, b_dtype, acc_dtype = str(a.source.dtype), str(b.source.dtype), str(c.source.dtype)
    if dtype != b_dtype or dtype not in input_dtypes:
        raise NotAGemm(f"inputs {dtype} and {b_dtype}: the family takes {' or '.join(input_dtypes)}")
    if acc_dtype != "float32":
        raise NotAGemm(f"accumulates in {acc_dtype}: the kernels accumulate in float32")
    loads = _loads(block.body.value)
    if sorted(x.source.name for x in loads) != sorted([c.source.name, a.source.name, b.source.name]):
        raise NotAGemm(f"computes {block.body.value}: not C + A * B")
    m, k = (int(d) for d in a.source.shape[-2:])
    n = int(c.source.shape[-1])
    params = list(func.params)
    for name, buf in (("A", a.source), ("B", b.source)):
        if not any(buf.same_as(p) for p in params):
            raise NotAGemm(f"{name} ({buf.name}) is computed inside the task, not one of its inputs")
    out = epilogue_output(c.source, epilogue, params, "GEMM", NotAGemm)
    out_dtype = str(out.dtype)
    if out_dtype not in output_dtypes:
        raise NotAGemm(f"output {out_dtype}: the family writes {', '.join(output_dtypes)}")
    fused = FusedGemm(problem=GemmProblem(m=m, n=n, k=k, dtype=dtype, out_dtype=out_dtype, b_layout=b_layout,
                                          batch=batch, b_batched=b_batched and batch > 1),
                      func=func, a=a.source, b=b.source, c=out, gemm_out=c.source, epilogue=tuple(epilogue))
    _check_epilogue(fused)
    return fused


def epilogue_output(first, epilogue: list, params: list, what: str, refusal: type[NotApplicable]):
    """The task's output buffer, after `epilogue` (the blocks after the reduction that writes
    `first`): each must be elementwise over `first`'s shape and store one element per element, and
    the last must store the task's output (its last parameter); else `refusal` says why."""
    shape = [int(d) for d in first.shape]
    out = first
    for after in epilogue:
        if [int(iv.iter_type) for iv in after.iter_vars] != [SPATIAL] * len(shape) or \
                [int(iv.dom.extent) for iv in after.iter_vars] != shape:
            raise refusal(f"block {after.name_hint!r} after the {what} is not elementwise over its {shape} "
                          "output (the kernels fuse elementwise epilogues)")
        if type(after.body).__name__ != "BufferStore" or len(after.writes) != 1 or \
                region_indices(after.writes[0]) != [str(iv.var) for iv in after.iter_vars]:
            raise refusal(f"block {after.name_hint!r} after the {what} does not store one element per "
                          "output element")
        if any(out.same_as(p) for p in params):
            raise refusal(f"{out.name} is an output and also read after the {what} (two outputs)")
        out = after.writes[0].source
    if not any(out.same_as(p) for p in params) or not params[-1].same_as(out):
        raise refusal(f"the last block's {out.name} is not the task's output")
    return out


def _check_epilogue(fused: FusedGemm) -> None:
    """Rebuild the epilogue once at symbolic coordinates, so that what it cannot fuse is refused
    now, with the reason, not when a kernel is generated."""
    from tvm import tirx

    fused.value(tirx.Var("acc", "float32"), tirx.Var("row", "int32"), tirx.Var("col", "int32"))
