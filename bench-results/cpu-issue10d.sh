#!/usr/bin/env bash
# Issue 10's CPU target again (kb at or below onnxruntime on the shipped transformer block), with the
# retirement floor that weighs the seconds left: onnxruntime timed before and after, kb then stock
# 10 minutes each in between, on this 2-core machine with nothing else running.
set -u
out=bench-results/cpu-issue10d
mkdir -p $out
python3 bench-results/ort-time.py workloads/transformer_block.onnx > $out/ort-before.txt 2>&1
python -m kb_tvm.bench_model --model workloads/transformer_block.onnx --budget 10m --target llvm \
    --out $out --work-root /tmp/cpu-issue10d > $out/bench.log 2>&1
python3 bench-results/ort-time.py workloads/transformer_block.onnx > $out/ort-after.txt 2>&1
touch /tmp/cpu-issue10d.done
