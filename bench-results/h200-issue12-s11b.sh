#!/usr/bin/env bash
# Issue 12, eleventh session's second lease: kb's variant search with ping-pong offered (a family of
# its own beside each persistent single-warpgroup tile), 10 s a shape as in the shapes table, on the
# shape where ping-pong won (4096x3072x768), two where it tied, and the cell without a stock number;
# 30 s on 4096x3072x768. Then that cell's stock MetaSchedule run, 75 s. About 5 minutes.
#   setsid nohup bash bench-results/h200-issue12-s11b.sh > /root/s11b.log 2>&1 < /dev/null &
set -u
res=/root/s11b
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
stamp "kb search 10s"
timeout 150 python3 -m kb_tvm.bench_hopper --shape 4096x3072x768 --shape 4096x768x768 --shape 1024x3072x768 \
    --shape 4096x4096x11008 --search 10s --dtype float16 --out-dtype float16 --b-layout nk \
    --out $res/shapes-10s.json > $res/shapes-10s.log 2>&1
stamp "kb search 30s rc=$?"
timeout 90 python3 -m kb_tvm.bench_hopper --shape 4096x3072x768 --search 30s --dtype float16 --out-dtype float16 \
    --b-layout nk --out $res/shapes-30s.json > $res/shapes-30s.log 2>&1
stamp "stock linear-4096x4096x11008 rc=$?"
timeout 240 python3 -m kb_tvm.bench --workload linear-4096x4096x11008-fp16 --budget 75s --target cuda \
    --runs evolutionary@stock --out $res/stock-4096x4096x11008.json > $res/stock-4096x4096x11008.log 2>&1
stamp "done rc=$?"
touch $res/DONE
