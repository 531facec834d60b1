#!/usr/bin/env bash
# Issue 12, the eleventh session's first lease (ran 2026-12-03; results in h200-issue12/s11/).
# First ping-pong (GemmTile(pingpong=True): two consumer warpgroups taking whole tiles in turns)
# against the cooperative persistent tiles, on shapes of more than a wave of tiles; bench_hopper
# checks every variant against torch before timing it, and a ping-pong kernel that deadlocked
# would hang the process, so each shape runs under a timeout of its own. Then the shapes table's
# six cells without a stock MetaSchedule number, kb's 10-s search on them first (side by side),
# stock at 75 s a cell, smallest first. About 18 minutes; the lease ended during the last stock
# cell (4096x4096x11008), which -s11b.sh ran.
#   setsid nohup bash bench-results/h200-issue12-s11.sh > /root/next.log 2>&1 < /dev/null &
set -u
res=/root/next
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
# BMxBNxSTAGESxCONSUMERSxGROUP_MxPRODUCERxPERSISTENTxPAIREDxSETMAXNREGxCLUSTER_MxPINGPONG
tiles="--tile 128x256x4x2x8x1x1x1x0x1x0 --tile 128x192x4x2x8x1x1x1x0x1x0 --tile 128x128x4x2x8x1x1x1x0x1x0"
for t in 128x128x4 64x256x4 128x96x4 64x192x4 128x128x5; do tiles="$tiles --tile ${t}x2x8x1x1x1x0x1x1"; done
tiles="$tiles --tile 128x128x4x2x8x1x1x1x1x1x1"  # with setmaxnreg
for shape in 4096x4096x4096 4096x3072x768 4096x768x3072 1024x3072x768 4096x768x768 1024x11008x4096; do
  stamp "pingpong $shape"
  timeout -k 10 150 python3 -m kb_tvm.bench_hopper --shape $shape $tiles --dtype float16 --out-dtype float16 \
      --b-layout nk --out $res/pingpong-$shape.json > $res/pingpong-$shape.log 2>&1
done
cells="4096x768x3072 1024x11008x4096 1024x4096x11008 4096x4096x4096 4096x11008x4096 4096x4096x11008"
stamp "kb search"
shapes=""
for s in $cells; do shapes="$shapes --shape $s"; done
timeout 240 python3 -m kb_tvm.bench_hopper $shapes --search 10s --dtype float16 --out-dtype float16 --b-layout nk \
    --out $res/shapes.json > $res/shapes.log 2>&1
for s in $cells; do
  stamp "stock linear-$s rc=$?"
  timeout 240 python3 -m kb_tvm.bench --workload linear-$s-fp16 --budget 75s --target cuda \
      --runs evolutionary@stock --out $res/stock-$s.json > $res/stock-$s.log 2>&1
done
stamp "done rc=$?"
touch $res/DONE
