#!/usr/bin/env bash
# Issue 12, fifth run on one H200: B as [K, N] (b_layout="kn", wgmma reading B transposed), as
# MetaSchedule's and Relax's matmuls hold it. Each variant checked before it is timed. The
# descriptor's two strides for that layout are also tried the other way round on a scratch copy
# (which one the hardware wants is what this run settles), then kb's search over the variants.
#   bash bench-results/h200-hopper-5.sh OUT_DIR
set -u
out=${1:-/root/hopper}; mkdir -p "$out"
export TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > "$out/gpus.txt"
PYTHONPATH=/root/kbsite:$PWD timeout 120 python3 -m kb_tvm.bench_hopper --b-layout kn --shape 4096x4096x4096 \
    --shape 128x768x768 --tile 128x256x4x2x8x1 --tile 64x64x4x1x8x1 --out "$out/kn-fixed.json" >> "$out/log.txt" 2>&1
echo "kn-fixed rc=$?" >> "$out/log.txt"
rm -rf /root/kn-swapped && cp -r "$PWD" /root/kn-swapped
sed -i 's|(bk \* SWIZZLE_BYTES // 16, 64) if b_kn|(64, bk * SWIZZLE_BYTES // 16) if b_kn|' /root/kn-swapped/schedules/hopper_gemm.py
grep -c "(64, bk \* SWIZZLE_BYTES // 16) if b_kn" /root/kn-swapped/schedules/hopper_gemm.py >> "$out/log.txt"
(cd /root/kn-swapped && PYTHONPATH=/root/kbsite:/root/kn-swapped timeout 90 python3 -m kb_tvm.bench_hopper --b-layout kn \
    --shape 4096x4096x4096 --tile 128x256x4x2x8x1 --out "$out/kn-swapped.json" >> "$out/log.txt" 2>&1)
echo "kn-swapped rc=$?" >> "$out/log.txt"
PYTHONPATH=/root/kbsite:$PWD timeout 150 python3 -m kb_tvm.bench_hopper --b-layout kn --shape 4096x4096x4096 \
    --search 1m --out "$out/kn-search-4096.json" >> "$out/log.txt" 2>&1
echo "kn-search rc=$?" >> "$out/log.txt"
PYTHONPATH=/root/kbsite:$PWD timeout 150 python3 -m kb_tvm.bench_hopper --b-layout kn --shape 128x768x768 \
    --shape 128x3072x768 --shape 128x768x3072 --search 30s --out "$out/kn-search-bert.json" >> "$out/log.txt" 2>&1
echo "kn-search-bert rc=$?" >> "$out/log.txt"
