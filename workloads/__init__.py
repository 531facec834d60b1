"""Operator workloads for `kb-tvm tune-op NAME` and the benchmarks (shipped as kb_tvm.workloads).

Each workload is a TensorIR function built from TE, with its FLOP count for GFLOP/s and the
MetaSchedule space it is tuned in on CUDA ("cuda" or, for fp16 GEMMs, "cuda-tensorcore").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    flops: float
    build: Callable[[], object]  # -> tvm.IRModule with one PrimFunc "main"
    cuda_space: str = "cuda"  # MetaSchedule space kind on CUDA targets

    def module(self):
        return self.build()


def _module(*tensors):
    import tvm
    from tvm import te

    return tvm.IRModule({"main": te.create_prim_func(list(tensors))})


def _gemm(m: int, n: int, k: int, dtype: str, gelu: bool = False):
    def build():
        from tvm import te, tirx

        out_dtype = "float32"
        a = te.placeholder((m, k), dtype, name="A")
        b = te.placeholder((k, n), dtype, name="B")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute(
            (m, n),
            lambda i, j: te.sum(a[i, r].astype(out_dtype) * b[r, j].astype(out_dtype), axis=r),
            name="C",
        )
        if not gelu:
            return _module(a, b, c)
        # GELU(x) = 0.5 x (1 + erf(x / sqrt 2)), fused after the GEMM
        d = te.compute(
            (m, n),
            lambda i, j: 0.5 * c[i, j] * (1.0 + tirx.erf(c[i, j] * (1.0 / math.sqrt(2.0)))),
            name="gelu",
        )
        return _module(a, b, d)

    return build


def _batch_matmul(batch: int, m: int, n: int, k: int, dtype: str = "float32"):
    def build():
        from tvm import te

        a = te.placeholder((batch, m, k), dtype, name="A")
        b = te.placeholder((batch, k, n), dtype, name="B")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((batch, m, n), lambda x, i, j: te.sum(
            a[x, i, r].astype("float32") * b[x, r, j].astype("float32"), axis=r), name="C")
        return _module(a, b, c)

    return build


def _linear(m: int, n: int, k: int):
    """nn.Linear's matmul in fp16: X[M, K] @ W[N, K]^T, fp32 accumulation, fp16 out."""
    def build():
        from tvm import te

        x = te.placeholder((m, k), "float16", name="X")
        w = te.placeholder((n, k), "float16", name="W")
        r = te.reduce_axis((0, k), name="k")
        acc = te.compute((m, n), lambda i, j: te.sum(
            x[i, r].astype("float32") * w[j, r].astype("float32"), axis=r), name="acc")
        y = te.compute((m, n), lambda i, j: acc[i, j].astype("float16"), name="Y")
        return _module(x, w, y)

    return build


def _conv2d(n: int, c: int, hw: int, f: int, ksize: int, stride: int, pad: int):
    def build():
        from tvm import te, topi

        data = te.placeholder((n, c, hw, hw), "float32", name="data")
        weight = te.placeholder((f, c, ksize, ksize), "float32", name="weight")
        out = topi.nn.conv2d_nchw(data, weight, stride, pad, 1)
        return _module(data, weight, out)

    return build


def _conv2d_nhwc(n: int, c: int, hw: int, f: int, ksize: int, stride: int, pad: int, dtype: str):
    def build():
        from tvm import te, topi

        data = te.placeholder((n, hw, hw, c), dtype, name="data")
        weight = te.placeholder((ksize, ksize, c, f), dtype, name="weight")
        out = topi.nn.conv2d_nhwc(data, weight, stride, pad, 1, out_dtype="float32")
        return _module(data, weight, out)

    return build


def _softmax(rows: int, cols: int):
    def build():
        from tvm import te, topi

        x = te.placeholder((rows, cols), "float32", name="x")
        return _module(x, topi.nn.softmax(x))

    return build


def _layernorm(rows: int, cols: int):
    def build():
        from tvm import te, topi

        x = te.placeholder((rows, cols), "float32", name="x")
        gamma = te.placeholder((cols,), "float32", name="gamma")
        beta = te.placeholder((cols,), "float32", name="beta")
        return _module(x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[1]))

    return build


def _conv_flops(n, c, hw, f, ksize, stride, pad):
    out = (hw + 2 * pad - ksize) // stride + 1
    return 2.0 * n * f * out * out * c * ksize * ksize


