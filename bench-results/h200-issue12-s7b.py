"""Issue 12, seventh session, second H200 call: the template's paired stores (one half2 / bfloat162 /
float2 store for a thread's two neighbouring outputs) against single-element stores, and split-K on
shapes off the tile, each variant checked against torch before it is timed.
    python bench-results/h200-issue12-s7b.py OUT.json
"""
import json
import sys

import torch

from kb_tvm.bench_hopper import kernel_seconds, run_variant, time_call
from kb_tvm.schedules.hopper_gemm import GemmTile

rows = []


def problem(m, n, k, dtype, out_dtype, tiles):
    gen = torch.Generator(device="cuda").manual_seed(0)
    t = getattr(torch, dtype)
    a = torch.randn((m, k), device="cuda", dtype=t, generator=gen)
    b = torch.randn((n, k), device="cuda", dtype=t, generator=gen)
    reference = a.float() @ b.T.float()
    cublas = lambda: torch.matmul(a, b.T)  # noqa: E731
    rows.append({"shape": [m, n, k], "dtype": dtype, "cublas_ms": kernel_seconds(cublas) * 1e3,
                 "cublas_call_ms": time_call(cublas) * 1e3})
    print(json.dumps(rows[-1]), flush=True)
    for tile in tiles:
        rows.append(run_variant(m, n, k, tile, out_dtype, a, b, reference))
        print(json.dumps(rows[-1]), flush=True)
        open(sys.argv[1], "w").write(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


best = dict(bm=128, bn=256, stages=4, consumers=2)
for dtype in ("float16", "bfloat16"):
    problem(4096, 4096, 4096, dtype, dtype, [
        GemmTile(**best, dtype=dtype, persistent=True),
        GemmTile(**best, dtype=dtype, persistent=True, paired_stores=False),
        GemmTile(**best, dtype=dtype),
        GemmTile(**best, dtype=dtype, paired_stores=False),
        GemmTile(**best, dtype=dtype, persistent=True),  # again: the run's noise
        GemmTile(**best, dtype=dtype, persistent=True, paired_stores=False),
    ])
problem(4096, 4096, 4096, "float16", "float32", [GemmTile(**best, persistent=True),
                                                 GemmTile(**best, persistent=True, paired_stores=False)])
for m, n, k in ((77, 4096, 4096), (197, 768, 768), (200, 264, 256)):
    problem(m, n, k, "float16", "float16", [GemmTile(bm=64, bn=64, stages=4, k_splits=s) for s in (1, 2, 4)]
            + [GemmTile(bm=128, bn=64, stages=4, consumers=2, k_splits=2)])
