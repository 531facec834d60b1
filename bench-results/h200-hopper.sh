#!/usr/bin/env bash
# Issue 12, first step, on one H200: the Hopper GEMM template (schedules/hopper_gemm.py), each
# variant checked against torch's fp32 product of the same inputs before it is timed, beside cuBLAS
# (torch.matmul) on the same GPU. One process per variant, each under a time limit, so that a
# variant that hangs or breaks the CUDA context fails alone. From the project root, TVM installed:
#   bash bench-results/h200-hopper.sh OUT_DIR
set -u
out=${1:-/root/hopper}; mkdir -p "$out"
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > "$out/gpus.txt"
run() {  # name shape... -- tiles...
    local name=$1; shift
    timeout 120 python3 -m kb_tvm.bench_hopper "$@" --out "$out/$name.json" > "$out/$name.log" 2>&1
    echo "$name rc=$?" >> "$out/progress.txt"
}
for tile in 128x128x4x1 64x256x4x1 128x256x3x2 128x256x4x2 128x128x5x2; do
    run "gemm4096-$tile" --shape 4096x4096x4096 --tile $tile
done
for tile in 64x64x4x1 64x128x4x1 128x128x4x1; do
    run "bert-$tile" --shape 128x768x768 --shape 128x3072x768 --shape 128x768x3072 --tile $tile
done
