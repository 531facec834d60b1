"""The flash_attention family's kernels on a Hopper GPU: each tile checked against numpy (float64)
and against the task's own default build (TVM's dlight schedules of kb_attention's TIR, what the
untuned model runs), then timed beside that default and torch's scaled_dot_product_attention.

    python benchmarks/attention_h200.py --out attention.json

The shapes are the attentions of the decoders and ViT the issue names (batch 1, fp16 unless said):
a causal mask as an additive bias, as the exports hold it."""

from __future__ import annotations

import json
import time

import click
import numpy as np
from common import HOPPER  # benchmarks/common.py

SHAPES = {
    # name: heads, seq, d, bias ("causal", "none", "rows": some rows all -inf), dtype, out_dtype,
    # query heads per K/V head
    "llama-seq512-gqa": (32, 512, 64, "causal", "float16", "float16", 8),  # TinyLlama's 4 K/V heads
    "llama-seq512": (32, 512, 64, "causal", "float16", "float16", 1),
    "gpt2-seq128": (12, 128, 64, "causal", "float16", "float16", 1),
    "vit-seq197": (12, 197, 64, "none", "float16", "float16", 1),
    "bert-seq128-padding": (12, 128, 64, "padding", "float16", "float16", 1),  # scaled by 1/8 in fp16
    "masked-rows-bf16-d128": (4, 80, 128, "rows", "bfloat16", "float32", 1),
}


def problem(heads, seq, d, bias, dtype, out_dtype, kv_group, out_layout="bhsd"):
    from kb_tvm.kernels.attention import AttentionShape

    bias_dims = None if bias == "none" else (1, 1, 1, seq) if bias == "padding" else (1, 1, seq, seq)
    return AttentionShape(batch=1, heads=heads, seq=seq, seq_kv=seq, d=d, d_v=d, dtype=dtype, out_dtype=out_dtype,
                          bias_dims=bias_dims, round_scores=True, nan_to_zero=bias != "padding",
                          scale=0.125 if bias == "padding" else 1.0, kv_group=kv_group, out_layout=out_layout)


