#!/usr/bin/env bash
# Issue 13 after the fine phase's fallback and the exact value trees, on this 2-core VM (replays
# need no GPU): the shipped agent and the rules on the held-out datasets; the agent retrained as
# it was on the H200 (31 datasets, 3 episodes each, 240 s); both agents and the rules on the
# training datasets (where the shipped agent is chosen), then the retrained one held out.
set -eu
out=bench-results/replay-2
mkdir -p $out
python -m kb_tvm.bench_replay --datasets datasets --policies agent,rules,evolutionary,random --budget 240s \
    --seeds 3 --out $out/heldout-shipped-agent.json > $out/heldout-shipped-agent.log 2>&1
python -m kb_tvm.cli train-agent --datasets datasets --budget 240s --episodes 3 --jobs 2 \
    --out $out/agent-exact.json > $out/train-agent.log 2>&1
python -m kb_tvm.bench_replay --datasets datasets --training --policies agent,rules --seeds 1 \
    --out $out/training-shipped-agent.json > $out/training-shipped-agent.log 2>&1
python -m kb_tvm.bench_replay --datasets datasets --training --policies agent --agent $out/agent-exact.json \
    --seeds 1 --out $out/training-agent-exact.json > $out/training-agent-exact.log 2>&1
python -m kb_tvm.bench_replay --datasets datasets --policies agent --agent $out/agent-exact.json --seeds 3 \
    --out $out/heldout-agent-exact.json > $out/heldout-agent-exact.log 2>&1
