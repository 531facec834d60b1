#!/usr/bin/env bash
# Issue 12, fourth run on one H200: kb's search over the Hopper template's variants
# (kb_tvm/search/hopper_variants.py) within a budget per shape, every variant checked before it is
# timed, beside cuBLAS. One process per dtype, each writing its JSON into OUT_DIR.
#   bash bench-results/h200-hopper-4.sh OUT_DIR
set -u
out=${1:-/root/hopper}; mkdir -p "$out"
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > "$out/gpus.txt"
timeout 170 python3 -m kb_tvm.bench_hopper --dtype float16 --shape 4096x4096x4096 --search 2m \
    --out "$out/search-4096-fp16.json" >> "$out/log.txt" 2>&1; echo "fp16 rc=$?" >> "$out/log.txt"
timeout 140 python3 -m kb_tvm.bench_hopper --dtype bfloat16 --shape 4096x4096x4096 --search 90s \
    --out "$out/search-4096-bf16.json" >> "$out/log.txt" 2>&1; echo "bf16 rc=$?" >> "$out/log.txt"
timeout 230 python3 -m kb_tvm.bench_hopper --dtype float16 --shape 128x768x768 --shape 128x2304x768 \
    --shape 128x3072x768 --shape 128x768x3072 --search 45s \
    --out "$out/search-bert-fp16.json" >> "$out/log.txt" 2>&1; echo "bert rc=$?" >> "$out/log.txt"
