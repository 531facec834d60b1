#!/usr/bin/env bash
# Issue 8's second H200 session (2 GPUs, 32 cores): the GPU fault test, then the trial cost of both
# pipelines on the same candidates of the fp16 tensor-core space (GPU 1) beside kb's pipeline
# (race and streaming builds) on gemm fp32 2048^3 (GPU 0).
# On the device: . .kbdev/b/on-device.sh && bash bench-results/h200-issue8b.sh
set -u
out=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  python3 -c "from kb_tvm.measure.workers import cuda_compiler; print('cuda compiler:', *cuda_compiler())"
} > "$out/gpu.txt" 2>&1
CUDA_VISIBLE_DEVICES=1 taskset -c 16-31 timeout 560 python3 -m kb_tvm.bench_pipeline --workload gemm-4096-fp16 \
    --target cuda --sizes 16,64 --out "$out/pipeline-gemm4096fp16.json" > "$out/pipeline-gemm4096fp16.log" 2>&1 &
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 200 python3 -m pytest -q -p no:cacheprovider \
    tests/test_pipeline_cuda.py > "$out/fault-test.txt" 2>&1
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 340 python3 -m kb_tvm.bench_pipeline --workload gemm-2048 \
    --target cuda --sizes 16,64 --pipelines kb --out "$out/pipeline-gemm2048-kb.json" \
    > "$out/pipeline-gemm2048-kb.log" 2>&1
wait
grep -v INFO "$out"/*.log | tail -n 30; tail -n 3 "$out/fault-test.txt"
