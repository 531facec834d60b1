#!/usr/bin/env bash
# Issue 13 on one H200, and issue 10's cast dedup. (1) Two workloads recorded as training data
# (uniform samples, kb, stock's evolutionary search; 45 s each) and made datasets; (2) the agent
# trained there (16 cores) on every dataset not held out (datasets/catalog.json); (3) two
# held-out workloads tuned for real, side by side at equal wall budgets one after the other on
# the same GPU: uniform samples, kb's rules, stock's evolutionary search, kb steered by that
# agent (60 s each), every candidate kept; (4) last session's BERT-base schedules rebuilt on the
# graph with one cast per tensor. Started detached on a warm machine:
#   setsid nohup bash bench-results/h200-issue13.sh >/root/issue13.log 2>&1 < /dev/null &
set -u
res=/root/issue13
mkdir -p $res/ds /root/m && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > $res/gpus.txt; nproc >> $res/gpus.txt
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }

for w in gemm-1024-fp16 layernorm-1024x4096; do
    stamp "training data $w"
    python3 -m kb_tvm.bench --workload $w --budget 45s --target cuda --runs random@kb,kb@kb,evolutionary@kb \
        --out $res/ds/$w.json > $res/ds/$w.log 2>&1
done
python3 -m kb_tvm.replay.build $res/ds/*-candidates.jsonl.gz --out datasets > $res/build-training.log 2>&1

stamp "train agent"
python3 -m kb_tvm.cli train-agent --datasets datasets --budget 240s --episodes 3 --jobs 16 \
    --out kb_tvm/models/agent.json > $res/train-agent.log 2>&1
cp kb_tvm/models/agent.json $res/agent.json

for w in gemm-1024 softmax-1024x4096; do
    stamp "held out $w"
    python3 -m kb_tvm.bench --workload $w --budget 60s --target cuda --runs random@kb,kb@kb,evolutionary@kb,agent@kb \
        --out $res/ds/$w.json > $res/ds/$w.log 2>&1
done
python3 -m kb_tvm.replay.build $res/ds/*-candidates.jsonl.gz --out $res/datasets > $res/build.log 2>&1

stamp "bert export"
python3 -m kb_tvm.workloads.export_models bert-base --seq 128 --out /root/m/bert-base.onnx > $res/export-bert-base.log 2>&1
stamp "bert rebuild, one cast per tensor"
python3 -m kb_tvm.bench_rebuild --model /root/m/bert-base.onnx --target cuda --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 \
    --log kb=bench-results/h200-issue10/bert-base/kb-candidates.jsonl.gz \
    --log stock=bench-results/h200-issue10/bert-base/evolutionary-candidates.jsonl.gz \
    --out $res/bert-rebuild-cse.json > $res/bert-rebuild-cse.log 2>&1
stamp done
touch $res/DONE
