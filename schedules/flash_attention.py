"""A fused attention kernel for CUDA GPUs (sm_80 and later: the H200 runs it as sm_90a beside the
Hopper GEMM's kernels), FlashAttention-2's forward pass:

    O = softmax(Q Kᵀ [rounded to the inputs' dtype] + bias) V        per head, fp32 accumulation

One block computes `bm` query rows of one head; each of its warps owns 16 of them and keeps their
Q fragments in registers. The block walks the keys `bn` at a time: the K and V tiles go into
shared memory, each warp computes its 16 x bn scores with `mma.sync.m16n8k16`, adds the bias,
updates its rows' running maximum and sum (the online softmax: no [seq, seq_kv] tensor is ever
written) and multiplies the probabilities, still in registers (the scores' accumulator layout is
the next mma's A-operand layout), by V's tile. A row whose scores are all -inf gives 0 where the
model asked for that (`nan_to_zero`: the exports' isnan guard), NaN otherwise, as softmax does.

Kᵀ is read as the model holds it, [d, seq_kv] per head, and transposed into shared memory (with
grouped-query attention, `kv_group` query heads read one K/V head: no repeated copy is made); the
bias (a causal or padding mask, any additive one) is read per score, broadcast over the axes
where its dim is 1. Written as CUDA in a TIRx shell (the shell declares the launch and the shared
memory, the body is one device function), compiled with the GEMM template's kernels.

The parameters a performance engineer would tune: `bm` (query rows a block: 4 or 8 warps) and
`bn` (keys a tile), and how K and V are read (`k_vectors`, `v_ldmatrix`). On the H200 every tile
computed right with both read plainly; the vector and ldmatrix reads, and `skip_masked` (the key
tiles a mask hides from a whole block are skipped), computed right there too (2026-12-05). The
vector and ldmatrix reads are 1.1-3.6x faster where they apply; `skip_masked` is 1.27-1.42x
slower on every masked shape measured (each tile's whole mask is read before the tile, as much
traffic as its K and V), so the family does not search it. Not yet: a cheaper skip test, wgmma
and TMA (the Hopper GEMM template's), a pipelined (cp.async) load of the next tile.
"""

from __future__ import annotations

from dataclasses import dataclass

WARP_ROWS = 16  # the query rows one warp computes (mma's M)
PAD = 8  # halves after each shared-memory row, against bank conflicts
MAX_SHARED_BYTES = 227 * 1024
# a bias at or below MASKED masks its score (masks hold -inf or float32's lowest); a row whose
# running maximum is above SEEN has a score that no masked one can move: exp of their difference
# is 0 in fp32
MASKED, SEEN = -1e30, -1e29
DTYPES = {"float16": ("half", "f16", "__floats2half2_rn", "__half2"),
          "bfloat16": ("nv_bfloat16", "bf16", "__floats2bfloat162_rn", "__nv_bfloat162")}
OUT_DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True, kw_only=True)
class AttentionTile:
    """One variant. Keyword-only; every rule broken is named."""

    bm: int = 64
    bn: int = 64
    # V's B fragments read with ldmatrix.trans (one instruction for two registers), not with four
    # 2-byte shared-memory loads
    v_ldmatrix: bool = True
    # Kᵀ's rows of keys read in 16-byte pieces (where seq_kv is a multiple of 8), not 2 bytes at a time
    k_vectors: bool = True
    # a key tile the bias masks for every row of the block, once each row has a score it leaves, is
    # skipped (a causal mask's upper triangle: half the tiles). Its terms are exactly 0. Right on
    # the H200 but slower (the module's docstring): not searched
    skip_masked: bool = False

    def __post_init__(self) -> None:
        problems = []
        if self.bm not in (64, 128):
            problems.append(f"bm={self.bm!r}: 64 or 128 query rows a block (4 or 8 warps)")
        if self.bn not in (32, 64, 128):
            problems.append(f"bn={self.bn!r}: 32, 64 or 128 keys a tile")
        problems += [f"{name}={getattr(self, name)!r}: True or False" for name in ("v_ldmatrix", "k_vectors", "skip_masked")
                     if not isinstance(getattr(self, name), bool)]
        if problems:
            raise ValueError(f"AttentionTile({self.describe()}): " + "; ".join(problems))

    @property
    def threads(self) -> int:
        return self.bm // WARP_ROWS * 32

    def describe(self) -> str:
        return (f"bm={self.bm}, bn={self.bn}" + ("" if self.v_ldmatrix else ", v_ldmatrix=False")
                + ("" if self.k_vectors else ", k_vectors=False") + (", skip_masked=True" if self.skip_masked else ""))

    def shared_bytes(self, d: int, d_v: int) -> int:
        return 2 * (self.bm * (d + PAD) + self.bn * (d + PAD) + self.bn * (d_v + PAD))

    def fits(self, d: int, d_v: int) -> list[str]:
        """Why this tile cannot compute heads of these sizes; empty when it can."""
        out = [f"{name}={size}: a multiple of 16 up to 256" for name, size in (("d", d), ("d_v", d_v))
               if size % 16 or not 16 <= size <= 256]
        if not out and self.bn // 8 * 4 + d_v // 8 * 4 + d // 16 * 4 > 200:
            out.append(f"bn={self.bn} with d={d}, d_v={d_v}: more than 200 registers a thread for scores, "
                       "output and Q")
        if self.shared_bytes(d, d_v) > MAX_SHARED_BYTES:
            out.append(f"{self.shared_bytes(d, d_v)} bytes of shared memory (at most {MAX_SHARED_BYTES})")
        return out


