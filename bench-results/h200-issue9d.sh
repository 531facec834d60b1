#!/usr/bin/env bash
# Issue 9, fourth H200 pass: the tensor-core space as it ships now (pipelined WMMA sketches,
# round-robin coarse sampling, categorical bans, register-pressure proxy), side by side at 240 s,
# plus the no-regression fp32 GEMM and the new workloads' failed-build fractions. Every measured
# candidate is kept (*-candidates.jsonl.gz). On 4 GPUs two side-by-side pairs run at once
# (GPUs 0,1 with cores 0-31; GPUs 2,3 with cores 32-63: 16 cores a run, as on the 2-GPU kind).
# Started detached on a warm machine with TVM installed:
#   setsid nohup bash bench-results/h200-issue9d.sh >/root/issue9d.log 2>&1 < /dev/null &
set -u
res=/root/issue9d
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > $res/gpus.txt; nproc >> $res/gpus.txt

bench() {  # name workload budget
    python3 -m kb_tvm.bench --workload $2 --budget $3 --target cuda --side-by-side --out $res/$1.json \
        > $res/$1.log 2>&1
}
chain_a() {
    bench fp16-4096-240s gemm-4096-fp16 240s
    bench fp32-2048-240s gemm-2048 240s
    bench bmm-scores-60s batch_matmul-12x128x128x64-fp16 60s
}
chain_b() {
    bench bf16-4096-240s gemm-4096-bf16 240s
    bench fp16-4096-240s-rerun gemm-4096-fp16 240s
    bench conv-nhwc-60s conv2d-nhwc-56x56x64-fp16 60s
}
if [ "$(nvidia-smi -L | wc -l)" -ge 4 ]; then
    (export CUDA_VISIBLE_DEVICES=0,1; taskset -c 0-31 bash -c "$(declare -f bench chain_a); res=$res; chain_a") &
    (export CUDA_VISIBLE_DEVICES=2,3; taskset -c 32-63 bash -c "$(declare -f bench chain_b); res=$res; chain_b") &
    wait
else
    bench fp16-4096-240s gemm-4096-fp16 240s
    bench bf16-4096-240s gemm-4096-bf16 240s
    bench fp32-2048-240s gemm-2048 240s
    bench bmm-scores-60s batch_matmul-12x128x128x64-fp16 60s
    bench conv-nhwc-60s conv2d-nhwc-56x56x64-fp16 60s
fi
touch $res/DONE