def inputs(p, bias: str, seed: int = 0) -> list[np.ndarray]:
    import ml_dtypes  # noqa: F401 - numpy's bfloat16, as tvm's tensors take it

    rng = np.random.default_rng(seed)
    np_dtype = "bfloat16" if p.dtype == "bfloat16" else p.dtype
    q = rng.uniform(-1, 1, (1, p.heads, p.seq, p.d)).astype(np_dtype)
    kv_heads = p.heads // p.kv_group
    k_t = rng.uniform(-1, 1, (1, kv_heads, p.d, p.seq_kv)).astype(np_dtype)
    v = rng.uniform(-1, 1, (1, kv_heads, p.seq_kv, p.d_v)).astype(np_dtype)
    arrays = [q, k_t, v]
    if bias != "none":
        b = np.zeros((1, 1, p.seq, p.seq_kv), "float32")
        if bias == "padding":  # BERT's: the last quarter of the keys padded
            b = np.zeros((1, 1, 1, p.seq_kv), "float32")
            b[..., -p.seq_kv // 4:] = np.finfo(np.float32).min
        elif bias == "causal":
            b[0, 0][np.triu_indices(p.seq, 1, p.seq_kv)] = np.finfo(np.float32).min
        else:  # every third row masked whole: their output is 0 (nan_to_zero)
            b[0, 0, ::3, :] = -np.inf
        arrays.append(b)
    return arrays


def numpy_reference(p, arrays) -> np.ndarray:
    q, k_t, v = (a.astype(np.float64) for a in arrays[:3])
    k_t, v = (np.repeat(x, p.kv_group, axis=1) for x in (k_t, v))  # each K/V head serves kv_group heads
    s = (q @ k_t).astype(p.dtype)  # the model rounds the scores to its dtype, then scales them in it
    s = (s * np.array(p.scale, p.dtype)).astype(np.float64)
    if len(arrays) > 3:
        s = s + arrays[3].astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        probs = e / e.sum(-1, keepdims=True)
    probs = np.where(np.isnan(probs), 0.0, probs)
    out = (probs @ v).astype(np.float32)
    return out.transpose(0, 2, 1, 3) if p.out_layout == "bshd" else out


@click.command()
@click.option("--out", "out_path", required=True)
@click.option("--shape", "names", multiple=True, help="Of SHAPES (default: all).")
@click.option("--with-skip", is_flag=True, help="Also the tiles that skip masked key tiles (not searched).")
@click.option("--out-layout", type=click.Choice(["bhsd", "bshd"]), default="bhsd", show_default=True,
              help="The output's axes: heads outermost, or each query's heads side by side.")
def main(out_path: str, names: tuple[str, ...], with_skip: bool, out_layout: str) -> None:
    import torch
    import tvm
    from tvm import te
    from tvm.s_tir import dlight as dl

    from kb_tvm.kernels.attention import FAMILY
    from kb_tvm.kernels.attention.rewrite import attention_te
    from kb_tvm.kernels.extern import compile_kernels
    from kb_tvm.kernels.task_search import kernel_mismatch
    from kb_tvm.measure.timer import time_function
    from kb_tvm.measure.timing import TimingPolicy

    target = tvm.target.Target(HOPPER)
    device = tvm.cuda(0)
    results = []
    for name in names or SHAPES:
        heads, seq, d, bias, dtype, out_dtype, kv_group = SHAPES[name]
        p = problem(heads, seq, d, bias, dtype, out_dtype, kv_group, out_layout)
        arrays = inputs(p, bias)
        expected = numpy_reference(p, arrays)
        row = {"shape": name, "heads": heads, "kv_group": kv_group, "seq": seq, "d": d, "bias": bias, "dtype": dtype,
               "out_layout": out_layout, "tiles": []}
        # the task's default build: dlight's schedules of kb_attention's TIR
        placeholders = [te.placeholder(a.shape, str(a.dtype), f"x{i}") for i, a in enumerate(arrays)]
        out = attention_te(*placeholders[:3], placeholders[3] if len(placeholders) > 3 else None, p)
        mod = tvm.IRModule({"main": te.create_prim_func([*placeholders, out])})
        with target:
            mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                          dl.gpu.GeneralReduction(), dl.gpu.Fallback())(mod)
            default = tvm.compile(mod, target=target).mod
        args = [tvm.runtime.tensor(a, device) for a in arrays]
        args.append(tvm.runtime.empty(list(p.out_shape), out_dtype, device))
        default["main"](*args)
        got = args[-1].numpy().astype(np.float32)
        row["default_vs_numpy"] = kernel_mismatch(expected, got) or "ok"
        row["default_ms"] = time_function(default, "main", device, args, TimingPolicy(), cpu=False)["median_s"] * 1e3
        from kb_tvm.schedules.flash_attention import AttentionTile

        # the family's tiles, and the skip of masked key tiles (not searched), which only real masks exercise
        skips = ([AttentionTile(bm=bm, bn=64, skip_masked=True) for bm in (64, 128)]
                 if with_skip and bias != "none" else [])
        for tile in [*FAMILY.variants(p, target).pool, *skips]:
            entry = {"tile": tile.describe()}
            kernel = FAMILY.build(p, tile, target, "check")
            started = time.perf_counter()
            try:
                library = compile_kernels([kernel], target)
            except RuntimeError as err:
                entry["error"] = f"build: {str(err).strip().splitlines()[-1][:300]}"
                row["tiles"].append(entry)
                continue
            entry["build_s"] = round(time.perf_counter() - started, 2)
            views = [tvm.runtime.tensor(a.reshape(shape), device) for a, shape in zip(arrays, kernel.shapes)]
            views.append(tvm.runtime.empty(list(kernel.shapes[-1]), out_dtype, device))
            library[kernel.symbol](*views)
            got = views[-1].numpy().astype(np.float32).reshape(expected.shape)
            entry["vs_numpy"] = kernel_mismatch(expected, got) or "ok"
            entry["max_abs_error"] = float(np.nanmax(np.abs(expected - got)))
            if entry["vs_numpy"] == "ok":
                entry["ms"] = time_function(library, kernel.symbol, device, views, TimingPolicy(), cpu=False)["median_s"] * 1e3
            row["tiles"].append(entry)
            print(name, entry, flush=True)
        # torch's fused attention on the same inputs (its flash or memory-efficient kernel)
        tq, tk, tv = (torch.from_numpy(a.astype(np.float32)).cuda().to(getattr(torch, dtype)) for a in arrays[:3])
        tk = tk.transpose(-1, -2).contiguous()
        mask = torch.from_numpy(arrays[3]).cuda().to(tq.dtype) if len(arrays) > 3 else None
        is_causal = bias == "causal"
        scale = p.scale

        def sdpa():
            if is_causal:
                return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=scale,
                                                                        enable_gqa=kv_group > 1)
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, scale=scale,
                                                                    enable_gqa=kv_group > 1)

        for _ in range(10):
            sdpa()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            sdpa()
        end.record()
        torch.cuda.synchronize()
        row["torch_sdpa_ms"] = start.elapsed_time(end) / 200
        print(name, {k: v for k, v in row.items() if k != "tiles"}, flush=True)
        results.append(row)
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
