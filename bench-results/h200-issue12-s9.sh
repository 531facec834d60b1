#!/usr/bin/env bash
# Issue 12, ninth session. First (0) setmaxnreg on the two-consumer tiles, with and without, on
# the table's largest and a BERT shape (a wrong register split would hang: a timeout of its own);
# then what the eighth session's job lost with its machine, and what its later commits changed:
# (1) the batched kernels on a GPU for the first time: tune-op on the suite's two attention workloads
#     (12 heads; the template region checks every variant against the untuned build before timing
#     it), kb against stock MetaSchedule, 60 s each;
# (2) the shapes table's stock MetaSchedule column on three of its shapes (75 s each);
# (3) the shapes table again, with the variant search that spreads its measurements over tiles
#     (against s8's table by share of cuBLAS, which bench_hopper times in the same process);
# (4) bf16 through tune-op with a 10-minute budget.
# Started detached:
#   setsid nohup bash bench-results/h200-issue12-s9.sh > /root/s9.log 2>&1 < /dev/null &
set -u
res=/root/s9
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
stamp "0 setmaxnreg"
tiles=""
for t in 128x256x4x2x8x1x0x1 256x128x4x2x8x1x0x1 128x256x4x2x8x1x1x1; do tiles="$tiles --tile ${t}x0 --tile ${t}x1"; done
timeout -k 10 200 python3 -m kb_tvm.bench_hopper --shape 4096x4096x4096 --shape 1024x3072x768 $tiles --tile 128x256x4x2x8x1x0x1x0 \
    --tile 128x256x4x2x8x1x0x1x1 --dtype float16 --out-dtype float16 --b-layout nk --out $res/setmaxnreg.json \
    > $res/setmaxnreg.log 2>&1
stamp "1 attention rc=$?"
timeout 560 python3 -m kb_tvm.bench --workload batch_matmul-12x128x128x64-fp16 \
    --workload batch_matmul-12x128x64x128-fp16 --budget 60s --target cuda --runs kb@kb,evolutionary@stock \
    --out $res/attention.json > $res/attention.log 2>&1
stamp "2 stock column rc=$?"
timeout 500 python3 -m kb_tvm.bench --workload linear-128x768x768-fp16 --workload linear-1024x3072x768-fp16 \
    --workload linear-128x4096x4096-fp16 --budget 75s --target cuda --runs evolutionary@stock \
    --out $res/stock-shapes.json > $res/stock-shapes.log 2>&1
stamp "3 shapes rc=$?"
shapes=""
for m in 128 1024 4096; do
  for nk in 768x768 3072x768 768x3072 4096x4096 11008x4096 4096x11008; do shapes="$shapes --shape ${m}x${nk}"; done
done
timeout 400 python3 -m kb_tvm.bench_hopper $shapes --search 10s --dtype float16 --out-dtype float16 --b-layout nk \
    --out $res/shapes.json > $res/shapes.log 2>&1
stamp "4 bf16 tune-op 10m rc=$?"
timeout 560 python3 -m kb_tvm.bench --workload gemm-4096-bf16 --budget 10m --target cuda --runs kb@kb \
    --out $res/gemm-4096-bf16.json > $res/gemm-4096-bf16.log 2>&1
stamp "done rc=$?"
touch $res/DONE
