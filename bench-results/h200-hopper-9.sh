#!/usr/bin/env bash
# Issues 10 and 12 on one H200: split-K variants in the Hopper template (fp32 partial sums, then a
# second kernel that sums them and applies the task's epilogue). BERT-base fp16: the MetaSchedule
# schedules of run 8's 8-minute kb run and of issue 10's 8-minute stock run rebuilt side by side in
# one process, each also with the template's kernels from a 120-s search (split-K among them).
#   bash bench-results/h200-hopper-9.sh OUT_DIR
set -u
out=${1:-/root/hopper9}; mkdir -p "$out" /root/m
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> "$out/progress.txt"; }
stamp "bert export"
[ -f /root/m/bert-base.onnx ] || python3 -m kb_tvm.workloads.export_models bert-base --seq 128 \
    --out /root/m/bert-base.onnx > "$out/export.log" 2>&1
stamp "bert rebuild with the Hopper template, split-K"
timeout 470 python3 -m kb_tvm.bench_rebuild --model /root/m/bert-base.onnx --target cuda --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 \
    --log kb=bench-results/h200-issue12/run8/kb-candidates.jsonl.gz \
    --log stock=bench-results/h200-issue10/bert-base/evolutionary-candidates.jsonl.gz \
    --hopper 120s --out "$out/bert-rebuild-splitk.json" > "$out/bert-rebuild-splitk.log" 2>&1
stamp "done rc=$?"
