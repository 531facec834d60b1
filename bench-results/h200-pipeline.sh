#!/usr/bin/env bash
# Issue 8's H200 run (one GPU, 16 cores): what a trial costs on MetaSchedule's pipeline and on
# kb's, on the same candidates of WORKLOAD, and which CUDA compiler the builds use.
# On the device: . .kbdev/b/on-device.sh && bash bench-results/h200-pipeline.sh WORKLOAD LABEL
set -u
out=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  python3 -c "from kb_tvm.measure.workers import cuda_compiler; print('cuda compiler:', *cuda_compiler())"
} | tee "$out/gpu.txt"
python3 -m kb_tvm.bench_pipeline --workload "$1" --target cuda --sizes 16,64 --out "$out/pipeline-$2.json" 2>&1 \
    | grep -v "INFO" | tee "$out/pipeline-$2.log"
