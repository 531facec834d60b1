#!/usr/bin/env bash
# Issue 12, ninth session, second lease: cuBLAS bf16 on 4096^3 beside the variant tune-op chose in
# the first lease (that job timed no bf16 cuBLAS); then two more cells of the shapes table's stock MetaSchedule
# column (75 s each), among them kb's worst cell against cuBLAS (1024x768x3072). One process a
# shape, so that a machine taken back keeps the shapes already done.
#   setsid nohup bash bench-results/h200-issue12-s9b.sh > /root/s9b.log 2>&1 < /dev/null &
set -u
res=/root/s9b
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
stamp "bf16 cuBLAS and tune-op's variant"
timeout -k 10 120 python3 -m kb_tvm.bench_hopper --shape 4096x4096x4096 --tile 128x256x4x2x8x1x1x1 --dtype bfloat16 \
    --out-dtype float32 --b-layout kn --out $res/bf16-4096.json > $res/bf16-4096.log 2>&1
for shape in 1024x768x3072 4096x3072x768; do
  stamp "stock linear-$shape"
  timeout 200 python3 -m kb_tvm.bench --workload linear-$shape-fp16 --budget 75s --target cuda \
      --runs evolutionary@stock --out $res/stock-$shape.json > $res/stock-$shape.log 2>&1
done
stamp "done rc=$?"
touch $res/DONE
