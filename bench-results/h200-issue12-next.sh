#!/usr/bin/env bash
# Issue 12, prepared for the next H200 session (not run yet): (1) kb-tvm tune-op's Hopper template
# region against stock MetaSchedule at 240 s on gemm-4096-fp16, one after the other in one job
# (the "kb at most 0.5x stock at 240 s"), and kb alone on bf16; (2) the transformer shapes
# table: kb's variant search (15 s a shape, split-K included) beside cuBLAS, M 128-4096 with N, K of
# BERT-base and of a 7B-class layer; (3) one BERT-base layer (export_models' bert --layers 1) in fp16
# end to end, kb-tvm tune 4 min against PyTorch eager and torch.compile max-autotune on the same
# model and GPU. Started detached:
#   setsid nohup bash bench-results/h200-issue12-next.sh >/root/i12.log 2>&1 < /dev/null &
set -u
res=/root/i12
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
stamp "gemm-4096-fp16 kb vs stock, 240 s each"
python3 -m kb_tvm.bench --workload gemm-4096-fp16 --budget 240s --target cuda --runs kb@kb,evolutionary@stock \
    --out $res/gemm-4096-fp16.json > $res/gemm-4096-fp16.log 2>&1
stamp "gemm-4096-bf16 kb, 240 s"
python3 -m kb_tvm.bench --workload gemm-4096-bf16 --budget 240s --target cuda --runs kb@kb \
    --out $res/gemm-4096-bf16.json > $res/gemm-4096-bf16.log 2>&1
stamp "bert layer"
mkdir -p /root/m
python3 -m kb_tvm.workloads.export_models bert --layers 1 --seq 128 --out /root/m/bert-layer.onnx > $res/export.log 2>&1
python3 -m kb_tvm.cli tune /root/m/bert-layer.onnx --budget 4m --target cuda --seed 0 --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 --work-dir /root/w-layer > $res/layer.log 2>&1
cp /root/w-layer/report.md $res/layer-report.md; cp /root/w-layer/report.json $res/layer-report.json
python3 -m kb_tvm.workloads.torch_baselines bert --layers 1 --seq 128 --out $res/torch-layer.json > $res/torch-layer.log 2>&1
stamp "shapes"
shapes=""
for m in 128 512 2048 4096; do
  for nk in 768x768 3072x768 768x3072 4096x4096 11008x4096 4096x11008; do shapes="$shapes --shape ${m}x${nk}"; done
done
python3 -m kb_tvm.bench_hopper $shapes --search 15s --dtype float16 --out-dtype float16 --b-layout nk \
    --out $res/shapes.json > $res/shapes.log 2>&1
stamp "done rc=$?"
touch $res/DONE
