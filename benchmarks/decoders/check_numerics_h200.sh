#!/bin/bash
# On the H200, after `. .kbdev/b/on-device.sh` (../shared/device/README.md): the decoders and the
# ViT of issue 35, toy (shipped in workloads/) and full size (exported here), each untuned build
# checked against onnxruntime in fp32 and fp16 (`kb-tvm tune --check-numerics-only`).
# Writes $OUT/numerics/<model>-<precision>.txt and $OUT/numerics/summary.txt.
# ONLY=REGEX checks only the cases whose names match (e.g. ONLY='llama|gpt2').
set -u
T='{"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32, "registers_per_block": 65536, "host": {"kind": "llvm"}}'
MODELS=${MODELS:-/tmp/kb-models}
mkdir -p "$MODELS" "$OUT/numerics"
X="python3 workloads/export_models.py"
[ -f "$MODELS/llama-2l.onnx" ] || $X llama --layers 2 --seq 512 --out "$MODELS/llama-2l.onnx" > "$OUT/numerics/export-llama.txt" 2>&1 &
[ -f "$MODELS/gpt2.onnx" ] || $X gpt2 --seq 128 --out "$MODELS/gpt2.onnx" > "$OUT/numerics/export-gpt2.txt" 2>&1 &
[ -f "$MODELS/vit-b16.onnx" ] || $X vit-b16 --out "$MODELS/vit-b16.onnx" > "$OUT/numerics/export-vit.txt" 2>&1 &
wait
TOKENS16="--input-shape input_ids=1x16 --input-shape attention_mask=1x16"
cases=(
  "llama_tiny|workloads/llama_tiny.onnx|$TOKENS16"
  "gpt2_tiny|workloads/gpt2_tiny.onnx|$TOKENS16"
  "vit_tiny|workloads/vit_tiny.onnx|--input-shape input=1x3x32x32"
  "llama-2l|$MODELS/llama-2l.onnx|--input-shape input_ids=1x512 --input-shape attention_mask=1x512"
  "gpt2|$MODELS/gpt2.onnx|--input-shape input_ids=1x128 --input-shape attention_mask=1x128"
  "vit-b16|$MODELS/vit-b16.onnx|--input-shape input=1x3x224x224"
)
check() {  # name path shapes precision
  local started=$SECONDS
  timeout 300 python3 -m kb_tvm.cli tune "$2" --target "$T" $3 --precision "$4" --check-numerics-only \
    > "$OUT/numerics/$1-$4.txt" 2>&1
  echo "$1 $4: exit $? in $((SECONDS - started)) s: $(grep -v Warning "$OUT/numerics/$1-$4.txt" | tail -1)"
}
for precision in fp32 fp16; do
  for case in "${cases[@]}"; do
    IFS='|' read -r name path shapes <<< "$case"
    [[ "$name" =~ ${ONLY:-.} ]] || continue
    check "$name" "$path" "$shapes" "$precision" &
    while [ "$(jobs -r | wc -l)" -ge 4 ]; do sleep 1; done
  done
done > "$OUT/numerics/summary.txt"
wait
cat "$OUT/numerics/summary.txt" "$OUT"/numerics/export-*.txt
