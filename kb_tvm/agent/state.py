"""What the agent sees of a task's search before each fine-phase batch: plain numbers read off
the TaskSearch (search/task.py) and its planner, each roughly within [0, 1]."""

from __future__ import annotations

import math

import numpy as np

FEATURES = (
    "fraction_used",  # of the task's budget (its own clock where the budget is shared)
    "log_trials",  # log1p(trials) / 10
    "stale_batches",  # batches since the best last improved, / 10, at most 1
    "recent_gain",  # log(best 3 batches ago / best now)
    "total_gain",  # log(first best / best now)
    "spread",  # log(median measured latency / best): how much the landscape varies, at most 2
    "model_sigma",  # the cost model's mean uncertainty over the last proposals (log-latency)
    "expected_gain_left",  # last proposals' expected gain per second x seconds left, at most 1
    "failure_rate",  # of everything measured
    "seconds_per_candidate",  # what one measurement costs, in % of the budget
    "regions_kept",  # kept regions / regions
)


def observe(task) -> np.ndarray:
    plan, budget = task.plan, task.budget
    bests = [b for _, b in task.trajectory]
    latencies = [c.latency for c in task.measured]
    stale = 0
    for earlier in reversed(bests[:-1]):
        if earlier > bests[-1]:
            break
        stale += 1
    recent = math.log(bests[-4] / bests[-1]) if len(bests) >= 4 else (math.log(bests[0] / bests[-1]) if bests else 0.0)
    total = math.log(bests[0] / bests[-1]) if bests else 0.0
    values = {
        "fraction_used": budget.fraction_used,
        "log_trials": math.log1p(plan.trials) / 10.0,
        "stale_batches": min(stale, 10) / 10.0,
        "recent_gain": recent,
        "total_gain": total,
        "spread": min(2.0, math.log(float(np.median(latencies)) / min(latencies))) if latencies else 0.0,
        "model_sigma": plan.last_sigma,
        "expected_gain_left": min(1.0, plan.last_rate * budget.remaining),
        "failure_rate": plan.failures.failures / plan.failures.trials if plan.failures.trials else 0.0,
        "seconds_per_candidate": 100.0 * plan.cost.per_candidate / max(budget.total, 1e-9),
        "regions_kept": len(plan.kept_regions) / max(len(plan.regions), 1),
    }
    return np.array([values[name] for name in FEATURES], dtype=float)
