#!/usr/bin/env bash
# Issue 4's H200 run (2 GPUs): warm vs cold on gemm 3072x1024x2048 after tuning gemm 2048^3,
# then short runs of other operators into a second library, for the shipped cuda cost model.
# On the device: . .kbdev/b/on-device.sh && bash bench-results/h200-warm.sh
set -u
out=${OUT:-/tmp/out}
python -m kb_tvm.bench_warm --prime gemm-2048 --workload gemm-3072x1024x2048 --budget 120s --target cuda \
    --out /tmp/warm 2>&1 | tail -30
tar czf "$out/h200-warm-run.tar.gz" -C /tmp/warm summary.json prime.json cold.json warm.json prime.log cold.log \
    warm.log $(cd /tmp/warm && ls -d work/*/kb_logs 2>/dev/null)
# training rows: two operators per GPU, side by side, 45 s each
train() {  # gpu cpus workloads...
    local gpu=$1 cpus=$2; shift 2
    for name in "$@"; do
        CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cpus" python -m kb_tvm.cli tune-op "$name" --budget 45s \
            --target cuda --experience /tmp/trainlib --work-dir "/tmp/train/$name" > "/tmp/train-$name.log" 2>&1
    done
}
train 0 0-15 conv2d-56x56x64 batch_matmul-12x128x128x64 &
train 1 16-31 gemm-gelu-1024 gemm-768x512x640 &
wait
python -m kb_tvm.cli experience --experience /tmp/warm/library export "$out/h200-library.tar.gz"
python -m kb_tvm.cli experience --experience /tmp/trainlib export "$out/h200-trainlib.tar.gz"
tail -n 2 /tmp/train-*.log
