#!/usr/bin/env bash
# Issue 12, eighth session, first H200 job (started detached:
#   setsid nohup bash bench-results/h200-issue12-s8.sh > /root/s8.log 2>&1 < /dev/null &):
# (A) the transformer shapes table again, now with paired stores: kb's variant search (10 s a shape)
#     beside cuBLAS through torch, fp16 in and out, B as nn.Linear's [N, K];
# (B, after C) the table's stock MetaSchedule column on three of its shapes (linear-MxNxK-fp16 workloads, the
#     same computation; tensor-core space, 75 s each);
# (C) the batched kernels on a GPU for the first time: one BERT-base layer whose attention matmuls
#     (12 heads) get the template's variants, each checked against the untuned build, kb-tvm tune 3 min,
#     against PyTorch eager and torch.compile max-autotune on the same model;
# (D) tune-op against stock on the suite's attention-scores workload, 60 s each.
set -u
res=/root/s8
mkdir -p $res /root/m && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
stamp "A shapes"
shapes=""
for m in 128 1024 4096; do
  for nk in 768x768 3072x768 768x3072 4096x4096 11008x4096 4096x11008; do shapes="$shapes --shape ${m}x${nk}"; done
done
timeout 400 python3 -m kb_tvm.bench_hopper $shapes --search 10s --dtype float16 --out-dtype float16 --b-layout nk \
    --out $res/shapes.json > $res/shapes.log 2>&1
stamp "C bert layer rc=$?"
python3 -m kb_tvm.workloads.export_models bert --layers 1 --seq 128 --out /root/m/bert-layer.onnx > $res/export.log 2>&1
timeout 420 python3 -m kb_tvm.cli tune /root/m/bert-layer.onnx --budget 3m --target cuda --seed 0 --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 --work-dir /root/w-layer > $res/layer.log 2>&1
stamp "C tune rc=$?"
cp /root/w-layer/report.md $res/layer-report.md; cp /root/w-layer/report.json $res/layer-report.json
cp /root/w-layer/hopper.jsonl $res/layer-hopper.jsonl 2>/dev/null
timeout 300 python3 -m kb_tvm.workloads.torch_baselines bert --layers 1 --seq 128 --out $res/torch-layer.json \
    > $res/torch-layer.log 2>&1
stamp "B stock column rc=$?"
timeout 500 python3 -m kb_tvm.bench --workload linear-128x768x768-fp16 --workload linear-1024x3072x768-fp16 \
    --workload linear-128x4096x4096-fp16 --budget 75s --target cuda --runs evolutionary@stock \
    --out $res/stock-shapes.json > $res/stock-shapes.log 2>&1
stamp "D attention rc=$?"
timeout 400 python3 -m kb_tvm.bench --workload batch_matmul-12x128x128x64-fp16 --budget 60s --target cuda \
    --runs kb@kb,evolutionary@stock --out $res/attention.json > $res/attention.log 2>&1
stamp "done rc=$?"
touch $res/DONE
