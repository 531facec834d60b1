#!/usr/bin/env bash
# Issue 12 (seventh run) and issue 10 on one H200: the Hopper template in the model path. BERT-base
# fp16 exported, then the schedules of issue 10's 8-minute kb and stock runs rebuilt side by side in
# one process, each also with the Hopper template's kernels (fused epilogues: bias, residual, GELU)
# where they beat its schedules, after a 100-s search of the template's variants (every variant
# checked against the untuned build's kernel before it is timed).
#   bash bench-results/h200-hopper-7.sh OUT_DIR
set -u
out=${1:-/root/hopper7}; mkdir -p "$out" /root/m
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> "$out/progress.txt"; }
stamp "bert export"
[ -f /root/m/bert-base.onnx ] || python3 -m kb_tvm.workloads.export_models bert-base --seq 128 \
    --out /root/m/bert-base.onnx > "$out/export.log" 2>&1
stamp "bert rebuild with the Hopper template"
timeout 500 python3 -m kb_tvm.bench_rebuild --model /root/m/bert-base.onnx --target cuda --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 \
    --log kb=bench-results/h200-issue10/bert-base/kb-candidates.jsonl.gz \
    --log stock=bench-results/h200-issue10/bert-base/evolutionary-candidates.jsonl.gz \
    --hopper 100s --out "$out/bert-rebuild-hopper.json" > "$out/bert-rebuild-hopper.log" 2>&1
stamp "done rc=$?"
