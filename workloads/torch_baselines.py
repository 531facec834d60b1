"""What a user would otherwise run: the same model as `export_models` exports (same seed, same
weights), timed in PyTorch on the GPU: eager fp32, eager fp16, and torch.compile (max-autotune)
fp16. BERT runs with transformers' default attention (sdpa) as well as the exported eager one.

    python -m kb_tvm.workloads.torch_baselines bert-base --seq 128 --out torch-bert.json
    python -m kb_tvm.workloads.torch_baselines resnet50 --out torch-resnet50.json
    python -m kb_tvm.workloads.torch_baselines bert --layers 1 --out torch-bert-layer.json   # sized as export_models' bert
    python -m kb_tvm.workloads.torch_baselines llama --layers 2 --seq 512 --out torch-llama.json
    python -m kb_tvm.workloads.torch_baselines gpt2 --seq 128 --out torch-gpt2.json
    python -m kb_tvm.workloads.torch_baselines vit-b16 --out torch-vit.json

Latency: CUDA events around one call, median of `--repeat` after warm-up calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from .export_models import (
    BERTS,
    CAUSAL_LMS,
    RESNETS,
    VITS,
    MissingExtra,
    add_sizes,
    bert_config,
    bert_module,
    given_sizes,
    gpt2_config,
    gpt2_module,
    llama_config,
    llama_module,
    require,
    resnet_module,
    vit_config,
    vit_module,
)


def median_ms(call, repeat: int, warmup: int = 20) -> float:
    """Median milliseconds of one call, its launch included, timed with CUDA events."""
    import torch

    with torch.no_grad():
        for _ in range(warmup):
            call()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def _variants(name: str, batch: int, image: int, seq: int, seed: int, sizes: dict):
    """label -> (fp32 module, example args) for the variants timed."""
    if name in RESNETS:
        return {"": resnet_module(name, batch=batch, image=image, seed=seed)}
    if name in VITS:
        return {"": vit_module(batch=batch, image=image, seed=seed, config=vit_config(**sizes) if name == "vit" else None)}
    if name == "llama":
        return {"": llama_module(batch=batch, seq=seq, seed=seed, config=llama_config(**sizes))}
    if name == "gpt2":
        return {"": gpt2_module(batch=batch, seq=seq, seed=seed, config=gpt2_config(**sizes))}
    return {f" ({attention} attention)": bert_module(batch=batch, seq=seq, seed=seed,
                                                     config=bert_config(**sizes, attention=attention))
            for attention in ("eager", "sdpa")}


def baselines(name: str, *, batch: int = 1, image: int = 224, seq: int = 128, seed: int = 0,
              repeat: int = 200, compile_mode: str | None = "max-autotune", sizes: dict | None = None) -> dict:
    """`sizes`: the sizes of a custom bert, llama, gpt2 or vit, as export_models takes them."""
    (torch,) = require("torch")

    if not torch.cuda.is_available():
        raise MissingExtra("torch sees no CUDA GPU: the baselines are GPU timings")
    results = {"model": name, "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
               "tf32": torch.backends.cuda.matmul.allow_tf32, "repeat": repeat, "latency_ms": {}, "seconds": {}}
    if sizes:
        results["sizes"] = sizes
    for label, (model, args) in _variants(name, batch, image, seq, seed, sizes or {}).items():
        model = model.cuda()
        args = tuple(a.cuda() for a in args)
        results["latency_ms"][f"eager fp32{label}"] = median_ms(lambda: model(*args), repeat)
        half = model.half()
        half_args = tuple(a.half() if a.is_floating_point() else a for a in args)
        results["latency_ms"][f"eager fp16{label}"] = median_ms(lambda: half(*half_args), repeat)
        if compile_mode and (name not in BERTS or "sdpa" in label):  # users compile the default model
            started = time.perf_counter()
            compiled = torch.compile(half, mode=compile_mode)
            with torch.no_grad():
                compiled(*half_args)
            key = f"torch.compile {compile_mode} fp16{label}"
            results["seconds"][f"{key}: compile"] = round(time.perf_counter() - started, 1)
            results["latency_ms"][key] = median_ms(lambda: compiled(*half_args), repeat)
        del model, half
        torch.cuda.empty_cache()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=RESNETS + BERTS + CAUSAL_LMS + VITS)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0, help="as given to export_models")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--compile-mode", default="max-autotune", help="torch.compile mode; 'none' skips it")
    add_sizes(parser.add_argument_group("sizes of bert, llama, gpt2 and vit, as export_models takes them"))
    args = parser.parse_args(argv)
    sizes = given_sizes(parser, args)
    try:
        result = baselines(args.model, batch=args.batch, image=args.image, seq=args.seq, seed=args.seed,
                           repeat=args.repeat, compile_mode=None if args.compile_mode == "none" else args.compile_mode,
                           sizes=sizes)
    except (MissingExtra, ValueError) as err:
        sys.exit(f"error: {err}")
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
