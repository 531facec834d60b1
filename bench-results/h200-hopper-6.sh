#!/usr/bin/env bash
# Issue 12, sixth run on one H200: kb's variant search on the suite's own GEMM workloads as
# MetaSchedule tunes them (gemm-4096-fp16 / -bf16: A[M,K] and B[K,N] in fp16 or bf16, C in fp32),
# so that the comparison with stock MetaSchedule's 0.622 ms is the same computation.
#   bash bench-results/h200-hopper-6.sh OUT_DIR
set -u
out=${1:-/root/hopper}; mkdir -p "$out"
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
for dtype in float16 bfloat16; do
    timeout 120 python3 -m kb_tvm.bench_hopper --dtype $dtype --b-layout kn --out-dtype float32 \
        --shape 4096x4096x4096 --search 1m --out "$out/workload-gemm-4096-$dtype.json" >> "$out/log.txt" 2>&1
    echo "$dtype rc=$?" >> "$out/log.txt"
done
