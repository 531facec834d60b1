#!/usr/bin/env bash
# The agent's margin swept again on the training datasets (one seed, 240 s), now that an early
# "refine" cannot stop a search for want of candidates: the agent AGENT with margins 1, 2, 4, 8.
#   bash bench-results/replay-2-margins.sh AGENT.json
set -eu
agent=$1
out=bench-results/replay-2
mkdir -p $out/margins
for m in 1 2 4 8; do
    python - "$agent" $m $out/margins/agent-m$m.json <<'PY'
import sys
from kb_tvm.agent import MacroPolicy
p = MacroPolicy.load(sys.argv[1])
MacroPolicy(models=p.models, low=p.low, high=p.high, source=p.source, trained_on=p.trained_on,
            margin=float(sys.argv[2])).save(sys.argv[3])
PY
    python -m kb_tvm.bench_replay --datasets datasets --training --policies agent --agent $out/margins/agent-m$m.json \
        --seeds 1 --out $out/margins/training-m$m.json > $out/margins/training-m$m.log 2>&1
done
