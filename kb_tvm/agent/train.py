"""Training the agent offline, in the replay environment: no GPU.

1. `collect`: kb's search runs on each training dataset while a behaviour policy picks its
   macro-actions at random (an action tends to repeat, so runs of one kind are seen; "stop" now
   and then). Each choice becomes a transition: the state, the action, the reward until the next
   choice, the next state.
2. `fit`: fitted Q-iteration with XGBoost: the value of an action is its reward plus the best
   value after it (stop: 0), fitted a few times over, one bootstrap ensemble per action.

Reward: the gain in log-latency of the best so far (a relative improvement), weighted by the
share of the budget still ahead when it came (a gain counts for every second it is held, as the
area under the anytime curve counts it), less `seconds_cost` for each whole budget of seconds
spent: an action that buys less than 1% per budget's worth of seconds is worth less than
stopping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..replay import ReplayEnv, RulesPolicy
from ..replay.dataset import Dataset
from .policy import VALUED, MacroPolicy
from .state import observe

# exact splits: a few hundred transitions, and a split halfway between two seen values; the
# histogram method splits at a seen value, so a state just short of the least seen spread (a
# curved space) was valued as a flat one's
PARAMS = {"max_depth": 3, "eta": 0.1, "subsample": 0.8, "tree_method": "exact", "objective": "reg:squarederror",
          "nthread": 1, "verbosity": 0}


@dataclass
class Transition:
    state: np.ndarray
    action: str
    reward: float
    next_state: np.ndarray | None  # None: the run ended after it (budget, or the next action stopped)


def collect(datasets: list[Dataset], *, budget: float, episodes: int, seed: int = 0, seconds_cost: float = 0.01,
            stop_prob: float = 0.03, repeat_prob: float = 0.5, jobs: int = 1) -> list[Transition]:
    """Transitions of `episodes` runs on each dataset, in order (`jobs` processes run them)."""
    work = [(dataset, budget, [seed, d_index, episode], seconds_cost, stop_prob, repeat_prob)
            for d_index, dataset in enumerate(datasets) for episode in range(episodes)]
    if jobs <= 1:
        return [t for job in work for t in _episode(job)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawned, not forked: a fork after xgboost's OpenMP threads ran in this process hangs the
    # child (the test suite hung so when the replay's tests ran before the agent's)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return [t for part in pool.map(_episode, work) for t in part]


def _episode(job) -> list[Transition]:
    dataset, budget, seed, seconds_cost, stop_prob, repeat_prob = job
    rng = np.random.default_rng(seed)
    env = ReplayEnv(dataset, budget=budget)  # kb's search, steered
    steps: list[tuple[np.ndarray, str, float, float]] = []  # state, action, seconds, best then

    def behaviour(task) -> str:
        if steps and rng.random() < repeat_prob:
            action = steps[-1][1]
        elif rng.random() < stop_prob:
            action = "stop"
        else:
            action = str(rng.choice(VALUED))
        steps.append((observe(task), action, env.seconds, env.best_s))
        return action

    RulesPolicy(steer=behaviour).run(env, seed=int(rng.integers(1 << 30)))
    return _transitions(steps, env, seconds_cost)


def _transitions(steps, env: ReplayEnv, seconds_cost: float) -> list[Transition]:
    out = []
    total = env.budget.total
    for t, (state, action, seconds, best) in enumerate(steps):
        if action == "stop":
            break
        following = steps[t + 1] if t + 1 < len(steps) else None
        best_after = following[3] if following else env.best_s
        seconds_after = following[2] if following else env.seconds
        gain = math.log(best / best_after) if math.isfinite(best) and math.isfinite(best_after) else 0.0
        held = max(0.0, 1.0 - seconds_after / total)  # the share of the budget the gain is held for
        reward = gain * held - seconds_cost * (seconds_after - seconds) / total
        ended = following is None or following[1] == "stop"
        out.append(Transition(state, action, reward, None if ended else following[0]))
    return out


def fit(transitions: list[Transition], *, iterations: int = 4, members: int = 3, rounds: int = 80, seed: int = 0,
        source: str = "", trained_on: list[str] | None = None) -> MacroPolicy:
    import xgboost as xgb

    if not transitions:
        raise ValueError("no transitions to train on: give datasets the search can run on")
    states = np.stack([t.state for t in transitions])
    actions = np.array([t.action for t in transitions])
    rewards = np.array([t.reward for t in transitions])
    has_next = np.array([t.next_state is not None for t in transitions])
    next_states = np.stack([t.next_state if t.next_state is not None else t.state for t in transitions])
    rng = np.random.default_rng(seed)
    targets = rewards.copy()
    policy = None
    for _ in range(iterations):
        models = {}
        for action in VALUED:
            rows = np.flatnonzero(actions == action)
            if not len(rows):
                raise ValueError(f"no transition took {action!r}: collect more episodes")
            models[action] = []
            for _m in range(members):
                sample = rng.choice(rows, size=len(rows))
                data = xgb.DMatrix(states[sample], label=targets[sample])
                models[action].append(xgb.train({**PARAMS, "seed": int(rng.integers(1 << 30))}, data, rounds))
        policy = MacroPolicy(models=models, low=np.percentile(states, 1, axis=0),
                             high=np.percentile(states, 99, axis=0), source=source, trained_on=trained_on)
        after = np.maximum(policy.mean_values(next_states).max(axis=1), 0.0)
        targets = rewards + np.where(has_next, after, 0.0)  # the best of continuing or stopping (0)
    return policy
