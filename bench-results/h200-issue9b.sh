#!/usr/bin/env bash
# Issue 9, second H200 pass (2 GPUs), from a copy of the repo so that later calls may re-sync the tree:
# bf16 candidates checked against numpy, bf16 GEMM 4096^3 side by side at 240 s, fp16 GEMM 4096^3
# side by side at 600 s. Started detached (setsid) on a warm machine; results collect in /root/issue9b.
#   setsid nohup bash bench-results/h200-issue9b.sh >/root/issue9b.log 2>&1 < /dev/null &
set -u
res=/root/issue9b
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
python3 bench-results/h200-tc-check.py gemm-4096-bf16 6 $res/bf16-check.json > $res/bf16-check.log 2>&1
python3 -m kb_tvm.bench --workload gemm-4096-bf16 --budget 240s --target cuda --side-by-side \
    --out $res/bf16-4096-240s.json > $res/bf16.log 2>&1
python3 -m kb_tvm.bench --workload gemm-4096-fp16 --budget 600s --target cuda --side-by-side \
    --out $res/fp16-4096-600s.json > $res/fp16-600.log 2>&1
touch $res/DONE
