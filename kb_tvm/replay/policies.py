"""Strategies that run in the replay environment. Each one spends the env's budget batch by
batch until the budget is gone or it stops itself.

- `rules`: kb's own search, unchanged (search/task.py's TaskSearch and the planner), fed by a
  candidate factory over the dataset instead of MetaSchedule: sketches stand for design spaces,
  the sketch is a candidate's region (templates are not recorded), mutation changes one decision
  to a value recorded at that place in the same sketch (then the env snaps it to a recorded
  schedule, see env.py).
- `evolutionary`: an emulation of MetaSchedule's EvolutionarySearch at its defaults: a population
  of the measured best and fresh samples, four generations of mutation scored by an XGBoost
  model, the best predicted measured, 5% at random.
- `random`: the dataset's uniform samples in random order (MetaSchedule's replay-trace).

Known bias: kb's and the evolutionary runs recorded mostly good schedules and their
neighbours, so snapped mutations find good schedules more easily than on the real space.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Container

import numpy as np

from ..decision_log import DecisionLog
from ..search.candidates import Candidate
from ..search.options import SearchOptions
from ..search.regions import Region
from ..search.task import TaskSearch
from ..surrogate import PARAMS
from .env import Query, ReplayEnv


def default_batch(env: ReplayEnv) -> int:
    """The batch size tune-op uses on the dataset's target."""
    return 64 if env.dataset.target_kind == "cuda" else 16


class ReplayPolicy(abc.ABC):
    """A strategy the replay can run; `run` spends the env's budget (or stops earlier)."""

    name = "policy"

    @abc.abstractmethod
    def run(self, env: ReplayEnv, *, seed: int) -> None:
        ...


class RandomPolicy(ReplayPolicy):
    name = "random"

    def run(self, env: ReplayEnv, *, seed: int) -> None:
        rng = np.random.default_rng(seed)
        uniform = env.uniform_indices()
        order = [uniform[i] for i in rng.permutation(len(uniform))]
        n = default_batch(env)
        while order and not env.budget.exhausted:
            env.measure([env.query(int(i)) for i in order[:n]])
            del order[:n]


class EvolutionaryPolicy(ReplayPolicy):
    """MetaSchedule's EvolutionarySearch defaults: population 512, 20% of it the measured best,
    4 generations, mutation probability 0.85, 5% of each batch at random."""

    name = "evolutionary"

    def __init__(self, *, population: int = 512, measured_share: float = 0.2, generations: int = 4,
                 mutate_prob: float = 0.85, eps_greedy: float = 0.05) -> None:
        self.population, self.measured_share, self.generations = population, measured_share, generations
        self.mutate_prob, self.eps_greedy = mutate_prob, eps_greedy

    def run(self, env: ReplayEnv, *, seed: int) -> None:
        rng = np.random.default_rng(seed)
        values = _values_by_place(env)
        uniform = env.uniform_indices()
        measured: dict[tuple, tuple[Query, float | None]] = {}
        n = default_batch(env)
        while not env.budget.exhausted:
            model = _fit(measured)
            ok = sorted(((lat, q) for q, lat in measured.values() if lat is not None), key=lambda t: t[0])
            population = [q for _, q in ok[: int(self.population * self.measured_share)]]
            population += [env.query(uniform[int(i)]) for i in rng.integers(len(uniform), size=self.population - len(population))]
            for _ in range(self.generations):
                scores = _predict(model, population, rng)
                weights = np.exp(-(scores - scores.min()))  # better predicted, more often a parent
                parents = rng.choice(len(population), size=len(population), p=weights / weights.sum())
                population = [(rng.random() < self.mutate_prob and _mutate(env, population[i], values, rng, avoid=measured))
                              or population[i] for i in parents]
            fresh = {}
            for q in population:
                key = (q.sketch, q.decisions)
                if key not in measured:
                    fresh[key] = q
            candidates = list(fresh.values())
            if not candidates:
                candidates = [env.query(int(i)) for i in rng.permutation(env.dataset.size)
                              if (env.dataset.points[i].sketch, env.dataset.points[i].decisions) not in measured]
                if not candidates:
                    return  # every recorded schedule measured
            order = list(np.argsort(_predict(model, candidates, rng), kind="stable"))
            greedy = order[: n - max(1, round(n * self.eps_greedy))]
            taken = set(greedy)
            rest = [i for i in order if i not in taken]
            chosen = greedy + [rest[j] for j in rng.permutation(len(rest))[: n - len(greedy)]]
            batch = [candidates[i] for i in chosen]
            for q, outcome in zip(batch, env.measure(batch)):
                measured[(q.sketch, q.decisions)] = (q, outcome.latency_s)


