#!/usr/bin/env bash
# Retrains the shipped llvm cost model for this host's vector ISA (kb_tvm/models/<key>.json, key as
# kb_tvm.warm_start.target_key gives it: llvm-avx512 on an AVX-512 host) on kb's own runs with the
# host target, 45 s per operator, and exports their experience library to DIR (default: the
# current folder). Run from the repository root: bash benchmarks/train_llvm_cost_model.sh [DIR]
set -eu
out=${1:-.}
lib=$(mktemp -d)/library
for name in gemm-512 gemm-768x512x640 conv2d-28x28x32 batch_matmul-12x128x128x64 gemm-gelu-256 \
    softmax-128x768 layernorm-128x768; do
    kb-tvm tune-op "$name" --budget 45s --target llvm --experience "$lib" --seed 1 \
        --work-dir "$(mktemp -d)/$name" | tail -n 2
done
key=$(python3 -c "from kb_tvm.measure.targets import make_target; from kb_tvm.warm_start import target_key; \
print(target_key(make_target('llvm')))")
kb-tvm train-model --target "$key" --experience "$lib" --out "kb_tvm/models/$key.json"
kb-tvm experience --experience "$lib" export "$out/$key-operators-library.tar.gz"
