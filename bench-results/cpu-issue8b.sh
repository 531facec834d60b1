#!/usr/bin/env bash
# Issue 8's second CPU session (this 2-core machine), one run after another:
# 1. the README's command as a new user runs it (empty HOME: no experience library), 90 s;
# 2. gemm-512 for 5 minutes, its 10 best records re-timed (fidelity), and numpy's matmul;
# 3. warm vs cold: gemm-512 into a fresh library, then gemm 768x512x640 cold and warm, 60 s each.
# Here: bash bench-results/cpu-issue8b.sh   (results in bench-results/cpu-issue8b/)
set -u
out=bench-results/cpu-issue8b
mkdir -p "$out"
rm -rf /tmp/newuser /tmp/kb-cpu8 && mkdir -p /tmp/newuser
HOME=/tmp/newuser XDG_CACHE_HOME=/tmp/newuser/.cache kb-tvm tune-op gemm-512 --budget 90s \
    --work-dir /tmp/kb-cpu8/readme --json-out "$out/gemm512-90s.json" 2>&1 | grep -v INFO > "$out/gemm512-90s.log"
python -m kb_tvm.bench_fidelity --work-dir /tmp/kb-cpu8/readme --workload gemm-512 \
    --out "$out/fidelity-gemm512-90s.json" 2>&1 | grep -v INFO > "$out/fidelity-gemm512-90s.log"
kb-tvm tune-op gemm-512 --budget 5m --target llvm --no-experience --seed 1 --work-dir /tmp/kb-cpu8/5m \
    --json-out "$out/gemm512-5m.json" 2>&1 | grep -v INFO > "$out/gemm512-5m.log"
python -m kb_tvm.bench_fidelity --work-dir /tmp/kb-cpu8/5m --workload gemm-512 \
    --out "$out/fidelity-gemm512-5m.json" 2>&1 | grep -v INFO > "$out/fidelity-gemm512-5m.log"
python - > "$out/numpy-gemm512.json" <<'PY'
import json, statistics, timeit
import numpy as np
a, b = (np.random.default_rng(0).uniform(-1, 1, (512, 512)).astype("float32") for _ in range(2))
runs = [min(timeit.repeat(lambda: a @ b, number=20, repeat=5)) / 20 for _ in range(10)]
print(json.dumps({"numpy": np.__version__, "gemm512_ms_median": statistics.median(runs) * 1e3,
                  "runs_ms": [r * 1e3 for r in runs]}))
PY
python -m kb_tvm.bench_warm --prime gemm-512 --workload gemm-768x512x640 --budget 60s --target llvm \
    --out /tmp/kb-cpu8/warm > "$out/warm.log" 2>&1
cp /tmp/kb-cpu8/warm/summary.json "$out/warm-summary.json"
tail -n 2 "$out"/*.log; cat "$out/numpy-gemm512.json"
