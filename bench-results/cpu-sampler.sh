#!/usr/bin/env bash
# The sampler fix (346a14e) and the fine phase's fallback (b5dd2ce) on this 2-core VM: kb vs
# stock MetaSchedule (its own LocalBuilder/LocalRunner) in one process, one after the other,
# twice; between the two, kb as it was before them (d1bcab9, a worktree at /tmp/kb-old:
# `git worktree add /tmp/kb-old d1bcab9`), kb only.
set -eu
out=bench-results/cpu-sampler
mkdir -p $out
here=$PWD
for run in 1 2; do
    python -m kb_tvm.bench --workload gemm-512 --workload conv2d-56x56x64 --budget 120s --target llvm \
        --out $out/run$run.json > $out/run$run.log 2>&1
    if [ $run = 1 ]; then
        (cd /tmp/kb-old && python -m kb_tvm.bench --workload gemm-512 --workload conv2d-56x56x64 --budget 120s \
            --target llvm --runs kb@kb --out $here/$out/before.json > $here/$out/before.log 2>&1)
    fi
done