class RulesPolicy(ReplayPolicy):
    """kb's search as it runs on a GPU or CPU, on the dataset; `steer`: a meta-policy choosing
    its macro-actions (the agent wing's; None: the rules alone); `outside_best_s`: a latency the
    task already has outside the dataset's space (as a kernel family gives tune-op);
    `trials_per_batch`: candidates a batch (default: tune-op's on the dataset's target)."""

    name = "rules"

    def __init__(self, *, options: SearchOptions | None = None, steer=None, outside_best_s: float | None = None,
                 trials_per_batch: int | None = None) -> None:
        if trials_per_batch is not None and trials_per_batch < 1:
            raise ValueError(f"trials_per_batch={trials_per_batch!r}: at least 1")
        self.options = options
        self.steer = steer
        self.outside_best_s = outside_best_s
        self.trials_per_batch = trials_per_batch

    def run(self, env: ReplayEnv, *, seed: int) -> None:
        task = self.search(env, seed=seed)
        while (batch := task.next_batch()) is not None:
            outcomes = env.measure([c.sch for c in batch])
            task.observe([(o.latency_s, o.error) for o in outcomes])

    def search(self, env: ReplayEnv, *, seed: int) -> TaskSearch:
        """kb's search on the env, to be stepped: `next_batch()`, `env.measure`, `observe`."""
        options = self.options or SearchOptions()
        options = SearchOptions(**{**vars(options), "seed": seed, "repeatable": True})
        self.events: list[dict] = []  # the decision log
        log = DecisionLog(None, listener=self.events.append)
        factory = ReplayFactory(env, rng=np.random.default_rng(seed))
        return TaskSearch(context=None, design_spaces=[], templates=[], budget=env.budget, options=options,
                          max_trials=10**9, trials_per_batch=self.trials_per_batch or default_batch(env), log=log,
                          factory=factory,
                          clock=lambda: env.seconds, steer=self.steer, outside_best_s=self.outside_best_s)


class ReplayFactory:
    """TaskSearch's candidate factory over a dataset (see search/candidates.py for the real
    one). A candidate's `sch` holds its Query."""

    def __init__(self, env: ReplayEnv, *, rng: np.random.Generator) -> None:
        self.env = env
        self.rng = rng
        self.spaces = list(env.dataset.sketches)
        self.templates: list = []
        self.workers = 1
        self.num_cores = env.dataset.builders
        self.dropped = {"duplicate": 0}
        self.categorical_bans = _NoBans()
        self.values = _values_by_place(env)
        self._uniform = {s: [i for i in env.uniform_indices() if env.dataset.points[i].sketch == s]
                         for s in self.spaces}
        self._sampled: set[tuple] = set()  # samples handed out: the search keeps those it does not measure
        self._round, self._proposed = -1, set()

    def seen(self) -> _Taken:
        """What a proposal may not repeat: the schedules measured or sampled, and the mutations
        proposed since the last measurement. A mutation proposed but not measured may come again
        in a later round, as one would from a real space, too large to exhaust."""
        if self.env.trials != self._round:
            self._round, self._proposed = self.env.trials, set()
        return _Taken((self.env.measured_keys, self._sampled, self._proposed))

    def close(self) -> None:
        pass

    def sample(self, space_index: int, count: int) -> list[Candidate]:
        seen, keys = self.seen(), self.env.dataset.keys
        left = [i for i in self._uniform[self.spaces[space_index]] if keys[i] not in seen]
        made = []
        while left and len(made) < count:
            index = left.pop(int(self.rng.integers(len(left))))
            cand = self._candidate(self.env.query(index), "sample", 0)
            if cand is not None:
                made.append(cand)
        return made

    def mutate(self, parents: list[Candidate], count: int, *, small_steps: bool, deadline: float) -> list[Candidate]:
        made, tries = [], 0
        while parents and len(made) < count and tries < 8 * count:
            tries += 1
            parent = parents[min(int(self.rng.exponential(len(parents) / 3)), len(parents) - 1)]  # better, more often
            child = _mutate(self.env, parent.sch, self.values, self.rng, small_steps=small_steps, avoid=self.seen())
            cand = None if child is None else self._candidate(child, "mutation", parent.generation + 1)
            if cand is not None:
                made.append(cand)
        return made

    def known_good(self) -> list[Candidate]:
        return []  # dlight's schedules are not in the datasets

    def replay_traces(self, traces: list, origin: str, *, adapt: bool) -> tuple[list[Candidate], int]:
        return [], 0

    def extract_features(self, cands: list[Candidate]) -> None:
        pass  # recorded (or the nearest recorded neighbour's)

    def verified_first(self, proposals: list[Candidate], order, wanted: int) -> tuple[list[int], list[Candidate]]:
        return [int(i) for i in order[:wanted]], []  # failures show when measured

    def _candidate(self, query: Query, origin: str, generation: int) -> Candidate | None:
        key = (query.sketch, query.decisions)
        seen = key in self.seen()
        if seen or query.features is None:
            self.dropped["duplicate"] += seen
            return None
        (self._sampled if origin == "sample" else self._proposed).add(key)
        space = self.spaces.index(query.sketch)
        return Candidate(sch=query, space=space, regions=(Region(space, "sketch").name,), props={},
                         keys=[f"{inst}={value}" for inst, value in query.decisions], origin=origin,
                         features=query.features, generation=generation)


