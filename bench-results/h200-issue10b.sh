#!/usr/bin/env bash
# Issue 10 on one H200 (the two-GPU kind was not lent): CUDA graphs checked on the GPU, then the
# ResNet-50 fp16 pair again (8 min each, kb then stock on the same GPU and 16 cores) with the fixes
# its first run asked for, then last session's BERT-base runs rebuilt from their candidate logs
# and timed with and without CUDA graphs. Started detached on a warm machine:
#   setsid nohup bash bench-results/h200-issue10b.sh >/root/issue10b.log 2>&1 < /dev/null &
set -u
res=/root/issue10b
mkdir -p $res /root/m && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > $res/gpus.txt; nproc >> $res/gpus.txt
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }

stamp exports
taskset -c 0-7 python3 -m kb_tvm.workloads.export_models bert-base --seq 128 --out /root/m/bert-base.onnx \
    > $res/export-bert-base.log 2>&1 &
taskset -c 8-15 python3 -m kb_tvm.workloads.export_models resnet50 --out /root/m/resnet50.onnx \
    > $res/export-resnet50.log 2>&1 &
wait

# CUDA graphs on the GPU: the shipped block untuned, with and without, two input sets vs onnxruntime
stamp graph smoke
graphs=--cuda-graph
python3 -m kb_tvm.bench_rebuild --model workloads/transformer_block.onnx --target cuda --precision fp16 \
    --out $res/smoke.json > $res/smoke.log 2>&1 || { graphs=--no-cuda-graph; stamp "graphs FAILED: pair without"; }

stamp "pair resnet50 $graphs"
python3 -m kb_tvm.bench_model --model /root/m/resnet50.onnx --budget 8m --target cuda --precision fp16 \
    --input-shape input=1x3x224x224 $graphs --out $res/resnet50 --work-root /root/work-resnet50 > $res/resnet50.log 2>&1

stamp rebuild bert-base
python3 -m kb_tvm.bench_rebuild --model /root/m/bert-base.onnx --target cuda --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 \
    --log kb=bench-results/h200-issue10/bert-base/kb-candidates.jsonl.gz \
    --log stock=bench-results/h200-issue10/bert-base/evolutionary-candidates.jsonl.gz \
    --out $res/bert-rebuild.json > $res/bert-rebuild.log 2>&1
stamp done
touch $res/DONE
