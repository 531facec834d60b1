#!/usr/bin/env bash
# Issue 4's H200 rerun (2 GPUs), after the small warm first batch: gemm 3072x1024x2048 warm
# (from the gemm-2048 entry tuned in h200-warm.sh) vs cold, 120 s each, side by side.
# On the device: . .kbdev/b/on-device.sh && bash bench-results/h200-warm-rerun.sh
set -u
out=${OUT:-/tmp/out}
python -m kb_tvm.cli experience --experience /tmp/lib2048 import bench-results/h200-gemm2048-library.tar.gz
timeout 280 python -m kb_tvm.bench_warm --library /tmp/lib2048 --workload gemm-3072x1024x2048 --budget 120s \
    --target cuda --out /tmp/warm2 2>&1 | tail -30
tar czf "$out/h200-warm-rerun.tar.gz" -C /tmp/warm2 summary.json cold.json warm.json cold.log warm.log \
    $(cd /tmp/warm2 && ls -d work/*/kb_logs 2>/dev/null)
