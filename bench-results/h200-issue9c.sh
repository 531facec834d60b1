#!/usr/bin/env bash
# Issue 9, third H200 pass (2 GPUs): software-pipelined WMMA sketches. Six pipelined fp16 candidates
# checked against numpy and timed, then fp16 GEMM 4096^3 side by side at 180 s over the space with
# them (kb and stock alike). On a machine with TVM installed (.kbdev/b/on-device.sh):
#   bash bench-results/h200-issue9c.sh
set -u
out=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
timeout 100 python3 bench-results/h200-tc-check.py gemm-4096-fp16 3 $out/pipelined-check.json --pipelined \
    2>&1 | grep -v "StorageAlign is" | tail -8
timeout 290 python3 -m kb_tvm.bench --workload gemm-4096-fp16 --budget 180s --target cuda --side-by-side \
    --out $out/fp16-4096-180s-pipelined.json > $out/fp16-180.log 2>&1
grep "final\|kb_vs_stock" $out/fp16-180.log
