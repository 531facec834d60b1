"""What one task's search measures next, decided from plain numbers: no TVM here.

The search asks before a batch (`why_stop`, `batch_size`, `pick_coarse` or `parents` and
`choose`) and tells after it (`tell`). Candidates are anything with `regions`, `latency`,
`latencies`, `measured` and `failures` (search/candidates.py's Candidate); latencies are
handled as log-seconds, so gains are relative.
"""

from __future__ import annotations

import math

import numpy as np

from ..budget import TaskClock, TuningBudget
from . import decisions, stopping
from .options import SearchOptions


# what a meta-policy (kb_tvm/agent) may direct before a fine-phase batch, in place of the rules:
# fresh samples and the model's uncertainty count most, the model's best guesses only, small
# steps from the very best, or stop the task
MACRO_ACTIONS = ("explore", "exploit", "refine", "stop")


class Planner:
    """The policy of one task's search: pacing, regions, phases, parents, choices, stopping."""

    def __init__(self, *, options: SearchOptions, budget: TuningBudget | TaskClock, trials_per_batch: int,
                 max_trials: int, num_cores: int, cost: decisions.MeasurementCost,
                 won_before: frozenset[str] = frozenset(), build_workers: int | None = None) -> None:
        """`build_workers`: the builds the builder runs at once (None: one per core)."""
        self.opt = options
        self.budget = budget
        self.trials_per_batch = trials_per_batch
        self.max_trials = max_trials
        self.num_cores = num_cores
        self.build_workers = build_workers or num_cores
        self.cost = cost
        self.won_before = won_before  # regions that won on similar workloads
        self.failures = decisions.FailureModel()
        self.regions: dict[str, decisions.RegionStats] = {}
        self.kept_regions: list[str] = []
        self.refining = False
        self.directive: str | None = None  # a meta-policy's macro-action for this batch; None: the rules
        self.last_rate = 0.0  # expected gain per second of the last batch's proposals
        self.last_sigma = 0.0  # the model's mean uncertainty over them (log-latency)
        self.trials = 0
        self.batches = 0
        self.low_gain_rounds = 0
        self.stop_reason: str | None = None
        self.restored = False  # region statistics of an earlier run of this task were restored
        self.coarse_finished_before = False  # ... and that run had ranked its regions
        # a task may start late in a budget shared without a task clock (a TaskClock starts at 0)
        self.fraction_at_start = budget.fraction_used

    # ------------------------------------------------------------ pacing
    def why_stop(self) -> str | None:
        """Why no batch should start now, or None."""
        if self.stop_reason is None:
            why = stopping.spent(exhausted=self.budget.exhausted, trials=self.trials, max_trials=self.max_trials)
            if why is not None:
                self.stop(why)
        return self.stop_reason

    def batch_size(self, pinned: int, probe: bool = False) -> int | None:
        """Candidates in the next batch (`pinned`: borrowed schedules waiting to go first), or
        None when that batch would overrun the budget (and the search stops). `probe`: a
        faster kernel outside the space is known, so the first batch only probes how far
        behind it the space starts (a quarter batch): on the H200 a decoder's GEMM tasks,
        under the Hopper family's kernels, spent 10-18 s each on full first batches. Else a
        first batch measures what the coarse phase needs to rank the regions sampled, not the
        whole pool: every task's first batch delays the others' (a ViT's layer norm measured
        all 62 of its samples in an 18-s first batch on an H100). Either is then cut to whole
        rounds of the builder's parallel builds: later, that layer norm's 24 (two for each of
        its 12 regions) on 15 build workers took two rounds and 13 s."""
        preferred = min(self.trials_per_batch, self.max_trials - self.trials)
        minimum = min(max(self.num_cores, preferred // 4), preferred)
        n = decisions.batch_size(self.budget.remaining, self.cost, preferred=preferred, minimum=minimum)
        if not self.batches:
            n = decisions.warm_start_batch(pinned, self.cost, self.budget.remaining, n)
            if probe:
                n = min(n, minimum)
            elif self.regions and not self.coarse_finished_before:
                n = min(n, max(minimum, pinned, len(self.regions) * self.opt.coarse_trials_per_region))
            n = decisions.whole_rounds(n, self.build_workers, at_least=0 if probe else pinned)
        why = stopping.overrun(remaining_seconds=self.budget.remaining, batch_seconds=self.cost.batch_seconds(n))
        if self.batches and why is not None:
            self.stop(why)
            return None
        return n

    def stop(self, reason: str) -> bool:
        """Record why the search stops; False if it had stopped already."""
        if self.stop_reason is not None:
            return False
        self.stop_reason = reason
        return True

    # ------------------------------------------------------------ regions (coarse phase)
    def count_samples(self, sampled: list, measured_before: list) -> None:
        """Regions from the coarse samples, and from candidates measured before this run."""
        for cand in sampled:
            for name in cand.regions:
                self.regions.setdefault(name, decisions.RegionStats(name)).sampled += 1
        for cand in measured_before:
            for name in cand.regions:
                stats = self.regions.setdefault(name, decisions.RegionStats(name))
                stats.sampled += 1
                stats.measured_log_latencies.append(math.log(cand.latency))

    def restore(self, rows: list[dict], *, coarse_finished: bool, cost: dict | None = None) -> None:
        """An earlier run's measurements of this task (decision-log rows: "regions", and
        "measured_ms" or None for a failure; re-measures aside), so that a resumed search does
        not measure its regions again; `coarse_finished`: that run had ranked its regions, and
        the coarse phase is not redone. `cost`: its last measurement-cost estimate."""
        for row in rows:
            if row.get("origin") != "remeasure":
                measured = row.get("measured_ms")
                self._count_in_regions(row.get("regions") or (), None if measured is None else measured * 1e-3,
                                       add_regions=True)
        self.restored = bool(rows)
        self.coarse_finished_before = coarse_finished
        if cost:
            self.cost = decisions.MeasurementCost(cost["per_candidate_s"], per_batch=cost["per_batch_s"],
                                                  per_run_second=cost["per_run_second"])

    def coarse_done(self, pool: list) -> bool:
        """Every region measured enough, or no unmeasured sample left, or the coarse phase
        had its share of the budget, or an earlier run of the task finished it; never before
        one batch of this run or an earlier one (regions rank on measurements)."""
        if not pool or self.coarse_finished_before:
            return True
        if not self.batches and not self.restored:
            return False
        if self.budget.fraction_used - self.fraction_at_start >= self.opt.coarse_max_fraction:
            return True
        return all(s.trials >= self.opt.coarse_trials_per_region or not unmeasured(pool, name)
                   for name, s in self.regions.items())

    def pick_coarse(self, ranked: list, pinned: list, n: int) -> tuple[list, list]:
        """(batch, pinned left): borrowed schedules first, then round-robin over the regions
        that still need measurements, best ranked first; then the best ranked of any region,
        since a batch has a fixed cost. `ranked`: unmeasured samples, best predicted first."""
        chosen = list(pinned[:n])
        chosen_ids = {id(c) for c in chosen}
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
        chosen += [c for c in ranked if id(c) not in chosen_ids][: n - len(chosen)]
        return chosen, list(pinned[n:])

    def keep_regions(self, predicted_best: dict[str, float], best_regions: tuple[str, ...],
                     outside: decisions.RegionStats | None = None) -> list[tuple]:
        """Rank the regions (predicted_best: region -> best predicted log-latency of its
        unmeasured samples) and keep the best; ranked rows (stats, score, kept, why).
        `outside`: a region searched outside MetaSchedule's space (a kernel family's
        variants), ranked beside the others by the same rule: where it ranks among the kept, it
        takes one of their places, and the fine phase searches one region fewer."""
        for name, value in predicted_best.items():
            self.regions[name].predicted_best_log_latency = value
        regions = list(self.regions.values()) + ([outside] if outside is not None else [])
        ranked = decisions.rank_regions(regions, keep=self.opt.keep_regions, won_before=self.won_before)
        self.kept_regions = [r.name for r, _, kept, _ in ranked if kept and r is not outside] or list(best_regions)
        return ranked

    # ------------------------------------------------------------ fine phase
    def direct(self, action: str | None, why: str = "") -> None:
        """A meta-policy's macro-action for the next batch (None: the rules decide it)."""
        if action is not None and action not in MACRO_ACTIONS:
            raise ValueError(f"macro-action {action!r}: use one of {', '.join(MACRO_ACTIONS)} or None")
        self.directive = action
        if action == "stop":
            self.stop(stopping.agent_stopped(why))
        elif action is not None:
            self.refining = action == "refine"

    def refine_due(self) -> bool:
        """True once, when the budget reaches `refine_after`: only local refinement after
        (unless a meta-policy directs)."""
        if self.directive is not None or self.refining or self.budget.fraction_used < self.opt.refine_after:
            return False
        self.refining = True
        return True

    def parents(self, measured: list) -> list:
        """The measured best of the kept regions, and always the overall best."""
        kept = set(self.kept_regions)
        ranked = sorted(measured, key=lambda c: c.latency)
        elites = ranked[:1] + [c for c in ranked[1:] if set(c.regions) & kept]
        return elites[: self.opt.refine_elites if self.refining else self.opt.elites]

    def proposal_split(self, count: int, have_parents: bool, model_informed: bool) -> tuple[int, int, int]:
        """(fresh samples, generations, children per generation) for `count` proposals: fresh
        samples enough for the exploring share of the slots to be chosen twice over, and
        generations under the model only once it has learned something."""
        if not have_parents:
            return count, 0, 0
        if self.directive == "explore":
            explore_share = min(0.9, 2 * self.opt.explore_share)
        elif self.refining or self.directive == "exploit":
            explore_share = 0.0
        else:
            explore_share = self.opt.explore_share * (1.0 - self.budget.fraction_used)
        slots = max(1, count // self.opt.proposals_per_trial)
        fresh = min(count, math.ceil(2 * explore_share * slots))
        generations = self.opt.generations if model_informed else 1
        return fresh, generations, max(1, math.ceil((count - fresh) / generations))

    def proposing_seconds(self, count: int) -> float:
        """How long proposing `count` may take: a share of the batch it feeds."""
        if self.opt.repeatable:
            return math.inf
        return max(1.0, self.opt.proposing_time_share * self.cost.batch_seconds(count // self.opt.proposals_per_trial))

    def remeasure(self, measured: list, n: int) -> list:
        """The best few, measured fewer than `remeasure_times`, in at most a share of the batch."""
        limit = max(1, int(n * self.opt.remeasure_share))
        top = sorted(measured, key=lambda c: c.latency)[: self.opt.remeasure_top]
        return [c for c in top if len(c.latencies) < self.opt.remeasure_times][:limit]

    def exploration(self) -> float:
        """How much uncertainty counts in scoring now (0 while refining)."""
        if self.refining:
            return 0.0
        if self.directive == "explore":
            return decisions.exploration_weight(0.0)
        if self.directive == "exploit":
            return self.opt.min_exploration
        return decisions.exploration_weight(self.budget.fraction_used)

    def score(self, mu: np.ndarray, sigma: np.ndarray, keys: list[list[str]], latency_s: np.ndarray,
              best_log_latency: float, batch_size: int) -> dict[str, np.ndarray]:
        """Expected gain, predicted seconds and gain per second of each proposal."""
        p_fail = np.array([self.failures.probability(k) for k in keys])
        seconds = self.cost.predict(latency_s, batch_size=batch_size)
        self.last_sigma = float(np.mean(sigma)) if len(sigma) else 0.0
        gain, per_second = decisions.score_proposals(mu, sigma, p_fail, seconds, best_log_latency,
                                                     max(self.exploration(), self.opt.min_exploration))
        return {"gain": gain, "seconds": seconds, "per_second": per_second, "p_fail": p_fail,
                "order": np.argsort(-per_second)}

    def check_worth(self, rate: float, model_trained: bool) -> None:
        """Stop when spending the rest at this expected gain per second buys too little,
        `patience` rounds in a row; a meta-policy's directive overrides the stop."""
        self.last_rate = rate
        if not model_trained:
            return
        if stopping.worth_continuing(rate, self.budget.remaining, self.opt.min_total_gain):
            self.low_gain_rounds = 0
            return
        self.low_gain_rounds += 1
        why = stopping.gain_too_small(rate=rate, remaining_seconds=self.budget.remaining,
                                      min_total_gain=self.opt.min_total_gain, rounds_below=self.low_gain_rounds,
                                      patience=self.opt.patience)
        if why is not None and self.directive is None:
            self.stop(why)

    def check_bar(self, trajectory: list[list[float]], outside_best_s: float | None) -> None:
        """Stop when the best's pace would not reach a faster kernel outside the space in the
        seconds left (stopping.behind_bar); a meta-policy's directive overrides the stop."""
        if outside_best_s is None or self.directive is not None:
            return
        why = stopping.behind_bar(trajectory=trajectory, bar_s=outside_best_s, remaining_seconds=self.budget.remaining,
                                  margin=self.opt.bar_margin, patience=self.opt.patience)
        if why is not None:
            self.stop(why)

    # ------------------------------------------------------------ after a batch
    def tell(self, batch: list, results: list[tuple[float | None, str | None]], origins: list[str],
             seconds: float) -> None:
        """A measured batch: failures, region statistics (re-measures aside) and costs."""
        for cand, (latency, _), origin in zip(batch, results, origins):
            self.failures.observe(cand.keys, latency is None)
            if origin != "remeasure":
                self._count_in_regions(cand.regions, latency, add_regions=False)
        ok = [r[0] for r in results if r[0] is not None]
        self.cost.observe_batch(len(results), float(sum(ok)), seconds)
        self.batches += 1

    def _count_in_regions(self, names, latency_s: float | None, *, add_regions: bool) -> None:
        """One measurement (None: failed) into the statistics of its regions; regions not
        sampled in this run are skipped unless `add_regions`."""
        for name in names:
            stats = self.regions.setdefault(name, decisions.RegionStats(name)) if add_regions \
                else self.regions.get(name)
            if stats is None:
                continue
            if latency_s is None:
                stats.failures += 1
            else:
                stats.measured_log_latencies.append(math.log(latency_s))


def unmeasured(pool: list, region: str) -> list:
    return [c for c in pool if region in c.regions and not c.measured and not c.failures]
