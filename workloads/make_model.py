"""Makes the embedded default model: one transformer encoder block as ONNX.

    python -m kb_tvm.workloads.make_model --out workloads/transformer_block.onnx

`--cnn` makes a small ResNet-style network instead (`residual_cnn`: a stem, a basic block, a
strided block with a 1x1 projection, a classifier), the shape of ResNet's convolutions at toy size.

Small on purpose (sequence 32, hidden 64, 4 heads, FFN 256, fp32, static shapes) so that a
CPU-only machine tunes it in minutes; the same graph at sequence 128 / hidden 768 / 12 heads /
FFN 3072 is the H200 benchmark layer (`--seq 128 --hidden 768 --heads 12 --ffn 3072`).
Weights are random with a fixed seed: the file is reproducible byte for byte.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def transformer_block(seq: int = 32, hidden: int = 64, heads: int = 4, ffn: int = 256, seed: int = 0):
    """An onnx.ModelProto: x[1, seq, hidden] -> LayerNorm(x + MHA(x)) -> LayerNorm(h + FFN(h))."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")
    head = hidden // heads
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def weight(name, *shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x, n_in, n_out, name):
        return node("Add", [node("MatMul", [x, weight(f"{name}.w", n_in, n_out)], f"{name}.mm"),
                            weight(f"{name}.b", n_out, scale=0.02)], name)

    def layer_norm(x, name):
        ones = numpy_helper.from_array(np.ones(hidden, np.float32), f"{name}.gamma")
        zeros = numpy_helper.from_array(np.zeros(hidden, np.float32), f"{name}.beta")
        inits.extend([ones, zeros])
        return node("LayerNormalization", [x, ones.name, zeros.name], name, axis=-1, epsilon=1e-5)

    def split_heads(x, name):  # [1, seq, hidden] -> [1, heads, seq, head]
        shaped = node("Reshape", [x, const(f"{name}.shape", [1, seq, heads, head])], f"{name}.reshape")
        return node("Transpose", [shaped], name, perm=[0, 2, 1, 3])

    q = split_heads(linear("x", hidden, hidden, "q"), "qh")
    k = split_heads(linear("x", hidden, hidden, "k"), "kh")
    v = split_heads(linear("x", hidden, hidden, "v"), "vh")
    kt = node("Transpose", [k], "kt", perm=[0, 1, 3, 2])
    scores = node("Mul", [node("MatMul", [q, kt], "qk"), const("scale", [1.0 / np.sqrt(head)], np.float32)],
                  "scores")
    attn = node("MatMul", [node("Softmax", [scores], "probs", axis=-1), v], "attn")
    merged = node("Reshape", [node("Transpose", [attn], "attn.t", perm=[0, 2, 1, 3]),
                              const("merge.shape", [1, seq, hidden])], "merged")
    h = layer_norm(node("Add", ["x", linear(merged, hidden, hidden, "proj")], "res1"), "ln1")
    up = linear(h, hidden, ffn, "up")
    # GELU(u) = 0.5 u (1 + erf(u / sqrt 2)), spelled with opset-17 ops
    erf = node("Erf", [node("Mul", [up, const("inv_sqrt2", [1.0 / np.sqrt(2.0)], np.float32)], "up.s")], "erf")
    gelu = node("Mul", [node("Mul", [up, const("half", [0.5], np.float32)], "up.h"),
                        node("Add", [erf, const("one", [1.0], np.float32)], "erf1")], "gelu")
    out = layer_norm(node("Add", [h, linear(gelu, ffn, hidden, "down")], "res2"), "y")

    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, seq, hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kb_tvm")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def residual_cnn(size: int = 16, channels: int = 16, classes: int = 10, seed: int = 0):
    """An onnx.ModelProto: input[1, 3, size, size] -> conv 3x3 + ReLU -> a basic block (two 3x3
    convolutions and the identity) -> a block at stride 2 with twice the channels (its shortcut a
    1x1 convolution at stride 2) -> global average pool -> a linear classifier."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(x, c_in, c_out, kernel, stride, name):
        w = (rng.standard_normal((c_out, c_in, kernel, kernel)) / np.sqrt(c_in * kernel * kernel)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{name}.w"))
        inits.append(numpy_helper.from_array((rng.standard_normal(c_out) * 0.1).astype(np.float32), f"{name}.b"))
        return node("Conv", [x, f"{name}.w", f"{name}.b"], name, kernel_shape=[kernel, kernel],
                    strides=[stride, stride], pads=[kernel // 2] * 4)

    stem = node("Relu", [conv("input", 3, channels, 3, 1, "stem")], "stem.relu")
    h = node("Relu", [conv(stem, channels, channels, 3, 1, "b1.c1")], "b1.relu1")
    b1 = node("Relu", [node("Add", [conv(h, channels, channels, 3, 1, "b1.c2"), stem], "b1.add")], "b1.relu2")
    h = node("Relu", [conv(b1, channels, 2 * channels, 3, 2, "b2.c1")], "b2.relu1")
    shortcut = conv(b1, channels, 2 * channels, 1, 2, "b2.down")
    b2 = node("Relu", [node("Add", [conv(h, 2 * channels, 2 * channels, 3, 1, "b2.c2"), shortcut], "b2.add")],
              "b2.relu2")
    pooled = node("Flatten", [node("GlobalAveragePool", [b2], "pool")], "flat")
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((classes, 2 * channels)) / np.sqrt(2 * channels)).astype(np.float32), "fc.w"))
    inits.append(numpy_helper.from_array(np.zeros(classes, np.float32), "fc.b"))
    out = node("Gemm", [pooled, "fc.w", "fc.b"], "logits", transB=1)
    graph = helper.make_graph(
        nodes, "residual_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, classes])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kb_tvm")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=256)
    parser.add_argument("--cnn", action="store_true", help="a small ResNet-style network (residual_cnn)")
    parser.add_argument("--size", type=int, default=16, help="--cnn: the input's height and width")
    parser.add_argument("--channels", type=int, default=16, help="--cnn: the first blocks' channels")
    args = parser.parse_args()
    import onnx

    model = residual_cnn(args.size, args.channels) if args.cnn else \
        transformer_block(args.seq, args.hidden, args.heads, args.ffn)
    onnx.save(model, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
