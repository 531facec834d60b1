"""PyTorch eager latency of an ONNX transformer block from `make_model`, with its own weights:
the reference the H200 benchmark compares TVM's tuned latency with.

    python -m kb_tvm.workloads.torch_reference --model encoder.onnx --out torch.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def eager_latency(model_path: str | Path, *, device: str = "cuda", repeat: int = 200) -> dict:
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    weights = {init.name: torch.from_numpy(numpy_helper.to_array(init).copy()).to(device)
               for init in model.graph.initializer}
    _, seq, hidden = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    heads = int(weights["qh.shape"][2])
    head = hidden // heads

    def linear(x, name):
        return x @ weights[f"{name}.w"] + weights[f"{name}.b"]

    def split(x):
        return x.reshape(1, seq, heads, head).transpose(1, 2)

    def block(x):
        q, k, v = split(linear(x, "q")), split(linear(x, "k")), split(linear(x, "v"))
        probs = torch.softmax((q @ k.transpose(-1, -2)) * (1.0 / head**0.5), dim=-1)
        merged = (probs @ v).transpose(1, 2).reshape(1, seq, hidden)
        h = torch.nn.functional.layer_norm(x + linear(merged, "proj"), (hidden,), eps=1e-5)
        up = linear(h, "up")
        gelu = up * 0.5 * (1.0 + torch.erf(up * (1.0 / 2**0.5)))
        return torch.nn.functional.layer_norm(h + linear(gelu, "down"), (hidden,), eps=1e-5)

    x = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (1, seq, hidden)).astype("float32")).to(device)
    with torch.no_grad():
        for _ in range(20):
            block(x)
        torch.cuda.synchronize() if device == "cuda" else None
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            block(x)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "tf32": torch.backends.cuda.matmul.allow_tf32,
            "median_ms": float(np.median(times)), "min_ms": float(np.min(times)), "repeat": repeat}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = eager_latency(args.model)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
