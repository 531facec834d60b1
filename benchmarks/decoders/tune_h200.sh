#!/bin/bash
# On the H200, after `. .kbdev/b/on-device.sh` (../shared/device/README.md):
#   tune_h200.sh export NAME...      exports the models to $MODELS (default /tmp/kb-models)
#   tune_h200.sh torch NAME...       what users would otherwise run on the same GPU: PyTorch eager fp32/fp16
#                                    and torch.compile max-autotune fp16 -> $OUT/torch-NAME.json
#   tune_h200.sh kb NAME...          kb-tvm tune NAME in fp16 within BUDGET (default 4m)
#                                    -> $OUT/NAME-kb/ (report.json, report.md, log.txt, kb_logs.tgz, candidates.jsonl)
#   tune_h200.sh stock NAME...       the same with stock MetaSchedule (--strategy evolutionary) -> $OUT/NAME-stock/
# NAME: llama-2l (2 TinyLlama-sized layers, seq 512), gpt2 (GPT-2 small, seq 128), vit-b16 (224²).
set -u
T='{"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32, "registers_per_block": 65536, "host": {"kind": "llvm"}}'
MODELS=${MODELS:-/tmp/kb-models}
shapes() {
  case $1 in
    llama-2l) echo "--input-shape input_ids=1x512 --input-shape attention_mask=1x512" ;;
    gpt2) echo "--input-shape input_ids=1x128 --input-shape attention_mask=1x128" ;;
    vit-b16) echo "--input-shape input=1x3x224x224" ;;
  esac
}
torch_args() {
  case $1 in
    llama-2l) echo "llama --layers 2 --seq 512" ;;
    gpt2) echo "gpt2 --seq 128" ;;
    vit-b16) echo "vit-b16" ;;
  esac
}
what=$1; shift
mkdir -p "$MODELS" "$OUT"
case $what in
  export)
    for name in "$@"; do  # the same sizes as the torch baselines
      python3 workloads/export_models.py $(torch_args "$name") --out "$MODELS/$name.onnx" > "$OUT/export-$name.txt" 2>&1 &
    done
    wait; tail -n 2 "$OUT"/export-*.txt ;;
  torch)
    for name in "$@"; do
      timeout 240 python3 -m workloads.torch_baselines $(torch_args "$name") --out "$OUT/torch-$name.json" \
        > "$OUT/torch-$name.txt" 2>&1
      echo "torch $name exit $?"; grep -A6 latency_ms "$OUT/torch-$name.json" 2>/dev/null
    done ;;
  kb|stock)
    strategy=$([ "$what" = kb ] && echo kb || echo evolutionary)
    for name in "$@"; do
      mkdir -p "$OUT/$name-$what"
      python3 -m kb_tvm.cli tune "$MODELS/$name.onnx" --target "$T" --precision fp16 --budget "${BUDGET:-4m}" \
        $(shapes "$name") --strategy "$strategy" --work-dir "/tmp/$name-$what" --no-experience \
        > "$OUT/$name-$what/log.txt" 2>&1
      echo "$what $name exit $?"
      # kernels.jsonl: every family variant measured, with its time or why it failed
      cp "/tmp/$name-$what/report.json" "/tmp/$name-$what/report.md" "/tmp/$name-$what/kernels.jsonl" "/tmp/$name-$what/candidates.jsonl" \
        "$OUT/$name-$what/" 2>/dev/null
      # the decision logs say where a task's seconds went (sampling, builds, runs)
      tar czf "$OUT/$name-$what/kb_logs.tgz" -C "/tmp/$name-$what" kb_logs 2>/dev/null
      grep -v Warning "$OUT/$name-$what/log.txt" | tail -25
    done ;;
esac
