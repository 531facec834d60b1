#!/usr/bin/env bash
# Issue 10 on the H200 x2: BERT-base (seq 128, batch 1) and ResNet-50 (batch 1) in fp16, 8 minutes
# each, kb vs stock side by side (one GPU and 16 cores each, at the same time), and what users would
# otherwise run on the same GPU: PyTorch eager fp32/fp16 and torch.compile max-autotune fp16.
# Every measured candidate is kept (*-candidates.jsonl.gz). Started detached on a warm machine:
#   setsid nohup bash bench-results/h200-issue10.sh >/root/issue10.log 2>&1 < /dev/null &
set -u
res=/root/issue10
mkdir -p $res /root/m && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > $res/gpus.txt; nproc >> $res/gpus.txt
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }

stamp exports
taskset -c 0-15 python3 -m kb_tvm.workloads.export_models bert-base --seq 128 --out /root/m/bert-base.onnx \
    > $res/export-bert-base.log 2>&1 &
taskset -c 16-31 python3 -m kb_tvm.workloads.export_models resnet50 --out /root/m/resnet50.onnx \
    > $res/export-resnet50.log 2>&1 &
wait

pair() {  # name model input-shapes...
    local name=$1 model=$2; shift 2
    local shapes=(); for s in "$@"; do shapes+=(--input-shape "$s"); done
    stamp "pair $name"
    python3 -m kb_tvm.bench_model --model $model --budget 8m --target cuda --precision fp16 "${shapes[@]}" \
        --out $res/$name --work-root /root/work-$name > $res/$name.log 2>&1
}
pair bert-base /root/m/bert-base.onnx input_ids=1x128 attention_mask=1x128

stamp torch baselines
CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 420 python3 -m kb_tvm.workloads.torch_baselines bert-base --seq 128 \
    --out $res/torch-bert-base.json > $res/torch-bert-base.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 taskset -c 16-31 timeout 420 python3 -m kb_tvm.workloads.torch_baselines resnet50 \
    --out $res/torch-resnet50.json > $res/torch-resnet50.log 2>&1 &
wait

pair resnet50 /root/m/resnet50.onnx input=1x3x224x224
stamp done
touch $res/DONE
