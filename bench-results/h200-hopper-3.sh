#!/usr/bin/env bash
# Issue 12, third run on one H200: the template with and without a producer warpgroup (stages
# released by mbarrier arrivals instead of a block-wide sync after every K-tile), fp16 4096^3 and
# BERT-base's small-M shapes, beside cuBLAS. One process per variant; rows merged into results.json.
#   bash bench-results/h200-hopper-3.sh OUT_DIR
set -u
out=${1:-/root/hopper}; parts=/root/hopper-parts3; mkdir -p "$out" $parts
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
nvidia-smi -L > "$out/gpus.txt"
n=0
run() {
    n=$((n + 1))
    timeout 150 python3 -m kb_tvm.bench_hopper "$@" --out $parts/$n.json >> "$out/log.txt" 2>&1
    echo "$n $* rc=$?" >> "$out/progress.txt"
}
G="--shape 4096x4096x4096"
for tile in 128x256x4x2x8x0 128x256x4x2x8x1 128x256x3x2x8x1 256x128x4x2x8x1 128x128x5x1x8x1 128x128x4x2x8x1; do
    run --dtype float16 $G --tile $tile
done
run --dtype bfloat16 $G --tile 128x256x4x2x8x1
B="--shape 128x768x768 --shape 128x2304x768 --shape 128x3072x768 --shape 128x768x3072"
for tile in 64x64x5x1x8x0 64x64x5x1x8x1 64x32x5x1x8x1; do
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
