"""Made-up replay datasets for the replay and agent tests: one sketch of 144 schedules whose
latency is a known function of their decisions."""

import itertools
import json

import numpy as np

from kb_tvm.replay import Dataset, Point

TILES = ["[1,64]", "[2,32]", "[4,16]", "[8,8]", "[16,4]", "[32,2]"]
UNROLL = ["0", "16", "64", "512"]


def trace_of(decisions):
    return [[], [[inst, json.loads(value)] for inst, value in decisions]]


def made_up(latency, *, build_s=0.5, run_s=0.25, per_batch_s=1.0, fail=lambda d: False, strategies=("random",)):
    """Sketch "a": two tile decisions and an unroll; features one-hot of the decisions, so a
    cost model can learn `latency` (seconds, from the three value indices)."""
    points = []
    for i, j, u in itertools.product(range(len(TILES)), range(len(TILES)), range(len(UNROLL))):
        decisions = ((2, TILES[i]), (4, TILES[j]), (7, UNROLL[u]))
        features = np.zeros(len(TILES) * 2 + len(UNROLL))
        features[[i, len(TILES) + j, 2 * len(TILES) + u]] = 1.0
        failed = fail((i, j, u))
        points.append(Point(sketch="a", decisions=decisions, trace=trace_of(decisions), features=features,
                            latency_s=None if failed else latency(i, j, u), error="run: boom" if failed else None,
                            build_s=build_s, run_s=run_s, measurements=0 if failed else 1, strategies=strategies))
    return Dataset(name="made-up", workload="w", task="t", target=json.dumps({"kind": "llvm", "num-cores": 2}),
                   points=points, per_batch_s=per_batch_s, builders=2)


def bowl(i, j, u):  # best at tiles (3, 2), unroll 2: 10 us; smooth around it
    return 1e-5 * (1.0 + 0.3 * abs(i - 3) + 0.2 * abs(j - 2) + 0.1 * abs(u - 2))
