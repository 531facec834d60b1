#!/usr/bin/env bash
# Issue 8's H200 outcome runs (one GPU, 16 cores): WORKLOAD at 240 s, one run after the other:
# kb on kb's pipeline, then stock MetaSchedule on its own pipeline, then (if asked) stock on kb's.
# On the device: . .kbdev/b/on-device.sh && bash bench-results/h200-outcomes.sh WORKLOAD RUN...
# with RUN as STRATEGY@PIPELINE, e.g. kb@kb evolutionary@stock
set -u
out=${OUT:-/tmp/out}
workload=$1; shift
for run in "$@"; do
    label="$workload-${run/@/-}"
    python3 -m kb_tvm.cli tune-op "$workload" --budget 240s --target cuda --strategy "${run%@*}" \
        --pipeline "${run#*@}" --no-experience --seed 1 --work-dir "/tmp/w/$label" --json-out "$out/$label.json" \
        > "/tmp/$label.log" 2>&1
    grep -v "INFO" "/tmp/$label.log" | head -n 3 > "$out/$label.txt"
    grep -v "INFO" "/tmp/$label.log" | tail -n 4 >> "$out/$label.txt"
    cp /tmp/w/"$label"/kb_logs/*.jsonl "$out/$label-log.jsonl" 2>/dev/null
done
tail -n 3 "$out"/*.txt