def attention(shape, tile: AttentionTile, symbol: str):
    """The TIRx PrimFunc `symbol`(q, kᵀ, v[, bias], o) for one variant of one attention
    (`shape`: kb_tvm/kernels/attention/rewrite.py's AttentionShape): q [heads * seq, d],
    kᵀ [kv_heads * d, seq_kv], v [kv_heads * seq_kv, d_v], bias 4-D as the model broadcasts it,
    o [heads * seq, d_v] (`heads`: batch x heads; kv_heads: heads / kv_group), its rows in
    `shape.out_layout`'s order: (b, h, s), or (b, s, h)."""
    from tvm.script import tirx as T

    if shape.dtype not in DTYPES:
        raise ValueError(f"dtype {shape.dtype!r} is not one of {', '.join(DTYPES)}")
    if shape.out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype {shape.out_dtype!r} is not one of {', '.join(OUT_DTYPES)}")
    misfit = tile.fits(shape.d, shape.d_v)
    if misfit:
        raise ValueError(f"AttentionTile({tile.describe()}) cannot compute d={shape.d}, d_v={shape.d_v}: "
                         + "; ".join(misfit))
    heads = shape.batch * shape.heads
    blocks = heads * -(-shape.seq // tile.bm)
    smem_halves = tile.shared_bytes(shape.d, shape.d_v) // 2
    name = f"{symbol}_body"
    source = device_source(shape, tile, name)
    dtype, out_dtype = shape.dtype, shape.out_dtype
    kv_heads = heads // shape.kv_group
    q_shape, k_shape = (heads * shape.seq, shape.d), (kv_heads * shape.d, shape.seq_kv)
    v_shape, o_shape = (kv_heads * shape.seq_kv, shape.d_v), (heads * shape.seq, shape.d_v)

    # TVMScript fixes a PrimFunc's parameters in its signature: one shell with a bias, one without
    if shape.bias_dims is not None:
        bias_shape = tuple(shape.bias_dims)

        # fmt: off
        @T.prim_func(check_well_formed=False)
        def main(q_ptr: T.handle, k_ptr: T.handle, v_ptr: T.handle, bias_ptr: T.handle, o_ptr: T.handle) -> None:
            Q = T.match_buffer(q_ptr, q_shape, dtype)
            K = T.match_buffer(k_ptr, k_shape, dtype)
            V = T.match_buffer(v_ptr, v_shape, dtype)
            B = T.match_buffer(bias_ptr, bias_shape, "float32")
            O = T.match_buffer(o_ptr, o_shape, out_dtype)
            T.device_entry()
            T.cta_id([blocks])
            T.thread_id([tile.threads])
            smem = T.alloc_buffer((smem_halves,), dtype, scope="shared.dyn", align=16)
            T.cuda.func_call(name, T.address_of(Q[0, 0]), T.address_of(K[0, 0]), T.address_of(V[0, 0]),
                             T.address_of(B[0, 0, 0, 0]), T.address_of(O[0, 0]), T.address_of(smem[0]),
                             source_code=source)
        # fmt: on
        return main

    # fmt: off
    @T.prim_func(check_well_formed=False)
    def main(q_ptr: T.handle, k_ptr: T.handle, v_ptr: T.handle, o_ptr: T.handle) -> None:
        Q = T.match_buffer(q_ptr, q_shape, dtype)
        K = T.match_buffer(k_ptr, k_shape, dtype)
        V = T.match_buffer(v_ptr, v_shape, dtype)
        O = T.match_buffer(o_ptr, o_shape, out_dtype)
        T.device_entry()
        T.cta_id([blocks])
        T.thread_id([tile.threads])
        smem = T.alloc_buffer((smem_halves,), dtype, scope="shared.dyn", align=16)
        T.cuda.func_call(name, T.address_of(Q[0, 0]), T.address_of(K[0, 0]), T.address_of(V[0, 0]),
                         T.address_of(O[0, 0]), T.address_of(smem[0]), source_code=source)
    # fmt: on
    return main


def device_source(shape, tile: AttentionTile, name: str) -> str:
    """The CUDA device function `name` computing one block's rows (see the module's docstring)."""
    ctype, ptx, pair, pair_type = DTYPES[shape.dtype]
    out_ctype = {"float16": "half", "bfloat16": "nv_bfloat16", "float32": "float"}[shape.out_dtype]
    has_bias = shape.bias_dims is not None
    if has_bias:  # the bias's strides over (batch, head, row); 0 where it broadcasts
        b0, b1, b2, b3 = shape.bias_dims
        strides = (b1 * b2 * b3, b2 * b3, b3)
        bias_strides = [s if dim > 1 else 0 for s, dim in zip(strides, (b0, b1, b2))]
    else:
        bias_strides = [0, 0, 0]
    if shape.out_dtype == "float32":
        store = "*reinterpret_cast<float2*>(dst) = make_float2(x0, x1);"
    else:
        store = f"*reinterpret_cast<{pair_type}*>(dst) = {pair}(x0, x1);"
    if tile.v_ldmatrix:  # lanes 0-15 address V's 16 rows of keys; .trans hands each lane B's layout
        v_fragment = (f"uint32_t b0, b1;\n"
                      f"        asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{%0, %1}}, [%2];\"\n"
                      f"                     : \"=r\"(b0), \"=r\"(b1)\n"
                      f"                     : \"r\"((uint32_t)__cvta_generic_to_shared(Vs + (kk * 16 + (lane & 15)) * LDV + dt * 8)));")
    else:
        v_fragment = ("const int col = dt * 8 + g;\n"
                      "        const uint32_t b0 = (uint32_t)vbits[k0 * LDV + col] | ((uint32_t)vbits[(k0 + 1) * LDV + col] << 16);\n"
                      "        const uint32_t b1 = (uint32_t)vbits[(k0 + 8) * LDV + col] | ((uint32_t)vbits[(k0 + 9) * LDV + col] << 16);")
    if tile.k_vectors and shape.seq_kv % 8 == 0:  # Kᵀ's rows of keys in 16-byte pieces, each written down a column of Ks
        k_load = f"""for (int i = tid; i < D * (BN / 8); i += THREADS) {{
      const int d = i / (BN / 8), j = i % (BN / 8) * 8;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (j0 + j < SKV) x = *reinterpret_cast<const uint4*>(kh + (size_t)d * SKV + j0 + j);
      const {ctype}* e = reinterpret_cast<const {ctype}*>(&x);
#pragma unroll
      for (int u = 0; u < 8; ++u) Ks[(j + u) * LD + d] = e[u];
    }}"""
    else:
        k_load = f"""for (int i = tid; i < BN * D; i += THREADS) {{
      const int d = i / BN, j = i % BN;
      Ks[j * LD + d] = j0 + j < SKV ? kh[(size_t)d * SKV + j0 + j] : ({ctype})0.0f;
    }}"""
    # the output row of (head, query row): heads outermost, or each query's heads side by side
    out_row = ("(((size_t)b * S + rows[r]) * H + h)" if shape.out_layout == "bshd"
               else "((size_t)head * S + rows[r])")
    bias_param = "const float* __restrict__ bias, " if has_bias else ""
    round_score = f"x = float(({ctype})x);" if shape.round_scores else ""
    if shape.scale != 1.0:  # in the inputs' dtype after the rounding (a product of two halves is exact in fp32)
        round_score += f" x = float(({ctype})(x * {shape.scale!r}f));" if shape.round_scores else f" x *= {shape.scale!r}f;"
    add_bias = ("if (row < S && col < SKV) x += bias[b * SB_B + h * SB_H + row * SB_I + col];" if has_bias else "")
    empty_row = "0.0f" if shape.nan_to_zero else "__int_as_float(0x7fc00000)"
    # a tile whose bias masks every score of the block's rows (a causal mask's upper triangle) adds
    # exactly 0 to rows that have seen a score it leaves, so it is skipped: its K and V are not
    # loaded, nothing is multiplied. __syncthreads_and is also the barrier before the tile's loads
    skip_tile = "__syncthreads();" if not (has_bias and tile.skip_masked) else f"""bool hidden = true;
    for (int i = tid; i < BM * BN; i += THREADS) {{
      const int r = row0 + i / BN, c = j0 + i % BN;
      if (r < S && c < SKV && bias[b * SB_B + h * SB_H + r * SB_I + c] > {MASKED}f) hidden = false;
    }}
    hidden = hidden && (rows[0] >= S || m_run[0] > {SEEN}f) && (rows[1] >= S || m_run[1] > {SEEN}f);
    if (__syncthreads_and(hidden)) continue;"""
    return f"""
__device__ __forceinline__ uint32_t {name}_pack(float lo, float hi) {{
  {pair_type} v = {pair}(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}}

__device__ __forceinline__ void {name}_mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {{
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, "
               "{{%8,%9}}, {{%0,%1,%2,%3}};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}}

__device__ __forceinline__ void {name}(const {ctype}* __restrict__ q, const {ctype}* __restrict__ kt,
    const {ctype}* __restrict__ v, {bias_param}{out_ctype}* __restrict__ o, {ctype}* smem) {{
  constexpr int BM = {tile.bm}, BN = {tile.bn}, D = {shape.d}, DV = {shape.d_v};
  constexpr int S = {shape.seq}, SKV = {shape.seq_kv}, H = {shape.heads}, G = {shape.kv_group};
  constexpr int SB_B = {bias_strides[0]}, SB_H = {bias_strides[1]}, SB_I = {bias_strides[2]};
  constexpr int THREADS = BM / 16 * 32, LD = D + {PAD}, LDV = DV + {PAD};
  constexpr int BLOCKS_M = (S + BM - 1) / BM;
  constexpr float LOG2E = 1.4426950408889634f;
  const float NEG_INF = __int_as_float(0xff800000);
  const int head = blockIdx.x / BLOCKS_M, row0 = blockIdx.x % BLOCKS_M * BM;
  const int b = head / H, h = head % H;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  (void)b; (void)h;
  {ctype}* Qs = smem;
  {ctype}* Ks = Qs + BM * LD;
  {ctype}* Vs = Ks + BN * LD;
  const {ctype}* qh = q + (size_t)head * S * D;
  const {ctype}* kh = kt + (size_t)(head / G) * D * SKV;  // grouped-query: G heads share a K/V head
  const {ctype}* vh = v + (size_t)(head / G) * SKV * DV;
  for (int i = tid; i < BM * (D / 8); i += THREADS) {{
    const int r = i / (D / 8), c = i % (D / 8) * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (row0 + r < S) x = *reinterpret_cast<const uint4*>(qh + (size_t)(row0 + r) * D + c);
    *reinterpret_cast<uint4*>(Qs + r * LD + c) = x;
  }}
  __syncthreads();
  uint32_t qf[D / 16][4];
  const {ctype}* qw = Qs + warp * 16 * LD;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {{
    qf[ks][0] = *reinterpret_cast<const uint32_t*>(qw + g * LD + ks * 16 + 2 * t);
    qf[ks][1] = *reinterpret_cast<const uint32_t*>(qw + (g + 8) * LD + ks * 16 + 2 * t);
    qf[ks][2] = *reinterpret_cast<const uint32_t*>(qw + g * LD + ks * 16 + 2 * t + 8);
    qf[ks][3] = *reinterpret_cast<const uint32_t*>(qw + (g + 8) * LD + ks * 16 + 2 * t + 8);
  }}
  float acc[DV / 8][4];
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m_run[2] = {{NEG_INF, NEG_INF}}, l_run[2] = {{0.0f, 0.0f}};
  const int rows[2] = {{row0 + warp * 16 + g, row0 + warp * 16 + g + 8}};
  const unsigned short* vbits = reinterpret_cast<const unsigned short*>(Vs);
  for (int j0 = 0; j0 < SKV; j0 += BN) {{
    {skip_tile}
    {k_load}
    for (int i = tid; i < BN * (DV / 8); i += THREADS) {{
      const int j = i / (DV / 8), c = i % (DV / 8) * 8;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (j0 + j < SKV) x = *reinterpret_cast<const uint4*>(vh + (size_t)(j0 + j) * DV + c);
      *reinterpret_cast<uint4*>(Vs + j * LDV + c) = x;
    }}
    __syncthreads();
    float s[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {{
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      const {ctype}* kr = Ks + (nt * 8 + g) * LD + 2 * t;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks)
        {name}_mma(s[nt], qf[ks], *reinterpret_cast<const uint32_t*>(kr + ks * 16),
                   *reinterpret_cast<const uint32_t*>(kr + ks * 16 + 8));
    }}
    float most[2] = {{NEG_INF, NEG_INF}};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {{
#pragma unroll
      for (int e = 0; e < 4; ++e) {{
        const int row = rows[e / 2], col = j0 + nt * 8 + 2 * t + (e & 1);
        float x = s[nt][e];
        {round_score}
        {add_bias}
        if (col >= SKV) x = NEG_INF;
        s[nt][e] = x;
        most[e / 2] = fmaxf(most[e / 2], x);
      }}
    }}
    float alpha[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {{
      most[r] = fmaxf(most[r], __shfl_xor_sync(0xffffffff, most[r], 1));
      most[r] = fmaxf(most[r], __shfl_xor_sync(0xffffffff, most[r], 2));
      const float m_new = fmaxf(m_run[r], most[r]);
      base[r] = m_new == NEG_INF ? 0.0f : m_new;  // a row masked so far: its terms are all 0
      alpha[r] = exp2f((m_run[r] - base[r]) * LOG2E);
      m_run[r] = m_new;
      l_run[r] *= alpha[r];
    }}
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {{
#pragma unroll
      for (int e = 0; e < 4; ++e) {{
        const float p = exp2f((s[nt][e] - base[e / 2]) * LOG2E);
        s[nt][e] = p;
        l_run[e / 2] += p;
      }}
    }}
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt) {{
      acc[dt][0] *= alpha[0]; acc[dt][1] *= alpha[0];
      acc[dt][2] *= alpha[1]; acc[dt][3] *= alpha[1];
    }}
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {{
      const uint32_t a[4] = {{{name}_pack(s[2 * kk][0], s[2 * kk][1]), {name}_pack(s[2 * kk][2], s[2 * kk][3]),
                             {name}_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             {name}_pack(s[2 * kk + 1][2], s[2 * kk + 1][3])}};
      const int k0 = kk * 16 + 2 * t;
#pragma unroll
      for (int dt = 0; dt < DV / 8; ++dt) {{
        {v_fragment}
        {name}_mma(acc[dt], a, b0, b1);
      }}
    }}
  }}
#pragma unroll
  for (int r = 0; r < 2; ++r) {{
    l_run[r] += __shfl_xor_sync(0xffffffff, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffff, l_run[r], 2);
  }}
#pragma unroll
  for (int r = 0; r < 2; ++r) {{
    if (rows[r] >= S) continue;
    const bool empty = l_run[r] == 0.0f;
    const float inv = empty ? 0.0f : 1.0f / l_run[r];
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt) {{
      const float x0 = empty ? {empty_row} : acc[dt][2 * r] * inv;
      const float x1 = empty ? {empty_row} : acc[dt][2 * r + 1] * inv;
      {out_ctype}* dst = o + {out_row} * DV + dt * 8 + 2 * t;
      {store}
    }}
  }}
}}
"""
