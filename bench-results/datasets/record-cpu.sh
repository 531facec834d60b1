#!/usr/bin/env bash
# Replay datasets on this 2-core CPU (llvm): each workload tuned by uniform samples, kb and
# stock's evolutionary search, 60 s each, all on kb's measurement pipeline; every candidate of
# the three runs is kept (bench-results/datasets/cpu/*-candidates.jsonl.gz), then merged into
# one dataset per workload by `kb-tvm replay build`.
set -u
cd "$(dirname "$0")/../.."
out=bench-results/datasets/cpu
mkdir -p $out
for w in gemm-128 gemm-512 gemm-768x512x640 gemm-gelu-256 batch_matmul-12x128x128x64 batch_matmul-16x256x256x256 \
         conv2d-28x28x32 conv2d-56x56x64 softmax-128x768 layernorm-128x768 softmax-1024x4096 layernorm-1024x4096; do
    python -m kb_tvm.bench --workload $w --budget 60s --target llvm --runs random@kb,kb@kb,evolutionary@kb \
        --out $out/$w.json > $out/$w.log 2>&1
done
touch $out/DONE
