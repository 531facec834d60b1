#!/usr/bin/env bash
# Issue 8's H200 outcome runs on the fp16 tensor-core space (2 GPUs, side by side, 16 cores each):
# kb on kb's pipeline (GPU 0) and stock MetaSchedule on its own (GPU 1), 240 s each.
# On the device (warm machine): bash bench-results/h200-issue8c.sh
set -u
out=${OUT:-/tmp/out}
run() {  # gpu cpus strategy pipeline
    local label="gemm-4096-fp16-$3-$4"
    CUDA_VISIBLE_DEVICES=$1 taskset -c "$2" timeout 420 python3 -m kb_tvm.cli tune-op gemm-4096-fp16 --budget 240s \
        --target cuda --strategy "$3" --pipeline "$4" --no-experience --seed 1 --work-dir "/tmp/w/$label" \
        --json-out "$out/$label.json" > "/tmp/$label.log" 2>&1
    grep -v "INFO" "/tmp/$label.log" | head -n 3 > "$out/$label.txt"
    grep -v "INFO" "/tmp/$label.log" | tail -n 4 >> "$out/$label.txt"
    cp /tmp/w/"$label"/kb_logs/*.jsonl "$out/$label-log.jsonl" 2>/dev/null
}
run 0 0-15 kb kb &
run 1 16-31 evolutionary stock &
wait
tail -n 3 "$out"/*.txt
