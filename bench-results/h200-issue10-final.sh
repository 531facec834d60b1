#!/usr/bin/env bash
# Issue 10 on one H200 (the two-GPU kind is not lent): BERT-base fp16, seq 128, batch 1.
# `kb-tvm tune --budget 8m` (the Hopper template's variants, split-K among them, searched first
# inside the budget), then stock MetaSchedule's `kb-tvm tune --strategy evolutionary --budget 8m`
# on the same GPU, one after the other in one job; then both libraries timed in turns in one
# process. Between the two, stock's schedules of issue 10's 8-minute run rebuilt (the earlier
# sessions' comparison, kept for continuity). Started detached:
#   setsid nohup bash bench-results/h200-issue10-final.sh >/root/final.log 2>&1 < /dev/null &
set -u
res=/root/final
mkdir -p $res /root/m && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
shapes="--input-shape input_ids=1x128 --input-shape attention_mask=1x128"
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
keep() {  # $1 work dir, $2 label
  cp $1/report.md $res/$2-report.md; cp $1/report.json $res/$2-report.json
  cp $1/hopper.jsonl $res/$2-hopper.jsonl 2>/dev/null
  gzip -c $1/candidates.jsonl > $res/$2-candidates.jsonl.gz 2>/dev/null
}
stamp export
[ -f /root/m/bert-base.onnx ] || python3 -m kb_tvm.workloads.export_models bert-base --seq 128 \
    --out /root/m/bert-base.onnx > $res/export.log 2>&1
stamp "kb tune 8m"
python3 -m kb_tvm.cli tune /root/m/bert-base.onnx --budget 8m --strategy kb --target cuda --seed 0 \
    --precision fp16 $shapes --work-dir /root/w-kb > $res/kb.log 2>&1
stamp "kb rc=$?"; keep /root/w-kb kb
stamp "stock rebuild (issue 10's schedules)"
python3 -m kb_tvm.bench_rebuild --model /root/m/bert-base.onnx --target cuda --precision fp16 $shapes \
    --log stock=bench-results/h200-issue10/bert-base/evolutionary-candidates.jsonl.gz \
    --out $res/stock-rebuild.json > $res/stock-rebuild.log 2>&1
stamp "stock tune 8m"
python3 -m kb_tvm.cli tune /root/m/bert-base.onnx --budget 8m --strategy evolutionary --target cuda --seed 0 \
    --precision fp16 $shapes --work-dir /root/w-stock > $res/stock.log 2>&1
stamp "stock rc=$?"; keep /root/w-stock stock
python3 - > $res/in-turns.json 2> $res/in-turns.log <<'PY'
import json
from pathlib import Path
from kb_tvm.bench_model import time_in_turns
shapes = ["input_ids=1x128", "attention_mask=1x128"]
t = time_in_turns({"kb": Path("/root/w-kb/model.so"), "stock": Path("/root/w-stock/model.so")},
                  "/root/m/bert-base.onnx", shapes, "cuda")
print(json.dumps({"in_turns_ms": {k: v * 1e3 for k, v in t.items()}, "kb_over_stock": t["kb"] / t["stock"]}))
PY
stamp "done rc=$?"
touch $res/DONE
