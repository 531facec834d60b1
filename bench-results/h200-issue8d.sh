#!/usr/bin/env bash
# Issue 8's H200 warm vs cold (2 GPUs): gemm fp32 2048^3 tuned for 60 s into a fresh library on kb's
# pipeline, then gemm 3072x1024x2048 cold and warm side by side at 120 s.
# On the device (warm machine): bash bench-results/h200-issue8d.sh
set -u
out=${OUT:-/tmp/out}
timeout 540 python3 -m kb_tvm.bench_warm --prime gemm-2048 --prime-budget 60s --workload gemm-3072x1024x2048 \
    --budget 120s --target cuda --out /tmp/warm 2>&1 | tail -30
tar czf "$out/h200-warm-issue8.tar.gz" -C /tmp/warm summary.json prime.json cold.json warm.json prime.log cold.log \
    warm.log $(cd /tmp/warm && ls -d work/*/kb_logs 2>/dev/null)
