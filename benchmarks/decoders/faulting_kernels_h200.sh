#!/bin/bash
# On the H200: which kernel faults in the toy decoders' untuned fp16 builds (find_faulting_kernel.py).
# Writes $OUT/faults/<model>.txt (the calls made, the last one the culprit) and <model>.cu.
set -u
mkdir -p "$OUT/faults"
TOKENS16="--input-shape input_ids=1x16 --input-shape attention_mask=1x16"
for name in llama_tiny gpt2_tiny; do
  CUDA_LAUNCH_BLOCKING=1 timeout 240 python3 benchmarks/decoders/find_faulting_kernel.py "workloads/$name.onnx" \
    $TOKENS16 --precision fp16 --out "$OUT/faults/$name.cu" > "$OUT/faults/$name.txt" 2>&1 &
done
wait
for name in llama_tiny gpt2_tiny; do
  echo "$name: $(grep -c '^call ' "$OUT/faults/$name.txt") calls; last: $(grep '^call \|no fault' "$OUT/faults/$name.txt" | tail -1)"
  grep -v Warning "$OUT/faults/$name.txt" | grep -v '^call ' | tail -3
done
