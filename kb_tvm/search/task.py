"""One task's coarse-to-fine, budget-aware search: the loop and its phases. The policy is the
planner's (planner.py, no TVM), the TVM mechanics the candidate factory's (candidates.py).

Coarse phase: sample each design space without measuring, sort valid samples into regions
(design space x template), measure a few per region, keep the best regions.
Fine phase: evolve the best measured candidates of the kept regions for a few generations under
the cost model (plus fresh samples while exploring), score each proposal by expected gain per
predicted second, measure the best; re-measure the top few. Refine phase: the fine phase near the
end of the budget, small steps from the very best only. Stop when it stops paying.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import numpy as np

from ..budget import TaskClock, TuningBudget
from ..decision_log import DecisionLog
from ..surrogate import EnsembleCostModel, PriorModel
from ..templates import Template
from ..warm_start import Borrowed
from . import decisions, stopping
from .candidates import FEATURE_VERSION, Candidate, CandidateFactory
from .options import SearchOptions
from .planner import Planner, unmeasured
from .regions import Region

# the region of outside_best_s's kernel in the coarse phase's ranking ("outside:NAME" given its name)
OUTSIDE_REGION = "outside"
# the least a task's coarse sampling may take (each design space's first chunk is drawn anyway):
# on a 2-core CPU the tiny BERT's GEMM tasks drew 134-310 valid samples in under 2 s with it
SAMPLING_FLOOR_S = 1.0


class TaskSearch:
    """State and loop of KBSearch for one task (one TuneContext): asks the current phase for a
    batch, tells the planner and the model what it measured."""

    def __init__(self, *, context, design_spaces, templates: list[Template], budget: TuningBudget | TaskClock,
                 options: SearchOptions, max_trials: int, trials_per_batch: int, log: DecisionLog,
                 borrowed: list[Borrowed] | None = None, prior: PriorModel | None = None,
                 factory=None, clock: Callable[[], float] = time.monotonic,
                 steer: Callable[[TaskSearch], str | None] | None = None,
                 outside_best_s: float | None = None, outside_name: str | None = None,
                 build_workers: int | None = None) -> None:
        """`factory`: where candidates come from (default: a CandidateFactory of `context`; the
        replay environment passes one over a recorded dataset); `clock`: seconds, the
        budget's (replay: simulated); `steer`: a meta-policy asked for a macro-action before
        each fine-phase batch (planner.MACRO_ACTIONS, or None to leave it to the rules);
        `outside_best_s`: the task's best latency measured outside MetaSchedule's space (a
        kernel family's kernel, `outside_name`): proposals gain only where they are expected to
        beat it, so the search stops once it no longer pays to try. `build_workers`: the builds
        the builder runs at once (None: one per core)."""
        if outside_best_s is not None and not outside_best_s > 0:
            raise ValueError(f"outside_best_s={outside_best_s!r}: seconds > 0, or None")
        self.outside_best_s = outside_best_s
        self.outside_name = OUTSIDE_REGION if outside_name is None else f"{OUTSIDE_REGION}:{outside_name}"
        self.ctx = context
        self.clock = clock
        self.steer = steer
        self.budget = budget
        self.opt = options
        self.log = log
        self.rng = np.random.default_rng(options.seed)
        self.borrowed = list(borrowed or [])
        self.model = EnsembleCostModel(seed=int(self.rng.integers(1 << 30)), prior=prior)
        costs = self.borrowed[0].costs if self.borrowed else None  # the nearest workload's
        cost = decisions.MeasurementCost() if costs is None else decisions.MeasurementCost(
            costs["per_candidate_s"], per_batch=costs["per_batch_s"], per_run_second=costs["per_run_second"])
        self.factory = factory or CandidateFactory(context=context, design_spaces=design_spaces,
                                                   templates=templates, options=options, rng=self.rng, log=log)
        self.plan = Planner(options=options, budget=budget, trials_per_batch=trials_per_batch, max_trials=max_trials,
                            num_cores=self.factory.num_cores, cost=cost, build_workers=build_workers,
                            won_before=frozenset(name for b in self.borrowed for name in b.regions_won[:1]))
        self.phase: CoarsePhase | FinePhase = CoarsePhase()
        self.pinned: list[Candidate] = []  # borrowed schedules: measured in the first batch
        self.pool: list[Candidate] = []  # sampled in the coarse phase, not yet measured
        self.measured: list[Candidate] = []
        self.sampled = False
        self.sample_tries = 0  # samples drawn by the coarse phase, valid or not
        self.stopped = False  # the stop is logged and the factory's threads released
        self.in_flight: list[Candidate] = []
        self.batch_started = 0.0
        self.batch_predictions: list[float | None] = []
        self.batch_origins: list[str] = []
        self.own_seconds = 0.0  # seconds of this task's own batches
        self.trajectory: list[list[float]] = []  # [own seconds, best latency s] per batch
        self.told_build_timeouts = False

    @property
    def best(self) -> Candidate | None:
        return min(self.measured, key=lambda c: c.latency) if self.measured else None

    @property
    def stop_reason(self) -> str | None:
        return self.plan.stop_reason

    def outside_region(self) -> decisions.RegionStats | None:
        """The kernel found outside MetaSchedule's space as a region the coarse phase ranks."""
        if self.outside_best_s is None:
            return None
        return decisions.RegionStats(name=self.outside_name, sampled=1,
                                     measured_log_latencies=[math.log(self.outside_best_s)])

    # ------------------------------------------------------------ the loop
    def next_batch(self) -> list[Candidate] | None:
        self.batch_started = self.clock()
        if self.plan.why_stop() is not None:
            self.stop(self.plan.stop_reason)
            return None
        if not self.sampled:
            self._sample_regions()
            why = stopping.empty_space(tries=self.sample_tries, valid=len(self.pool),
                                       known=len(self.pinned) + len(self.measured))
            if why is not None:
                self.stop(why)
                return None
        n = self.plan.batch_size(sum(c.origin.startswith("borrowed:") for c in self.pinned),
                                 probe=self.outside_best_s is not None)
        if n is None:
            self.stop(self.plan.stop_reason)
            return None
        self.phase = self.phase.next(self)
        if isinstance(self.phase, FinePhase):
            self.plan.check_bar(self.trajectory, self.outside_best_s)  # before a batch is proposed
            if self.plan.stop_reason is not None:
                self.stop(self.plan.stop_reason)
                return None
        if self.steer is not None and isinstance(self.phase, FinePhase):
            self.plan.direct(self.steer(self))
            if self.plan.stop_reason is not None:
                self.stop(self.plan.stop_reason)
                return None
            self.phase.name = "refine" if self.plan.refining else "fine"
        batch = self.phase.batch(self, n)
        if not batch:
            self.stop(stopping.NO_NEW_CANDIDATE)
            return None
        self.in_flight = batch
        self.plan.trials += len(batch)
        return batch

    def observe(self, results: list[tuple[float | None, str | None]]) -> None:
        """results[i] = (mean run seconds or None, error or None) for in_flight[i]."""
        seconds = self.clock() - self.batch_started
        improved_from = self.best.latency if self.best else math.inf
        rows = []
        for cand, (latency, error), predicted, origin in zip(
                self.in_flight, results, self.batch_predictions, self.batch_origins):
            failed = latency is None
            if failed:
                cand.failures += 1
                cand.error = (error or "unknown error").strip().splitlines()[-1][:200]
            else:
                if not cand.measured:
                    self.measured.append(cand)
                cand.latencies.append(latency)
            rows.append({"origin": origin, "generation": cand.generation, "regions": list(cand.regions),
                         "predicted_ms": None if predicted is None else math.exp(predicted) * 1e3,
                         "measured_ms": None if failed else latency * 1e3, "error": cand.error if failed else None})
        self._check_build_timeouts(results)
        self.plan.tell(self.in_flight, results, self.batch_origins, seconds)
        self._train_model()
        self.own_seconds += seconds
        best = self.best
        if best is not None:
            self.trajectory.append([self.own_seconds, best.latency])
        cost = self.plan.cost
        self.log.write(
            "batch", phase=self.phase.name, batch=self.plan.batches, trials=self.plan.trials, seconds=seconds,
            candidates=rows, failed=sum(r[0] is None for r in results),
            best_ms=best.latency * 1e3 if best else None,
            improved=bool(best and best.latency < improved_from),
            cost_model={"per_batch_s": cost.per_batch, "per_candidate_s": cost.per_candidate,
                        "per_run_second": cost.per_run_second},
            budget_spent_s=self.budget.spent, budget_left_s=self.budget.remaining)

    def _check_build_timeouts(self, results: list[tuple[float | None, str | None]]) -> None:
        """A batch whose every build timed out says nothing of its schedules: the builder's
        timeout is too short here (a worker's first build also imports TVM, tens of seconds
        on a slow CPU). Said once, in the log and as a warning, not hidden as failed samples."""
        if self.told_build_timeouts or not results:
            return
        if not all(latency is None and error and "timeout" in error.lower() for latency, error in results):
            return
        self.told_build_timeouts = True
        why = (f"every build of batch {self.plan.batches + 1} timed out ({results[0][1].strip().splitlines()[-1][:120]}):"
               " the builder's timeout is too short for this machine; give it a longer one, e.g. "
               "LocalBuilder(timeout_sec=120), or kb_tvm.KBBuilder")
        self.log.write("builds-timed-out", why=why)
        logging.getLogger("kb_tvm").warning("%s: %s", getattr(self.ctx, "task_name", None) or "task", why)

    def stop(self, reason: str) -> None:
        self.plan.stop(reason)
        if self.stopped:
            return
        self.stopped = True
        self.factory.close()
        best = self.best
        self.log.write("stop", reason=self.plan.stop_reason, trials=self.plan.trials, batches=self.plan.batches,
                       best_ms=best.latency * 1e3 if best else None,
                       best_regions=list(best.regions) if best else None,
                       best_measurements=len(best.latencies) if best else 0,
                       budget_spent_s=self.budget.spent, budget_left_s=self.budget.remaining)

    # ------------------------------------------------------------ where candidates start
    def _sample_regions(self) -> None:
        started = self.clock()
        self.sampled = True
        # sampling is cheap, but never let it eat more than its share of the budget (unless
        # repeatable): it delays the task's first batch, and every other task's after it
        deadline = math.inf if self.opt.repeatable else started + max(
            SAMPLING_FLOOR_S, self.opt.sampling_time_share * self.budget.task_remaining)
        chunk, wanted = 8 * self.factory.workers, self.opt.coarse_samples_per_space
        found, tries = [0] * len(self.factory.spaces), [0] * len(self.factory.spaces)
        # round robin, each space's first chunk regardless of the deadline: a deadline that
        # runs out must not leave the later design spaces unsampled (they were, one space at a time).
        # That first chunk is one sample per worker: a ResNet-50 conv's WMMA samples cost ~0.3 s
        # each on 16 cores, and first chunks of 8 per worker took 160 s of an 8-min model budget
        first_chunk = self.factory.workers

        def past_deadline() -> bool:
            # nothing valid yet: sample on until the empty-space rule can judge, so that a slow
            # machine's deadline does not leave a task that has no valid schedule to the fine phase
            undecided = not self.pool and sum(tries) < stopping.EMPTY_SPACE_TRIES
            return self.clock() >= deadline and not undecided

        while True:
            open_spaces = [s for s in range(len(found)) if found[s] < wanted and tries[s] < 8 * wanted]
            if not open_spaces:
                break
            for space_index in open_spaces:
                if tries[space_index] and past_deadline():
                    continue
                asked = min(chunk if tries[space_index] else first_chunk, wanted - found[space_index])
                tries[space_index] += asked
                made = self.factory.sample(space_index, asked)
                self.pool += made
                found[space_index] += len(made)
            if all(tries) and past_deadline():
                break
        self.sample_tries = sum(tries)
        self.pinned += self.factory.known_good()
        self._borrow()
        self.factory.extract_features(self.pool + self.pinned)
        # measurements restored from an earlier run's log already hold the records' latencies
        self.plan.count_samples(self.pool + self.pinned, [] if self.plan.restored else self.measured)
        self.log.write(
            "coarse-sampled", design_spaces=len(self.factory.spaces), templates=[t.name for t in self.factory.templates],
            valid=len(self.pool), known_good=[c.origin for c in self.pinned if c.origin == "dlight"],
            dropped=dict(self.factory.dropped), seconds=self.clock() - started,
            banned_choices=[f"s{space}:{inst}={choice}" for space, inst, choice in self.factory.categorical_bans.banned()],
            regions={name: {"sampled": s.sampled} for name, s in self.plan.regions.items()})

    def _borrow(self) -> None:
        """Replay the best schedules of similar workloads here, tiles fitted to this one's
        loops; those that apply are measured in the first batch."""
        if not self.borrowed:
            return
        for lender in self.borrowed:
            made, same_sketch = self.factory.replay_traces(lender.traces, f"borrowed:{lender.entry_id}", adapt=True)
            self.pinned += made
            lender.used["schedules"] = {"offered": len(lender.traces), "same_sketch": same_sketch, "applied": len(made)}
        cost = self.plan.cost
        self.log.write("borrowed", entries=[
            {"entry": b.entry_id, "workload": b.workload_name, "distance": round(b.distance, 3),
             "best_ms": b.best_latency_s * 1e3, **b.used} for b in self.borrowed],
            prior_model=self.model.prior.source if self.model.prior is not None else None,
            regions_won_before=sorted(self.plan.won_before),
            measurement_cost_from=self.borrowed[0].entry_id,
            cost_prior={"per_batch_s": cost.per_batch, "per_candidate_s": cost.per_candidate,
                        "per_run_second": cost.per_run_second})

    def start_from_records(self, records: list[tuple[object, float]]) -> int:
        """Schedules measured before (trace, latency s), e.g. the database's best of an
        interrupted run: replayed here as measured candidates, so they parent the fine phase
        and train the model without costing a measurement. How many applied."""
        made, same_sketch = self.factory.replay_traces([t for t, _ in records], "database:{i}", adapt=False)
        for cand in made:
            cand.latencies.append(records[int(cand.origin.split(":")[1])][1])
            self.measured.append(cand)
        self.factory.extract_features(self.measured)
        self._train_model()
        self.log.write("from-database", offered=len(records), same_sketch=same_sketch, applied=len(self.measured),
                       best_ms=self.best.latency * 1e3 if self.best else None)
        return len(self.measured)

    def resume_from_log(self, events: list[dict]) -> None:
        """Continue where earlier runs of this task stopped (`events`: their decision logs):
        their measurements per region, whether their coarse phase had finished, and what a
        measurement cost them. The best records themselves come from `start_from_records`."""
        rows = [row for e in events if e.get("event") == "batch" for row in e.get("candidates") or ()]
        finished = any(e.get("event") == "regions" for e in events)
        cost = next((e["cost_model"] for e in reversed(events) if e.get("event") == "batch" and e.get("cost_model")),
                    None)
        self.plan.restore(rows, coarse_finished=finished, cost=cost)
        self.log.write("resumed", earlier_trials=len(rows), coarse_finished_before=finished,
                       regions={name: {"trials": s.trials, "failed": s.failures}
                                for name, s in self.plan.regions.items()})

    # ------------------------------------------------------------ model
    def rank_keys(self, cands: list[Candidate]) -> np.ndarray:
        """Lower is better: predicted log-latency when the model knows something, else random."""
        if not self.model.informed:
            return self.rng.random(len(cands))
        return self.model.predict(np.stack([c.features for c in cands]))[0]

    def set_predictions(self, batch: list[Candidate], predictions: list[float | None] | None = None) -> None:
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
        regions = list(ranked[0].regions) + [r for r in self.plan.kept_regions if r not in ranked[0].regions]
        cost = self.plan.cost
        return {"best": [(c.sch.trace, c.latency) for c in ranked[:keep]], "trajectory": self.trajectory,
                "regions_won": regions, "seconds": self.own_seconds, "trials": self.plan.trials,
                "costs": {"per_batch_s": cost.per_batch, "per_candidate_s": cost.per_candidate,
                          "per_run_second": cost.per_run_second},
                "samples": (FEATURE_VERSION, np.stack([r[0] for r in rows]), np.array([r[1] for r in rows]))
                if rows else None}


class CoarsePhase:
    """Measure a few samples of every region; then rank the regions and keep the best."""

    name = "coarse"

    def next(self, task: TaskSearch) -> CoarsePhase | FinePhase:
        if not task.plan.coarse_done(task.pool):
            return self
        predicted = {}
        for name in task.plan.regions:
            rest = unmeasured(task.pool, name)
            if rest and task.model.informed:
                predicted[name] = float(np.min(task.rank_keys(rest)))
        best = task.best
        ranked = task.plan.keep_regions(predicted, best.regions if best else (), task.outside_region())
        task.log.write("regions", regions=[
            {"region": r.name, "score": score, "kept": kept, "why": why, "sampled": r.sampled,
             "measured": len(r.measured_log_latencies), "failed": r.failures,
             "best_ms": None if r.best_log_latency is None else math.exp(r.best_log_latency) * 1e3,
             "predicted_best_ms": None if r.predicted_best_log_latency is None
             else math.exp(r.predicted_best_log_latency) * 1e3}
            for r, score, kept, why in ranked])
        kept = set(task.plan.kept_regions)
        task.pool = [c for c in task.pool if not c.measured and set(c.regions) & kept]
        return FinePhase().next(task)

    def batch(self, task: TaskSearch, n: int) -> list[Candidate]:
        unmeasured_pool = [c for c in task.pool if not c.measured and not c.failures]
        # one prediction over the pool, not one per region and round
        ranked = [unmeasured_pool[i] for i in np.argsort(task.rank_keys(unmeasured_pool))] if unmeasured_pool else []
        chosen, task.pinned = task.plan.pick_coarse(ranked, task.pinned, n)
        task.set_predictions(chosen)
        task.batch_origins = [c.origin for c in chosen]
        return chosen


class FinePhase:
    """Evolve under the cost model, measure by expected gain per predicted second; named
    "refine" once the planner says so (small steps from the very best)."""

    def __init__(self) -> None:
        self.name = "fine"
        self.generations_run = 0  # in the last batch's evolution

    def next(self, task: TaskSearch) -> FinePhase:
        if task.plan.refine_due():
            self.name = "refine"
            task.log.write("phase", phase="refine", why=f"{task.opt.refine_after:.0%} of the budget used: "
                           "only local refinement of the best from here")
        return self

    def batch(self, task: TaskSearch, n: int) -> list[Candidate]:
        plan = task.plan
        remeasure = plan.remeasure(task.measured, n)
        proposals = self._evolve(task, task.opt.proposals_per_trial * n)
        if not proposals and not remeasure:
            return []
        feats = np.stack([c.features for c in proposals]) if proposals else np.zeros((0, 1))
        mu, sigma = task.model.predict(feats)
        best = math.log(task.best.latency) if task.best else float(np.min(mu, initial=0.0))
        if task.outside_best_s is not None:
            best = min(best, math.log(task.outside_best_s))
        scores = plan.score(mu, sigma, [c.keys for c in proposals], np.exp(mu), best, batch_size=n)
        order, failed = task.factory.verified_first(proposals, scores["order"], max(0, n - len(remeasure)))
        for cand in failed:  # did not lower: what the failure model learns from
            plan.failures.observe(cand.keys, True)
        chosen = [proposals[i] for i in order]
        # fresh samples not chosen stay valid and unmeasured: back to the pool (the factory
        # drops a schedule it has seen before, so one left out here could never come back)
        taken = set(order)
        task.pool += [c for i, c in enumerate(proposals) if i not in taken and c.origin == "sample" and c.verified]
        gain, seconds = scores["gain"][order], scores["seconds"][order]
        rate = float(gain.sum() / max(seconds.sum(), 1e-9)) if len(order) else 0.0
        task.log.write("proposals", phase=self.name, proposed=len(proposals), chosen=len(chosen),
                       remeasure=len(remeasure), exploration=plan.exploration(),
                       generations=self.generations_run, expected_gain=float(gain.sum()),
                       predicted_seconds=float(seconds.sum()), expected_gain_per_second=rate,
                       dropped=dict(task.factory.dropped),
                       p_fail_mean=float(scores["p_fail"].mean()) if len(proposals) else 0.0,
                       avoided_decisions=plan.failures.worst_keys())
        plan.check_worth(rate, task.model.trained)
        task.set_predictions(chosen + remeasure, [float(mu[i]) for i in order] + [None] * len(remeasure))
        task.batch_origins = [c.origin for c in chosen] + ["remeasure"] * len(remeasure)
        return chosen + remeasure

    def _evolve(self, task: TaskSearch, count: int) -> list[Candidate]:
        """About `count` new candidates: generations of mutation under the cost model, and
        fresh samples while exploring. The first generation mutates the measured elites; each
        later one the best of a population holding the measured (by latency) and the children
        so far (by prediction), so the model leads the search several steps between
        measurements, as MetaSchedule's evolution does."""
        plan, factory = task.plan, task.factory
        elites = plan.parents(task.measured)
        fresh, generations, per_generation = plan.proposal_split(count, bool(elites), task.model.informed)
        deadline = task.clock() + plan.proposing_seconds(count)
        population = [(math.log(c.latency), c) for c in elites]
        proposals: list[Candidate] = []
        self.generations_run = 0
        for _ in range(generations):
            if task.clock() >= deadline:
                break
            children = factory.mutate([c for _, c in population], per_generation, small_steps=plan.refining,
                                      deadline=deadline)
            factory.extract_features(children)
            self.generations_run += 1
            if not children:
                continue
            proposals += children
            population = sorted(population + list(zip(map(float, task.rank_keys(children)), children)),
                                key=lambda pair: pair[0])[: task.opt.population]
        mutated_nothing = bool(elites) and not proposals
        if mutated_nothing:
            # nothing new near the parents (every child seen before, or no time left to propose):
            # explore instead, enough to fill the batch twice; an empty batch would stop the task
            fresh = max(fresh, 2 * math.ceil(count / task.opt.proposals_per_trial))
        explored = []
        while task.pool and len(explored) < fresh:  # coarse samples of the kept regions not yet measured
            explored.append(task.pool.pop(int(task.rng.integers(len(task.pool)))))
        if len(explored) < fresh:
            kept = plan.kept_regions
            spaces = sorted({Region.from_name(name).space for name in kept}) or list(range(len(factory.spaces)))
            explored += factory.sample(int(task.rng.choice(spaces)), fresh - len(explored))
        every_space = not proposals and not explored
        if every_space:  # nothing new from the kept regions' space either: any design space
            for space in task.rng.permutation(len(factory.spaces)):
                explored += factory.sample(int(space), fresh)
                if explored:
                    break
        if mutated_nothing:
            task.log.write("widened", why="mutation gave no new candidate: sampled "
                           + ("every design space" if every_space else "the kept regions"), found=len(explored))
        factory.extract_features(explored)
        return proposals + explored
