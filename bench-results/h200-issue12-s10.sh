#!/usr/bin/env bash
# Issue 12, tenth session (first lease; results in bench-results/h200-issue12/s10/): clusters of two blocks
# (GemmTile(cluster_m=2), B's halves multicast by TMA) against the same tiles without, on 4096^3
# and on BERT-base's shapes where kb is furthest behind cuBLAS. bench_hopper checks every
# variant against torch before timing it; a cluster that deadlocked would hang the process, so
# each shape runs under a timeout of its own. Then five more cells of the shapes table's stock
# column (75 s each). About 12 minutes in all.
#   setsid nohup bash bench-results/h200-issue12-s10.sh > /root/next.log  (it wrote to /root/next) 2>&1 < /dev/null &
set -u
res=/root/next
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
# BMxBNxSTAGESxCONSUMERSxGROUP_MxPRODUCERxPERSISTENTxPAIREDxSETMAXNREGxCLUSTER_M
tiles=""
for t in 128x256x4x2x8x1x0x1x0 128x256x4x2x8x1x1x1x0 128x128x4x1x8x1x0x1x0 128x192x4x2x8x1x0x1x0; do
  tiles="$tiles --tile ${t}x1 --tile ${t}x2"
done
for shape in 4096x4096x4096 1024x768x3072 4096x3072x768 1024x3072x768; do
  stamp "clusters $shape"
  timeout -k 10 150 python3 -m kb_tvm.bench_hopper --shape $shape $tiles --dtype float16 --out-dtype float16 \
      --b-layout nk --out $res/clusters-$shape.json > $res/clusters-$shape.log 2>&1
done
# more cells of the shapes table's stock MetaSchedule column (s9 measured 5 of 18), one process each
for shape in 128x3072x768 128x768x3072 1024x768x768 4096x768x768 1024x4096x4096; do
  stamp "stock linear-$shape"
  timeout 200 python3 -m kb_tvm.bench --workload linear-$shape-fp16 --budget 75s --target cuda \
      --runs evolutionary@stock --out $res/stock-$shape.json > $res/stock-$shape.log 2>&1
done
stamp "done rc=$?"
touch $res/DONE
