"""One task's coarse-to-fine, budget-aware search. MetaSchedule objects come in through
`TaskSearch`; the decisions themselves live in `kb_tvm.decisions`.

Coarse phase: sample each design space without measuring, sort valid samples into regions
(design space x template), measure a few per region, keep the best regions.
Fine phase: mutate the best measured candidates of the kept regions (plus fresh samples
while exploring), score each proposal by expected gain per predicted second, measure the
best; re-measure the top few; near the end refine only the best; stop when it stops paying.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import decisions
from .budget import TuningBudget
from .decision_log import DecisionLog
from .measure.pipeline import OUR_BUGS
from .measure.targets import build_config
from .schedule_props import schedule_properties
from .surrogate import EnsembleCostModel, PriorModel
from .templates import Template
from .tensor_core_tiles import WmmaLimits, draw_tiles
from .warm_start import Borrowed, replay_adapted, sketch_kinds

# what a candidate's feature vector holds (MetaSchedule's per-store features summed and
# maxed over stores, then the schedule properties); the experience library keys rows by it
FEATURE_VERSION = "kb1:per-store-sum-max+props"


@dataclass(frozen=True)
class SearchOptions:
    """Knobs of the search; KBSearch validates them. Defaults are what the benchmarks ran."""

    # coarse phase: samples drawn per design space, measurements per region before ranking,
    # the budget share after which ranking happens anyway, and how many regions go on
    coarse_samples_per_space: int = 256
    coarse_trials_per_region: int = 2
    coarse_max_fraction: float = 0.25
    keep_regions: int = 3
    # fine phase: proposals scored per measurement slot; the measured best that parent them
    # (fewer once refining); generations of mutation under the cost model between batches and
    # the population each keeps
    proposals_per_trial: int = 6
    elites: int = 8
    refine_elites: int = 2
    generations: int = 3
    population: int = 32
    # share of proposals that are fresh samples at the budget's start (falls to 0 at its end),
    # and the least exploration weight scoring keeps until refining
    explore_share: float = 0.3
    min_exploration: float = 0.1
    # the best few are measured again (up to remeasure_times each), at most this share of a batch
    remeasure_top: int = 3
    remeasure_times: int = 3
    remeasure_share: float = 0.125
    refine_after: float = 0.85
    min_total_gain: float = 0.005
    patience: int = 3
    # the search's own time: sampling at most this share of the budget, proposing at most this
    # share of the batch it feeds (both at least a second or two)
    sampling_time_share: float = 0.05
    proposing_time_share: float = 0.1
    seed: int | None = None
    # same seed, same draws: samples replayed from explicit seeds in a fixed order, and no
    # time limit on how many are drawn (slower sampling; the budget itself stays wall-clock)
    repeatable: bool = False
    # WMMA tensor-core sketches: draw tile decisions that fit the GPU's warps and shared memory
    # (tensor_core_tiles.py) instead of uniformly as MetaSchedule does (~95% of those fail)
    fitted_tiles: bool = True


@dataclass
class Candidate:
    sch: object  # tvm.s_tir.Schedule, postprocessed
    space: int
    regions: tuple[str, ...]
    props: dict[str, float]
    keys: list[str]
    origin: str
    features: np.ndarray | None = None
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    error: str | None = None
    verified: bool = True  # lowered cleanly (or needs no check); evolved children: not until chosen
    generation: int = 0  # mutation steps from a sampled, borrowed or recorded schedule

    @property
    def measured(self) -> bool:
        return bool(self.latencies)

    @property
    def latency(self) -> float:
        return float(np.median(self.latencies)) if self.latencies else math.inf


class TaskSearch:
    """State and loop of KBSearch for one task (one TuneContext)."""

    def __init__(self, *, context, design_spaces, templates: list[Template], budget: TuningBudget,
                 options: SearchOptions, max_trials: int, trials_per_batch: int, log: DecisionLog,
                 borrowed: list[Borrowed] | None = None, prior: PriorModel | None = None) -> None:
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        self.ctx = context
        self.spaces = list(design_spaces)
        self.templates = templates
        self.budget = budget
        self.opt = options
        self.max_trials = max_trials
        self.trials_per_batch = trials_per_batch
        self.log = log
        self.rng = np.random.default_rng(options.seed)
        self.borrowed = list(borrowed or [])
        self.model = EnsembleCostModel(seed=int(self.rng.integers(1 << 30)), prior=prior)
        costs = self.borrowed[0].costs if self.borrowed else None  # the nearest workload's
        self.cost = decisions.MeasurementCost() if costs is None else decisions.MeasurementCost(
            costs["per_candidate_s"], per_batch=costs["per_batch_s"], per_run_second=costs["per_run_second"])
        self.won_before = frozenset(name for b in self.borrowed for name in b.regions_won[:1])
        self.pinned: list[Candidate] = []  # borrowed schedules: measured in the first batch
        self.failures = decisions.FailureModel()
        self.features = PerStoreFeature()
        self.postprocs = list(context.space_generator.postprocs)
        self.mutators = [(m, float(p)) for m, p in context.space_generator.mutator_probs.items()]
        self.num_cores = max(1, int(context.num_threads))
        self.seen: set[int] = set()
        self.dropped = {"postproc": 0, "duplicate": 0, "verify": 0}
        # GPU builds fail often (tensor-core spaces: most stock candidates); lowering without
        # codegen catches those failures in ~20 ms, far cheaper than a build + run slot
        self.verify = context.target.kind.name == "cuda"
        self.pass_config = build_config(context.target)  # lowering is verified as the builds run it
        self.workers = self.num_cores
        self.executor = ThreadPoolExecutor(self.workers, thread_name_prefix="kb-search")
        self._local = threading.local()
        self.samplers: dict[int, object] = {}  # design space -> ReplayTrace drawing its samples
        self.tile_plans: dict[int, tuple | None] = {}  # design space -> (extents, WmmaLimits) or None
        self.unfit_spaces: set[int] = set()  # sketches no tiling of which fits the GPU: dropped
        self.pool: list[Candidate] = []  # sampled in the coarse phase, not yet measured
        self.measured: list[Candidate] = []
        self.regions: dict[str, decisions.RegionStats] = {}
        self.kept_regions: list[str] = []
        self.phase = "coarse"
        self.trials = 0
        self.batches = 0
        self.low_gain_rounds = 0
        self.generations_run = 0  # of the last fine batch's evolution
        self.stop_reason: str | None = None
        self.in_flight: list[Candidate] = []
        self.batch_started = 0.0
        self.batch_predictions: list[float | None] = []
        self.batch_origins: list[str] = []
        self.spent_at_start = budget.spent  # a task may start late in a shared budget
        self.own_seconds = 0.0  # seconds of this task's own batches
        self.trajectory: list[list[float]] = []  # [own seconds, best latency s] per batch

    # ------------------------------------------------------------ the loop
    def next_batch(self) -> list[Candidate] | None:
        self.batch_started = time.monotonic()
        if self.stop_reason is None:
            if self.budget.exhausted:
                self.stop("budget spent")
            elif self.trials >= self.max_trials:
                self.stop(f"trial cap of {self.max_trials} reached")
        if self.stop_reason is not None:
            return None
        if not self.regions:
            self._sample_regions()
        preferred = min(self.trials_per_batch, self.max_trials - self.trials)
        n = decisions.batch_size(self.budget.remaining, self.cost, preferred=preferred,
                                 minimum=min(max(self.num_cores, preferred // 4), preferred))
        if not self.batches:
            n = decisions.warm_start_batch(len(self.pinned), self.cost, self.budget.remaining, n)
        if self.batches and decisions.overruns(self.budget.remaining, self.cost.batch_seconds(n)):
            self.stop(f"the next batch (~{self.cost.batch_seconds(n):.0f}s) would overrun the "
                       f"{self.budget.remaining:.0f}s left by more than half")
            return None
        if self.phase == "coarse" and self._coarse_done():
            self._keep_best_regions()
        batch = self._coarse_batch(n) if self.phase == "coarse" else self._fine_batch(n)
        if not batch:
            self.stop("no new valid candidate could be generated")
            return None
        self.in_flight = batch
        self.trials += len(batch)
        return batch

    def observe(self, results: list[tuple[float | None, str | None]]) -> None:
        """results[i] = (mean run seconds or None, error or None) for in_flight[i]."""
        seconds = time.monotonic() - self.batch_started
        improved_from = self.best.latency if self.best else math.inf
        rows = []
        for cand, (latency, error), predicted, origin in zip(
                self.in_flight, results, self.batch_predictions, self.batch_origins):
            failed = latency is None
            self.failures.observe(cand.keys, failed)
            if failed:
                cand.failures += 1
                cand.error = (error or "unknown error").strip().splitlines()[-1][:200]
            else:
                if not cand.measured:
                    self.measured.append(cand)
                cand.latencies.append(latency)
            for name in cand.regions:
                stats = self.regions.get(name)
                if stats is not None and origin != "remeasure":
                    if failed:
                        stats.failures += 1
                    else:
                        stats.measured_log_latencies.append(math.log(latency))
            rows.append({"origin": origin, "generation": cand.generation, "regions": list(cand.regions),
                         "predicted_ms": None if predicted is None else math.exp(predicted) * 1e3,
                         "measured_ms": None if failed else latency * 1e3, "error": cand.error if failed else None})
        ok = [r[0] for r in results if r[0] is not None]
        self.cost.observe_batch(len(results), float(sum(ok)), seconds)
        self._train_model()
        self.batches += 1
        self.own_seconds += seconds
        best = self.best
        if best is not None:
            self.trajectory.append([self.own_seconds, best.latency])
        self.log.write(
            "batch", phase=self.phase, batch=self.batches, trials=self.trials, seconds=seconds,
            candidates=rows, failed=sum(r[0] is None for r in results),
            best_ms=best.latency * 1e3 if best else None,
            improved=bool(best and best.latency < improved_from),
            cost_model={"per_batch_s": self.cost.per_batch, "per_candidate_s": self.cost.per_candidate,
                        "per_run_second": self.cost.per_run_second},
            budget_spent_s=self.budget.spent, budget_left_s=self.budget.remaining)

    @property
    def best(self) -> Candidate | None:
        return min(self.measured, key=lambda c: c.latency) if self.measured else None

    # ------------------------------------------------------------ coarse phase
    def _sample_regions(self) -> None:
        started = time.monotonic()
        # sampling is cheap, but never let it eat more than 5% of the budget (unless repeatable)
        deadline = math.inf if self.opt.repeatable else started + max(
            2.0, self.opt.sampling_time_share * self.budget.remaining)
        chunk = 8 * self.workers
        for space_index in range(len(self.spaces)):
            found, tries = 0, 0
            wanted = self.opt.coarse_samples_per_space
            while found < wanted and tries < 8 * wanted and time.monotonic() < deadline:
                asked = min(chunk, wanted - found)
                tries += asked
                made = self._sample_space(space_index, asked)
                self.pool += made
                found += len(made)
        self._borrow()
        self._extract_features(self.pool + self.pinned)
        for cand in self.pool + self.pinned:
            for name in cand.regions:
                self.regions.setdefault(name, decisions.RegionStats(name)).sampled += 1
        for cand in self.measured:  # measured before this run (start_from_records)
            for name in cand.regions:
                stats = self.regions.setdefault(name, decisions.RegionStats(name))
                stats.sampled += 1
                stats.measured_log_latencies.append(math.log(cand.latency))
        self.log.write(
            "coarse-sampled", design_spaces=len(self.spaces), templates=[t.name for t in self.templates],
            valid=len(self.pool), dropped=dict(self.dropped), seconds=time.monotonic() - started,
            regions={name: {"sampled": s.sampled} for name, s in self.regions.items()})

    def _borrow(self) -> None:
        """Replay the best schedules of similar workloads here, tiles fitted to this one's
        loops; those that apply are measured in the first batch."""
        if not self.borrowed:
            return
        kinds = [sketch_kinds(space.trace) for space in self.spaces]
        for lender in self.borrowed:
            jobs = []
            for trace in lender.traces:
                space = next((i for i, k in enumerate(kinds) if k == sketch_kinds(trace)), None)
                if space is not None:
                    jobs.append((trace, space, f"borrowed:{lender.entry_id}"))
            made = self._realize(jobs, adapt=True)
            self.pinned += made
            lender.used["schedules"] = {"offered": len(lender.traces), "same_sketch": len(jobs), "applied": len(made)}
        self.log.write("borrowed", entries=[
            {"entry": b.entry_id, "workload": b.workload_name, "distance": round(b.distance, 3),
             "best_ms": b.best_latency_s * 1e3, **b.used} for b in self.borrowed],
            prior_model=self.model.prior.source if self.model.prior is not None else None,
            regions_won_before=sorted(self.won_before),
            measurement_cost_from=self.borrowed[0].entry_id,
            cost_prior={"per_batch_s": self.cost.per_batch, "per_candidate_s": self.cost.per_candidate,
                        "per_run_second": self.cost.per_run_second})

    def start_from_records(self, records: list[tuple[object, float]]) -> int:
        """Schedules measured before (trace, latency s), e.g. the database's best of an
        interrupted run: replayed here as measured candidates, so they parent the fine phase
        and train the model without costing a measurement. How many applied."""
        kinds = [sketch_kinds(space.trace) for space in self.spaces]
        jobs, latencies = [], {}
        for trace, latency in records:
            space = next((i for i, k in enumerate(kinds) if k == sketch_kinds(trace)), None)
            if space is not None:
                latencies[f"database:{len(jobs)}"] = latency
                jobs.append((trace, space, f"database:{len(jobs)}"))
        for cand in self._realize(jobs):
            cand.latencies.append(latencies[cand.origin])
            self.measured.append(cand)
        self._extract_features(self.measured)
        self._train_model()
        self.log.write("from-database", offered=len(records), same_sketch=len(jobs), applied=len(self.measured),
                       best_ms=self.best.latency * 1e3 if self.best else None)
        return len(self.measured)

    def _coarse_done(self) -> bool:
        if not self.pool:
            return True
        if not self.batches:  # regions are ranked on measurements: at least one batch first
            return False
        if (self.budget.spent - self.spent_at_start) >= self.opt.coarse_max_fraction * self.budget.total:
            return True
        return all(s.trials >= self.opt.coarse_trials_per_region or not self._unmeasured(name)
                   for name, s in self.regions.items())

    def _unmeasured(self, region: str) -> list[Candidate]:
        return [c for c in self.pool if region in c.regions and not c.measured and not c.failures]

    def _coarse_batch(self, n: int) -> list[Candidate]:
        """Round-robin over the regions that still need measurements, best predicted first."""
        unmeasured = [c for c in self.pool if not c.measured and not c.failures]
        # one prediction over the pool, not one per region and round
        ranked = [unmeasured[i] for i in np.argsort(self._rank_keys(unmeasured))] if unmeasured else []
        # borrowed schedules first (alone when a batch's fixed cost is small: warm_start_batch)
        chosen: list[Candidate] = self.pinned[:n]
        self.pinned = self.pinned[len(chosen):]
        chosen_ids: set[int] = {id(c) for c in chosen}
        planned = {name: s.trials for name, s in self.regions.items()}
        while len(chosen) < n:
            needy = sorted((t, name) for name, t in planned.items() if t < self.opt.coarse_trials_per_region)
            progress = False
            for _, name in needy:
                if len(chosen) >= n:
                    break
                cand = next((c for c in ranked if name in c.regions and id(c) not in chosen_ids), None)
                if cand is None:
                    continue
                chosen.append(cand)
                chosen_ids.add(id(cand))
                for region in cand.regions:
                    planned[region] = planned.get(region, 0) + 1
                progress = True
            if not progress:
                break
        # a batch has a fixed cost: fill it with the best-predicted samples of any region
        chosen += [c for c in ranked if id(c) not in chosen_ids][: n - len(chosen)]
        self._plan(chosen)
        self.batch_origins = [c.origin for c in chosen]
        return chosen

    def _rank_keys(self, cands: list[Candidate]) -> np.ndarray:
        """Lower is better: predicted log-latency when the model knows something, else random."""
        if not self.model.informed:
            return self.rng.random(len(cands))
        mu, _ = self.model.predict(np.stack([c.features for c in cands]))
        return mu

    def _keep_best_regions(self) -> None:
        for name, stats in self.regions.items():
            rest = self._unmeasured(name)
            if rest and self.model.informed:
                stats.predicted_best_log_latency = float(np.min(self._rank_keys(rest)))
        ranked = decisions.rank_regions(list(self.regions.values()), keep=self.opt.keep_regions,
                                        won_before=self.won_before)
        self.kept_regions = [r.name for r, _, kept, _ in ranked if kept]
        if not self.kept_regions and self.best is not None:
            self.kept_regions = list(self.best.regions)
        self.log.write("regions", regions=[
            {"region": r.name, "score": score, "kept": kept, "why": why, "sampled": r.sampled,
             "measured": len(r.measured_log_latencies), "failed": r.failures,
             "best_ms": None if r.best_log_latency is None else math.exp(r.best_log_latency) * 1e3,
             "predicted_best_ms": None if r.predicted_best_log_latency is None
             else math.exp(r.predicted_best_log_latency) * 1e3}
            for r, score, kept, why in ranked])
        self.phase = "fine"
        self.pool = [c for c in self.pool if not c.measured and set(c.regions) & set(self.kept_regions)]

    # ------------------------------------------------------------ fine phase
    def _fine_batch(self, n: int) -> list[Candidate]:
        if self.budget.fraction_used >= self.opt.refine_after and self.phase != "refine":
            self.phase = "refine"
            self.log.write("phase", phase="refine", why=f"{self.opt.refine_after:.0%} of the budget used: "
                           "only local refinement of the best from here")
        remeasure = self._remeasure_slots(max(1, int(n * self.opt.remeasure_share)))
        proposals = self._evolve(self.opt.proposals_per_trial * n)
        if not proposals and not remeasure:
            return []
        feats = np.stack([c.features for c in proposals]) if proposals else np.zeros((0, 1))
        mu, sigma = self.model.predict(feats)
        p_fail = np.array([self.failures.probability(c.keys) for c in proposals])
        seconds = self.cost.predict(np.exp(mu), batch_size=n)
        best = math.log(self.best.latency) if self.best else float(np.min(mu, initial=0.0))
        explore = 0.0 if self.phase == "refine" else decisions.exploration_weight(self.budget.fraction_used)
        gain, per_second = decisions.score_proposals(mu, sigma, p_fail, seconds, best,
                                                     max(explore, self.opt.min_exploration))
        order = self._verified_first(proposals, np.argsort(-per_second), max(0, n - len(remeasure)))
        chosen = [proposals[i] for i in order]
        rate = float(gain[order].sum() / max(seconds[order].sum(), 1e-9)) if len(order) else 0.0
        self.log.write("proposals", phase=self.phase, proposed=len(proposals), chosen=len(chosen),
                       remeasure=len(remeasure), exploration=explore,
                       generations=self.generations_run,
                       expected_gain=float(gain[order].sum()) if len(order) else 0.0,
                       predicted_seconds=float(seconds[order].sum()) if len(order) else 0.0,
                       expected_gain_per_second=rate, dropped=dict(self.dropped),
                       p_fail_mean=float(p_fail.mean()) if len(p_fail) else 0.0,
                       avoided_decisions=self.failures.worst_keys())
        self._check_worth(rate)
        self._plan(chosen + remeasure, [float(mu[i]) for i in order] + [None] * len(remeasure))
        self.batch_origins = [c.origin for c in chosen] + ["remeasure"] * len(remeasure)
        return chosen + remeasure

    def _verified_first(self, proposals: list[Candidate], order: np.ndarray, wanted: int) -> list[int]:
        """The first `wanted` indices of `order` whose candidates lower cleanly. Evolved children
        are checked only here, when about to be measured (lowering costs ~20 ms each)."""
        chosen: list[int] = []
        start = 0
        while len(chosen) < wanted and start < len(order):
            chunk = [int(i) for i in order[start:start + max(2 * (wanted - len(chosen)), self.workers)]]
            start += len(chunk)
            todo = [i for i in chunk if not proposals[i].verified]
            for i, (_, reason) in zip(todo, self.executor.map(self._verify, [proposals[i].sch for i in todo])):
                proposals[i].verified = reason is None
                if reason is not None:
                    self.dropped[reason] += 1
                    self.failures.observe(proposals[i].keys, True)
            chosen += [i for i in chunk if proposals[i].verified][: wanted - len(chosen)]
        return chosen

    def _remeasure_slots(self, limit: int) -> list[Candidate]:
        top = sorted(self.measured, key=lambda c: c.latency)[: self.opt.remeasure_top]
        return [c for c in top if len(c.latencies) < self.opt.remeasure_times][:limit]

    def _evolve(self, count: int) -> list[Candidate]:
        """About `count` new candidates for the fine phase: fresh samples while exploring, and
        generations of mutation under the cost model. The first generation mutates the
        measured elites; each later one mutates the best of a population that holds the
        measured (by latency) and the children so far (by prediction), so the model leads the
        search several steps between measurements, as MetaSchedule's evolution does."""
        kept = set(self.kept_regions)
        ranked = sorted(self.measured, key=lambda c: c.latency)
        # parents: the best of the kept regions, and always the overall best
        elites = ranked[:1] + [c for c in ranked[1:] if set(c.regions) & kept]
        elites = elites[: self.opt.refine_elites if self.phase == "refine" else self.opt.elites]
        explore_share = 0.0 if self.phase == "refine" else self.opt.explore_share * (1.0 - self.budget.fraction_used)
        mutators = self.mutators
        if self.phase == "refine":  # small steps only
            mutators = [(m, p) for m, p in mutators if "TileSize" in str(m) or "Unroll" in str(m)] or mutators
        weights = np.array([p for _, p in mutators], dtype=float)
        weights /= weights.sum()
        # proposing is the search's own cost: a share of what the batch will cost
        deadline = math.inf if self.opt.repeatable else time.monotonic() + max(
            1.0, self.opt.proposing_time_share * self.cost.batch_seconds(count // self.opt.proposals_per_trial))
        # fresh samples: enough for the exploring share of the batch's slots to be chosen twice over
        slots = max(1, count // self.opt.proposals_per_trial)
        fresh = min(count, math.ceil(2 * explore_share * slots)) if elites else count
        proposals: list[Candidate] = []
        population = [(math.log(c.latency), c) for c in elites]
        generations = self.opt.generations if self.model.informed else 1
        per_generation = max(1, math.ceil((count - fresh) / generations))
        self.generations_run = 0
        for _ in range(generations if elites else 0):
            if time.monotonic() >= deadline:
                break
            children = self._mutate([c for _, c in population], per_generation, mutators, weights, deadline)
            self._extract_features(children)
            self.generations_run += 1
            if not children:
                continue
            proposals += children
            mu = self.model.predict(np.stack([c.features for c in children]))[0] if self.model.informed \
                else self.rng.random(len(children))
            population = sorted(population + list(zip(map(float, mu), children)),
                                key=lambda pair: pair[0])[: self.opt.population]
        explored = []
        while self.pool and len(explored) < fresh:  # coarse samples of the kept regions not yet measured
            explored.append(self.pool.pop(int(self.rng.integers(len(self.pool)))))
        if len(explored) < fresh:
            spaces = sorted({int(name.split("/")[0][1:]) for name in kept}) or list(range(len(self.spaces)))
            explored += self._sample_space(int(self.rng.choice(spaces)), fresh - len(explored))
        self._extract_features(explored)
        return proposals + explored

    def _mutate(self, parents: list[Candidate], count: int, mutators, weights, deadline: float) -> list[Candidate]:
        """Up to `count` new children of `parents` (better ranked, more often), postprocessed
        but not yet checked by lowering."""
        rank_weights = 1.0 / (1.0 + np.arange(len(parents)))
        rank_weights /= rank_weights.sum()
        children: list[Candidate] = []
        attempts = 0
        while len(children) < count and attempts < 4 * count and time.monotonic() < deadline:
            jobs = []
            tries = min(8 * self.workers, count - len(children))
            attempts += tries
            for _ in range(tries):
                parent = parents[self.rng.choice(len(parents), p=rank_weights)]
                mutator = mutators[self.rng.choice(len(mutators), p=weights)][0]
                try:  # an explicit seed: Mutator.apply would draw one from the OS
                    trace = mutator_apply(mutator, parent.sch.trace, int(self.rng.integers(1, 1 << 30)))
                except OUR_BUGS:
                    raise
                except Exception:  # noqa: BLE001 - a mutator may reject a trace; try another
                    trace = None
                if trace is not None:
                    jobs.append((trace, parent.space, f"mutate:{type(mutator).__name__}", parent.generation + 1))
            children += self._realize(jobs, verify=False)
        return children

    def _check_worth(self, rate: float) -> None:
        if self.phase == "coarse" or not self.model.trained:
            return
        if decisions.worth_continuing(rate, self.budget.remaining, self.opt.min_total_gain):
            self.low_gain_rounds = 0
            return
        self.low_gain_rounds += 1
        if self.low_gain_rounds >= self.opt.patience:
            self.stop(f"expected gain {rate:.2e}/s x {self.budget.remaining:.0f}s left < "
                       f"{self.opt.min_total_gain:.1%} for {self.low_gain_rounds} rounds")

    # ------------------------------------------------------------ candidates
    def _realize(self, jobs: list[tuple], adapt: bool = False,
                 tiles: list | None = None, verify: bool = True) -> list[Candidate]:
        """Replay (trace, space, origin[, generation]) jobs into postprocessed new candidates, checked by
        lowering unless `verify` is False (adapt: fit borrowed tile decisions to this workload;
        tiles: each job's SamplePerfectTile decisions, in trace order). The TVM work runs on
        `workers` threads (TVM releases the GIL)."""
        seeds = [int(v) for v in self.rng.integers(1, 1 << 30, size=len(jobs))]
        tiles = tiles or [None] * len(jobs)
        work = [(job[0], seed, adapt, tile, verify) for job, seed, tile in zip(jobs, seeds, tiles)]
        replayed = self.executor.map(self._replay, work)
        return self._admit([(sch, reason, job[1], job[2], job[3] if len(job) > 3 else 0, verify or not self.verify)
                            for (sch, reason), job in zip(replayed, jobs)])

    def _sample_space(self, space_index: int, count: int) -> list[Candidate]:
        """`count` random valid samples of one design space, drawn by MetaSchedule's own
        multi-threaded ReplayTrace (faster than replaying from Python), then verified. Replayed
        here from explicit seeds instead when repeatable (ReplayTrace's draws depend on which
        thread takes which sample) or when the tiles are fitted to the GPU."""
        from tvm.s_tir.meta_schedule.search_strategy import ReplayTrace
        from tvm.s_tir.schedule import Trace

        plan = self._tile_plan(space_index)
        if space_index in self.unfit_spaces:
            return []
        if plan is not None or self.opt.repeatable:
            tiles = None if plan is None else [draw_tiles(self.rng, *plan) for _ in range(count)]
            design = self.spaces[space_index].trace
            return self._realize([(Trace(design.insts, {}), space_index, "sample")] * count, tiles=tiles)

        sampler = self.samplers.get(space_index)
        if sampler is None:
            sampler = ReplayTrace(max_fail_count=64)
            sampler._initialize_with_tune_context(self.ctx)
            sampler.pre_tuning(1 << 30, count, [self.spaces[space_index]], None, None)
            self.samplers[space_index] = sampler
        drawn = sampler.generate_measure_candidates() or []
        self.dropped["postproc"] += max(0, count - len(drawn))  # ReplayTrace's own failures, at least
        checked = self.executor.map(self._verify, [c.sch for c in drawn])
        return self._admit([(sch, reason, space_index, "sample", 0, True) for sch, reason in checked])

    def _tile_plan(self, space_index: int):
        """(loop extents in fragments, WmmaLimits) when the space is MetaSchedule's WMMA sketch
        and fitted tiles are on, else None; a sketch no tiling of which fits the GPU goes into
        `unfit_spaces`. Logged once per space."""
        if space_index not in self.tile_plans:
            plan = wmma_tile_plan(self.spaces[space_index].trace, self.ctx) if self.opt.fitted_tiles else None
            if plan is not None:
                extents, limits = plan
                fits = draw_tiles(self.rng, extents, limits) is not None
                self.log.write("tile-plan", space=space_index, sketch="wmma", extents=list(extents),
                               max_warps=limits.max_warps, max_shared_bytes=limits.max_shared_bytes,
                               fits=fits, why=None if fits else "no tiling of this sketch fits the GPU's "
                               "warps and shared memory in 10000 draws: the sketch is dropped")
                if not fits:
                    self.unfit_spaces.add(space_index)
            self.tile_plans[space_index] = plan
        return self.tile_plans[space_index]

    def _verify(self, sch) -> tuple[object | None, str | None]:
        if self.verify and not lowers_cleanly(sch.mod, self.ctx.target, self.pass_config):
            return None, "verify"
        return sch, None

    def _admit(self, replayed) -> list[Candidate]:
        """Keep new valid schedules as candidates; count the dropped by reason."""
        from tvm_ffi import structural_hash

        made = []
        for sch, reason, space_index, origin, generation, verified in replayed:
            if reason is None:
                key = structural_hash(sch.mod)
                reason = "duplicate" if key in self.seen else None
                self.seen.add(key)
            if reason is not None:
                self.dropped[reason] += 1
                continue
            func = next(iter(sch.mod.functions.values()))
            props = schedule_properties(func, self.num_cores)
            matched = tuple(f"s{space_index}/{t.name}" for t in self.templates if t.matches(props))
            made.append(Candidate(sch=sch, space=space_index, regions=matched or (f"s{space_index}/unclassified",),
                                  props=props, keys=self._failure_keys(sch.trace, space_index, props), origin=origin,
                                  generation=generation, verified=verified))
        return made

    def _replay(self, job) -> tuple[object | None, str | None]:
        from tvm.s_tir.schedule import Schedule

        trace, seed, adapt, tiles, verify = job
        if not hasattr(self._local, "postprocs"):  # postprocs may keep state: one copy per thread
            self._local.postprocs = [p.clone() for p in self.postprocs]
        try:
            if adapt:  # a borrowed schedule, its tiles fitted to this workload
                sch = replay_adapted(trace, self.ctx.mod, seed)
                if sch is None:
                    return None, "postproc"
            else:
                sch = Schedule(self.ctx.mod, seed=seed, debug_mask="none", error_render_level="none")
                trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=_tiles_provider(tiles))
            sch.enter_postproc()  # marks what follows as postprocessing, which replays strip
            valid = all(p.apply(sch) for p in self._local.postprocs)
        except OUR_BUGS:
            raise
        except Exception:  # noqa: BLE001 - TVM rejected the sample: it is just dropped
            valid = False
        if not valid:
            return None, "postproc"
        return self._verify(sch) if verify else (sch, None)

    @staticmethod
    def _failure_keys(trace, space_index: int, props: dict[str, float]) -> list[str]:
        keys = []
        for index, inst in enumerate(trace.insts):
            decision = trace.get_decision(inst)
            if decision is not None:
                keys.append(f"s{space_index}:{index}:{inst.kind.name}={decision}")
        for name in ("threads_per_block", "vector_lanes", "unroll_max_step", "shared_buffers", "local_buffers"):
            if props[name]:
                keys.append(f"{name}~2^{round(math.log2(props[name]))}")
        return keys

    def _extract_features(self, cands: list[Candidate]) -> None:
        todo = [c for c in cands if c.features is None]
        if not todo:
            return
        mcs = [self.measure_candidate(c) for c in todo]
        for cand, feats in zip(todo, self.features.extract_from(self.ctx, mcs)):
            per_store = feats.numpy()
            props = np.log2(1.0 + np.array(list(cand.props.values())))
            cand.features = np.concatenate([per_store.sum(axis=0), per_store.max(axis=0), props])

    @staticmethod
    def measure_candidate(cand: Candidate):
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        func = next(iter(cand.sch.mod.functions.values()))
        return MeasureCandidate(cand.sch, ArgInfo.from_prim_func(func))

    def _plan(self, batch: list[Candidate], predictions: list[float | None] | None = None) -> None:
        if predictions is None:
            if batch and self.model.informed:
                predictions = [float(v) for v in self.model.predict(np.stack([c.features for c in batch]))[0]]
            else:
                predictions = [None] * len(batch)
        self.batch_predictions = predictions

    def _train_model(self) -> None:
        rows = [(c.features, math.log(lat)) for c in self.measured for lat in c.latencies[:1]]
        if rows:
            self.model.fit(np.stack([r[0] for r in rows]), np.array([r[1] for r in rows]))

    def experience(self, keep: int = 5) -> dict | None:
        """What this task's run teaches later ones: None if nothing was measured."""
        ranked = sorted(self.measured, key=lambda c: c.latency)
        if not ranked:
            return None
        rows = [(c.features, math.log(lat)) for c in self.measured for lat in c.latencies[:1]
                if c.features is not None]
        regions = list(ranked[0].regions) + [r for r in self.kept_regions if r not in ranked[0].regions]
        return {"best": [(c.sch.trace, c.latency) for c in ranked[:keep]], "trajectory": self.trajectory,
                "regions_won": regions, "seconds": self.own_seconds, "trials": self.trials,
                "costs": {"per_batch_s": self.cost.per_batch, "per_candidate_s": self.cost.per_candidate,
                          "per_run_second": self.cost.per_run_second},
                "samples": (FEATURE_VERSION, np.stack([r[0] for r in rows]), np.array([r[1] for r in rows]))
                if rows else None}

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.executor.shutdown(wait=False)
            best = self.best
            self.log.write("stop", reason=reason, trials=self.trials, batches=self.batches,
                           best_ms=best.latency * 1e3 if best else None,
                           best_regions=list(best.regions) if best else None,
                           best_measurements=len(best.latencies) if best else 0,
                           budget_spent_s=self.budget.spent, budget_left_s=self.budget.remaining)


def _tiles_provider(tiles):
    """A decision provider that gives the SamplePerfectTile instructions `tiles`, in order (the
    others keep their decision, or sample one where it is None); None when there are no tiles."""
    if tiles is None:
        return None
    given = iter(tiles)

    def decide(inst, inputs, attrs, decision):
        return list(next(given)) if inst.kind.name == "SamplePerfectTile" else decision

    return decide


def wmma_tile_plan(trace, context) -> tuple | None:
    """(i, j, k extents in fragments, WmmaLimits) if `trace` is MetaSchedule's WMMA tensor-core
    sketch (three SamplePerfectTile of 5, 5 and 3 levels, A staged in wmma.matrix_a), else None."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    tiles = [inst for inst in trace.insts if inst.kind.name == "SamplePerfectTile"]
    if [int(inst.attrs[0]) for inst in tiles] != [5, 5, 3]:
        return None
    if not any(inst.kind.name == "CacheRead" and str(inst.attrs[1]) == "wmma.matrix_a" for inst in trace.insts):
        return None
    extents = tuple(math.prod(int(f) for f in trace.get_decision(inst)) for inst in tiles)
    attrs = context.target.attrs
    first_input = ArgInfo.from_prim_func(next(iter(context.mod.functions.values())))[0]
    limits = WmmaLimits(max_warps=int(attrs["max_threads_per_block"]) // int(attrs["thread_warp_size"]),
                        max_shared_bytes=int(attrs["max_shared_memory_per_block"]),
                        input_bytes=max(1, tvm.runtime.DataType(str(first_input.dtype)).bits // 8),
                        max_innermost=int(tiles[0].attrs[1]))
    return extents, limits


def mutator_apply(mutator, trace, seed: int):
    """MetaSchedule's Mutator.apply with the seed given (its Python API always passes -1: the OS's)."""
    from tvm.s_tir.meta_schedule import _ffi_api

    return _ffi_api.MutatorApply(mutator, trace, seed)


def lowers_cleanly(mod, target, pass_config: dict | None = None) -> bool:
    """Run TVM's TIR lowering (no codegen) as the builder would, under `pass_config`: False
    where it fails."""
    import tvm
    from tvm.tirx.build import split_host_device_mods

    try:
        with tvm.transform.PassContext(config=pass_config) if pass_config else contextlib.nullcontext():
            host = target.host or tvm.target.Target("llvm")
            mod = tvm.tirx.transform.BindTarget(target.with_host(host))(mod)
            pipeline, finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
            host_mod, device_mods = split_host_device_mods(pipeline(mod))
            finalize_host()(host_mod)
            for device_mod in device_mods.values():
                finalize_device()(device_mod)
    except OUR_BUGS:
        raise
    except Exception:  # noqa: BLE001 - any lowering error means the build would fail
        return False
    return True
