#!/usr/bin/env bash
# Issue 12, second run on one H200: the template's parameters around run 1's best (bench-results/
# h200-issue12/run1), bf16, and BERT-base's small-M shapes timed as device time (CUPTI), beside
# cuBLAS. One process per variant under a time limit; the rows merged into results.json.
#   bash bench-results/h200-hopper-2.sh OUT_DIR
set -u
out=${1:-/root/hopper}; parts=/root/hopper-parts; mkdir -p "$out" $parts
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > "$out/gpus.txt"
n=0
run() {  # dtype shape-args... --tile T
    n=$((n + 1))
    timeout 150 python3 -m kb_tvm.bench_hopper "$@" --out $parts/$n.json >> "$out/log.txt" 2>&1
    echo "$n $* rc=$?" >> "$out/progress.txt"
}
G=--shape\ 4096x4096x4096
for tile in 128x256x4x2x1x0 128x256x4x2x8x0 128x256x4x2x16x0 128x256x3x2x8x0 128x256x4x2x8x1 \
            256x128x4x2x8x0 256x128x3x2x8x0 128x128x4x1x8x0; do
    run --dtype float16 $G --tile $tile
done
run --dtype bfloat16 $G --tile 128x256x4x2x8x0
run --dtype float16 --out-dtype float32 $G --tile 128x256x4x2x8x0
B="--shape 128x768x768 --shape 128x2304x768 --shape 128x3072x768 --shape 128x768x3072"
for tile in 64x64x4x1x8x0 64x128x4x1x8x0 64x32x4x1x8x0 128x64x4x2x8x0 64x64x5x1x8x0; do
    run --dtype float16 $B --tile $tile
done
python3 - "$out" $parts <<'PY'
import json, pathlib, sys
out, parts = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = []
for p in sorted(parts.glob("*.json"), key=lambda p: int(p.stem)):
    d = json.loads(p.read_text())
    rows += [dict(r, dtype=d["dtype"]) for r in d["rows"]]
(out / "results.json").write_text(json.dumps({"rows": rows}, indent=1))
PY
