#!/usr/bin/env bash
# Issue 12, seventh session, one H200 job (started detached:
#   setsid nohup bash bench-results/h200-issue12-s7.sh > /root/s7.log 2>&1 < /dev/null &):
# (A) the template's new persistent variants against the non-persistent ones on 4096^3 fp16, and
#     shapes off the tile (M = 77, 197, 200, 1000; N, K off the tile), each checked against torch;
# (B) kb_tvm.bench gemm-4096-fp16, kb (tune-op: template region, then MetaSchedule under its bar)
#     and stock MetaSchedule, 240 s each, one after the other;
# (C) the transformer shapes table: kb's variant search (10 s a shape) beside cuBLAS;
# (D) one BERT-base layer (export_models' bert --layers 1) in fp16: kb-tvm tune 3 min, against
#     PyTorch eager and torch.compile max-autotune on the same model;
# (E) gemm-4096-bf16, kb alone, 240 s.
set -u
res=/root/s7
mkdir -p $res /root/m && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
hop="python3 -m kb_tvm.bench_hopper --dtype float16 --out-dtype float16 --b-layout nk"

stamp "A persistent"
$hop --shape 4096x4096x4096 --tile 128x256x4x2x8x1x0 --tile 128x256x4x2x8x1x1 --tile 128x256x3x2x8x1x1 \
    --tile 256x128x4x2x8x1x1 --tile 128x128x4x2x8x1x1 --tile 128x256x4x2x8x1x0 \
    --out $res/persistent.json > $res/persistent.log 2>&1
stamp "A ragged rc=$?"
$hop --shape 200x264x104 --shape 197x768x768 --shape 77x4096x4096 --shape 1000x3072x768 \
    --tile 64x64x4x1x8x1 --tile 128x64x4x2x8x1 --tile 128x128x4x2x8x1x1 \
    --out $res/ragged.json > $res/ragged.log 2>&1
stamp "B gemm-4096-fp16 kb vs stock rc=$?"
python3 -m kb_tvm.bench --workload gemm-4096-fp16 --budget 240s --target cuda --runs kb@kb,evolutionary@stock \
    --out $res/gemm-4096-fp16.json > $res/gemm-4096-fp16.log 2>&1
stamp "C shapes rc=$?"
shapes=""
for m in 128 1024 4096; do
  for nk in 768x768 3072x768 768x3072 4096x4096 11008x4096 4096x11008; do shapes="$shapes --shape ${m}x${nk}"; done
done
$hop $shapes --search 10s --out $res/shapes.json > $res/shapes.log 2>&1
stamp "D bert layer rc=$?"
python3 -m kb_tvm.workloads.export_models bert --layers 1 --seq 128 --out /root/m/bert-layer.onnx > $res/export.log 2>&1
python3 -m kb_tvm.cli tune /root/m/bert-layer.onnx --budget 3m --target cuda --seed 0 --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 --work-dir /root/w-layer > $res/layer.log 2>&1
stamp "D tune rc=$?"
cp /root/w-layer/report.md $res/layer-report.md; cp /root/w-layer/report.json $res/layer-report.json
cp /root/w-layer/hopper.jsonl $res/layer-hopper.jsonl 2>/dev/null
python3 -m kb_tvm.workloads.torch_baselines bert --layers 1 --seq 128 --out $res/torch-layer.json > $res/torch-layer.log 2>&1
stamp "E gemm-4096-bf16 kb rc=$?"
python3 -m kb_tvm.bench --workload gemm-4096-bf16 --budget 240s --target cuda --runs kb@kb \
    --out $res/gemm-4096-bf16.json > $res/gemm-4096-bf16.log 2>&1
stamp "done rc=$?"
touch $res/DONE
