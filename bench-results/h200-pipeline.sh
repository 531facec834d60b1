#!/usr/bin/env bash
# Issue 8's H200 run: what a trial costs on MetaSchedule's pipeline and on kb's, on the same
# candidates (gemm fp32 2048^3, then the fp16 4096^3 tensor-core space), and which CUDA compiler
# the builds use. On the device: . .kbdev/b/on-device.sh && bash bench-results/h200-pipeline.sh
set -u
out=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
nproc >> "$out/gpu.txt"
python3 -c "from kb_tvm.measure.workers import cuda_compiler; print('cuda compiler:', *cuda_compiler())" \
    | tee -a "$out/gpu.txt"
python3 -m kb_tvm.bench_pipeline --workload gemm-2048 --target cuda --sizes 16,64 \
    --out "$out/pipeline-gemm2048.json" 2>&1 | grep -v "INFO" | tee "$out/pipeline-gemm2048.log"
python3 -m kb_tvm.bench_pipeline --workload gemm-4096-fp16 --target cuda --sizes 16,64 \
    --out "$out/pipeline-gemm4096fp16.json" 2>&1 | grep -v "INFO" | tee "$out/pipeline-gemm4096fp16.log"
