#!/usr/bin/env bash
# Issue 12, prepared for the next H200 session (not run yet; this session's runs are
# h200-issue12-s7.sh and h200-issue12-s7b.py). What is left to measure:
# (1) the transformer shapes table again, now with paired stores (the s7 table predates them);
# (2) bf16 through tune-op with a 10-minute budget (the pace rule should end it in ~3 minutes);
# (3) the batched kernels on a GPU for the first time: one BERT-base layer, whose attention
#     matmuls (12 heads) now get the template's variants, each checked against the untuned build
#     (hopper.jsonl says which computed right), against torch.compile on the same model;
# (4) tune-op on the suite's attention workloads (batch_matmul-12x128x128x64-fp16 and
#     -12x128x64x128-fp16: the batched template region) against stock MetaSchedule, 120 s each.
# Still not covered: a stock column for the table's shapes (the suite has no workload of them).
# Started detached:
#   setsid nohup bash bench-results/h200-issue12-next.sh > /root/next.log 2>&1 < /dev/null &
set -u
res=/root/next
mkdir -p $res /root/m && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
stamp "shapes"
shapes=""
for m in 128 1024 4096; do
  for nk in 768x768 3072x768 768x3072 4096x4096 11008x4096 4096x11008; do shapes="$shapes --shape ${m}x${nk}"; done
done
python3 -m kb_tvm.bench_hopper $shapes --search 10s --dtype float16 --out-dtype float16 --b-layout nk \
    --out $res/shapes.json > $res/shapes.log 2>&1
stamp "bf16 tune-op 10m rc=$?"
python3 -m kb_tvm.bench --workload gemm-4096-bf16 --budget 10m --target cuda --runs kb@kb \
    --out $res/gemm-4096-bf16.json > $res/gemm-4096-bf16.log 2>&1
stamp "bert layer rc=$?"
python3 -m kb_tvm.workloads.export_models bert --layers 1 --seq 128 --out /root/m/bert-layer.onnx > $res/export.log 2>&1
python3 -m kb_tvm.cli tune /root/m/bert-layer.onnx --budget 3m --target cuda --seed 0 --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 --work-dir /root/w-layer > $res/layer.log 2>&1
stamp "layer tune rc=$?"
cp /root/w-layer/report.md /root/w-layer/report.json /root/w-layer/hopper.jsonl $res/ 2>/dev/null
python3 -m kb_tvm.workloads.torch_baselines bert --layers 1 --seq 128 --out $res/torch-layer.json > $res/torch-layer.log 2>&1
stamp "attention workloads rc=$?"
for w in batch_matmul-12x128x128x64-fp16 batch_matmul-12x128x64x128-fp16; do
  python3 -m kb_tvm.bench --workload $w --budget 120s --target cuda --runs kb@kb,evolutionary@stock \
      --out $res/$w.json > $res/$w.log 2>&1
done
stamp "done rc=$?"
touch $res/DONE
