#!/bin/bash
# On the H200, after check_numerics_h200.sh exported the models: kb-tvm tune of the 2-layer
# TinyLlama-sized decoder (seq 512) in fp16 within BUDGET (default 4m), then what users would
# otherwise run on the same GPU: PyTorch eager fp32/fp16 and torch.compile max-autotune fp16.
# Writes $OUT/llama-kb/ (report.json, report.md, log.txt) and $OUT/torch-llama.json.
set -u
T='{"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32, "registers_per_block": 65536, "host": {"kind": "llvm"}}'
MODELS=${MODELS:-/tmp/kb-models}
mkdir -p "$OUT/llama-kb"
python3 -m kb_tvm.cli tune "$MODELS/llama-2l.onnx" --target "$T" --precision fp16 --budget "${BUDGET:-4m}" \
  --input-shape input_ids=1x512 --input-shape attention_mask=1x512 --work-dir /tmp/llama-kb --no-experience \
  > "$OUT/llama-kb/log.txt" 2>&1
echo "kb exit $?"
cp /tmp/llama-kb/report.json /tmp/llama-kb/report.md "$OUT/llama-kb/" 2>/dev/null
grep -v Warning "$OUT/llama-kb/log.txt" | tail -25
timeout 240 python3 -m workloads.torch_baselines llama --layers 2 --seq 512 --out "$OUT/torch-llama.json" > /dev/null 2>&1
echo "torch exit $?"; cat "$OUT/torch-llama.json" 2>/dev/null | grep -A6 latency_ms
