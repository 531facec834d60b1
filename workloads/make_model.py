"""Makes the embedded default model: one transformer encoder block as ONNX.

    python -m kb_tvm.workloads.make_model --out workloads/transformer_block.onnx

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=256)
    args = parser.parse_args()
    import onnx

    onnx.save(transformer_block(args.seq, args.hidden, args.heads, args.ffn), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
