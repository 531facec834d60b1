#!/usr/bin/env bash
# Issues 10 and 12 on one H200: `kb-tvm tune` BERT-base fp16 for 8 minutes with the Hopper stage
# (the template's kernels searched first, inside the budget, for the matmul tasks it computes,
# then MetaSchedule's search; the final build keeps the fastest of: no Hopper kernels, those that
# win alone, all of them, timed end to end). Then stock MetaSchedule's 8-minute schedules from
# issue 10's run rebuilt and timed on the same machine in the same job. Started detached:
#   setsid nohup bash bench-results/h200-hopper-8.sh >/root/hopper8.log 2>&1 < /dev/null &
set -u
res=/root/hopper8
mkdir -p $res /root/m && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
stamp export
[ -f /root/m/bert-base.onnx ] || python3 -m kb_tvm.workloads.export_models bert-base --seq 128 \
    --out /root/m/bert-base.onnx > $res/export.log 2>&1
stamp "kb tune 8m"
python3 -m kb_tvm.cli tune /root/m/bert-base.onnx --budget 8m --strategy kb --target cuda --seed 0 \
    --precision fp16 --input-shape input_ids=1x128 --input-shape attention_mask=1x128 \
    --work-dir /root/w8 > $res/kb.log 2>&1
stamp "kb rc=$?"
cp /root/w8/report.md /root/w8/report.json /root/w8/hopper.jsonl $res/ 2>/dev/null
gzip -c /root/w8/candidates.jsonl > $res/kb-candidates.jsonl.gz 2>/dev/null
stamp "stock rebuild"
python3 -m kb_tvm.bench_rebuild --model /root/m/bert-base.onnx --target cuda --precision fp16 \
    --input-shape input_ids=1x128 --input-shape attention_mask=1x128 \
    --log stock=bench-results/h200-issue10/bert-base/evolutionary-candidates.jsonl.gz \
    --out $res/stock-rebuild.json > $res/stock-rebuild.log 2>&1
stamp "done rc=$?"
touch $res/DONE
