#!/usr/bin/env bash
# Issue 12, tenth session, second lease: the shapes table's 8 cells that have no stock
# MetaSchedule number yet. First kb's 10-s variant search and cuBLAS on those 8 shapes (so the
# stock cells below sit beside kb's numbers in one job), then stock at 75 s a cell, one process
# each, smallest first: the lease may end before the largest.
#   setsid nohup bash bench-results/h200-issue12-s10b.sh > /root/s10b.log 2>&1 < /dev/null &
set -u
res=/root/s10b
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
cells="128x11008x4096 128x4096x11008 4096x768x3072 1024x11008x4096 1024x4096x11008 4096x4096x4096 4096x11008x4096 4096x4096x11008"
stamp "kb search"
shapes=""
for s in $cells; do shapes="$shapes --shape $s"; done
timeout 300 python3 -m kb_tvm.bench_hopper $shapes --search 10s --dtype float16 --out-dtype float16 --b-layout nk \
    --out $res/shapes.json > $res/shapes.log 2>&1
for s in $cells; do
  stamp "stock linear-$s rc=$?"
  timeout 240 python3 -m kb_tvm.bench --workload linear-$s-fp16 --budget 75s --target cuda \
      --runs evolutionary@stock --out $res/stock-$s.json > $res/stock-$s.log 2>&1
done
stamp "done rc=$?"
touch $res/DONE