def _all() -> dict[str, Workload]:
    items = []
    for size, dtype in ((128, "float32"), (512, "float32"), (1024, "float32"), (2048, "float32")):
        items.append(Workload(f"gemm-{size}", f"GEMM {size}^3, {dtype}", 2.0 * size**3,
                              _gemm(size, size, size, dtype)))
    items.append(Workload("gemm-768x512x640", "GEMM M=768 N=640 K=512, float32", 2.0 * 768 * 640 * 512,
                          _gemm(768, 640, 512, "float32")))
    # the shape that warm-starts from gemm-2048 on the H200 (names read M x K x N)
    items.append(Workload("gemm-3072x1024x2048", "GEMM M=3072 N=2048 K=1024, float32", 2.0 * 3072 * 2048 * 1024,
                          _gemm(3072, 2048, 1024, "float32")))
    for size in (1024, 4096):
        items.append(Workload(f"gemm-{size}-fp16", f"GEMM {size}^3, float16 in, float32 accumulate "
                              "(tensor-core space on CUDA)", 2.0 * size**3,
                              _gemm(size, size, size, "float16"), cuda_space="cuda-tensorcore"))
    items.append(Workload("gemm-4096-bf16", "GEMM 4096^3, bfloat16 in, float32 accumulate (tensor-core space "
                          "on CUDA)", 2.0 * 4096**3, _gemm(4096, 4096, 4096, "bfloat16"), cuda_space="cuda-tensorcore"))
    for batch, m, n, k, what in ((12, 128, 128, 64, "attention scores"), (12, 128, 64, 128, "attention x values")):
        items.append(Workload(f"batch_matmul-{batch}x{m}x{n}x{k}-fp16",
                              f"batched GEMM {batch} x ({m}x{k} @ {k}x{n}), float16 in, float32 accumulate ({what}; "
                              "tensor-core space on CUDA)", 2.0 * batch * m * n * k,
                              _batch_matmul(batch, m, n, k, "float16"), cuda_space="cuda-tensorcore"))
    for size in (256, 1024, 2048):
        items.append(Workload(f"gemm-gelu-{size}", f"GEMM {size}^3 + GELU, float32",
                              2.0 * size**3 + 8.0 * size**2, _gemm(size, size, size, "float32", gelu=True)))
    items.append(Workload("batch_matmul-12x128x128x64", "batched GEMM 12 x (128x64 @ 64x128), float32 "
                          "(attention scores)", 2.0 * 12 * 128 * 128 * 64, _batch_matmul(12, 128, 128, 64)))
    items.append(Workload("batch_matmul-16x256x256x256", "batched GEMM 16 x 256^3, float32",
                          2.0 * 16 * 256**3, _batch_matmul(16, 256, 256, 256)))
    conv = (1, 64, 56, 64, 3, 1, 1)
    items.append(Workload("conv2d-56x56x64", "conv2d NCHW 1x64x56x56, 64 filters 3x3, stride 1 (ResNet)",
                          _conv_flops(*conv), _conv2d(*conv)))
    items.append(Workload("conv2d-nhwc-56x56x64", "conv2d NHWC 1x56x56x64, 64 filters 3x3, stride 1, float32 "
                          "(ResNet's conv in channels-last)", _conv_flops(*conv), _conv2d_nhwc(*conv, "float32")))
    items.append(Workload("conv2d-nhwc-56x56x64-fp16", "conv2d NHWC 1x56x56x64, 64 filters 3x3, stride 1, "
                          "float16 in, float32 accumulate (ResNet; tensor-core space on CUDA)", _conv_flops(*conv),
                          _conv2d_nhwc(*conv, "float16"), cuda_space="cuda-tensorcore"))
    conv = (1, 32, 28, 32, 3, 1, 1)
    items.append(Workload("conv2d-28x28x32", "conv2d NCHW 1x32x28x28, 32 filters 3x3, stride 1 (small)",
                          _conv_flops(*conv), _conv2d(*conv)))
    for rows, cols in ((128, 768), (1024, 4096)):
        items.append(Workload(f"softmax-{rows}x{cols}", f"softmax over rows of {rows}x{cols}, float32",
                              5.0 * rows * cols, _softmax(rows, cols)))
        items.append(Workload(f"layernorm-{rows}x{cols}", f"layer norm over rows of {rows}x{cols}, float32",
                              8.0 * rows * cols, _layernorm(rows, cols)))
    return {w.name: w for w in items}


WORKLOADS: dict[str, Workload] = _all()


_LINEAR = re.compile(r"linear-(\d+)x(\d+)x(\d+)-fp16")
# what `kb-tvm ops` lists for them
LINEAR_FAMILY = ("linear-MxNxK-fp16", "nn.Linear of any shape: X[M, K] @ W[N, K]^T, float16 in, float32 accumulate, "
                 "float16 out (tensor-core space on CUDA)")


def linear_workload(m: int, n: int, k: int) -> Workload:
    """Any transformer projection's shape, by name `linear-MxNxK-fp16` (the shapes table's stock column)."""
    return Workload(f"linear-{m}x{n}x{k}-fp16", f"nn.Linear M={m} N={n} K={k}: X @ W^T, float16 in, float32 "
                    "accumulate, float16 out (tensor-core space on CUDA)", 2.0 * m * n * k, _linear(m, n, k),
                    cuda_space="cuda-tensorcore")


def get_workload(name: str) -> Workload:
    if name in WORKLOADS:
        return WORKLOADS[name]
    shape = _LINEAR.fullmatch(name)
    if shape and all(int(size) > 0 for size in shape.groups()):
        return linear_workload(*(int(size) for size in shape.groups()))
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}, or linear-MxNxK-fp16 "
                     "for any positive M, N, K")