class _Taken:
    """Keys in any of some sets, asked without building their union (asked per proposal)."""

    def __init__(self, sets: tuple[set, ...]) -> None:
        self.sets = sets

    def __contains__(self, key) -> bool:
        for taken in self.sets:  # a loop, not any(): asked millions of times in a replay
            if key in taken:
                return True
        return False


class _NoBans:
    @staticmethod
    def banned() -> list:
        return []


# the agent's policy (kb's search steered by a trained agent) is the agent wing's `agent_policy`: the
# agent is built on the replay, so the replay does not import it
POLICIES = {"rules": RulesPolicy, "evolutionary": EvolutionaryPolicy, "random": RandomPolicy}


def _values_by_place(env: ReplayEnv) -> dict[tuple[str, int], list[str]]:
    """The values recorded at each decision of each sketch, in first-seen order."""
    values: dict[tuple[str, int], list[str]] = {}
    for p in env.dataset.points:
        for inst, value in p.decisions:
            seen = values.setdefault((p.sketch, inst), [])
            if value not in seen:
                seen.append(value)
    return values


def _mutate(env: ReplayEnv, parent: Query, values: dict, rng: np.random.Generator, *,
            small_steps: bool = False, avoid: Container = frozenset()) -> Query | None:
    """The parent with one decision changed to another value recorded there (small steps: the
    next recorded value in first-seen order, a stand-in for a neighbouring tile), as the env
    gives it (snapped); None: nothing new to give (keys in `avoid` are taken)."""
    places = [(i, inst) for i, (inst, _) in enumerate(parent.decisions) if len(values.get((parent.sketch, inst), ())) > 1]
    if not places:
        return None
    position, inst = places[int(rng.integers(len(places)))]
    options = values[(parent.sketch, inst)]
    current = options.index(parent.decisions[position][1]) if parent.decisions[position][1] in options else 0
    if small_steps:
        step = int(rng.choice([-1, 1]))
        new = options[(current + step) % len(options)]
    else:
        new = options[(current + 1 + int(rng.integers(len(options) - 1))) % len(options)]
    decisions = parent.decisions[:position] + ((inst, new),) + parent.decisions[position + 1:]
    return env.lookup(parent.sketch, decisions, avoid)


def _fit(measured: dict):
    rows = [(q.features, math.log(lat)) for q, lat in measured.values() if lat is not None and q.features is not None]
    if len(rows) < 8:
        return None
    import xgboost as xgb

    data = xgb.DMatrix(np.stack([r[0] for r in rows]), label=np.array([r[1] for r in rows]))
    return xgb.train(PARAMS, data, num_boost_round=50)


def _predict(model, queries: list[Query], rng: np.random.Generator) -> np.ndarray:
    """Predicted log-latency (lower is better); random before the model has data."""
    if model is None or not queries:
        return rng.random(len(queries))
    width = model.num_features()
    feats = np.stack([q.features if q.features is not None else np.zeros(width) for q in queries])
    return model.inplace_predict(feats)
