"""The search's TVM mechanics: candidates sampled from MetaSchedule design spaces, replayed from
traces (mutated, borrowed or recorded), postprocessed, checked by lowering, deduplicated, sorted
into regions and described by features. What to do with them is the planner's business."""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..measure.workers import built_arguments
from ..measure.targets import build_config
from ..schedule_props import schedule_properties
from ..templates import Template
from ..tvm_errors import invalid_schedule_errors
from ..warm_start import replay_adapted, sketch_kinds
from .options import SearchOptions
from .regions import UNCLASSIFIED, Region
from .tensor_core_tiles import CategoricalBans, WmmaLimits, draw_tiles

# what a candidate's feature vector holds (MetaSchedule's per-store features summed and
# maxed over stores, then the schedule properties); the experience library keys rows by it
FEATURE_VERSION = "kb1:per-store-sum-max+props"


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


class CandidateFactory:
    """Makes new, valid, distinct candidates of one task's design spaces. The TVM work runs on
    `workers` threads (TVM releases the GIL); `dropped` counts what did not make it, by reason."""

    def __init__(self, *, context, design_spaces, templates: list[Template], options: SearchOptions,
                 rng: np.random.Generator, log) -> None:
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        self.ctx = context
        self.spaces = list(design_spaces)
        self.templates = templates
        self.opt = options
        self.rng = rng
        self.log = log
        self.features = PerStoreFeature()
        self.postprocs = list(context.space_generator.postprocs)
        self.mutators = [(m, float(p)) for m, p in context.space_generator.mutator_probs.items()]
        self.num_cores = max(1, int(context.num_threads))
        self.seen: set[int] = set()
        self.dropped = {"postproc": 0, "duplicate": 0, "verify": 0}
        self.categorical_bans = CategoricalBans()  # fitted sampling: choices that never pass
        # GPU builds fail often (tensor-core spaces: most stock candidates); lowering without
        # codegen catches those failures in ~20 ms, far cheaper than a build + run slot
        self.verify = context.target.kind.name == "cuda"
        self.pass_config = build_config  # (target, mod) -> pass options; benchmarks/sample_yield.py compares TVM's defaults
        self.workers = self.num_cores
        self.executor = ThreadPoolExecutor(self.workers, thread_name_prefix="kb-search")
        self._local = threading.local()
        self.samplers: dict[tuple[int, int], object] = {}  # (design space, count) -> ReplayTrace drawing them
        self.tile_plans: dict[int, tuple | None] = {}  # design space -> (extents, WmmaLimits) or None
        self.unfit_spaces: set[int] = set()  # sketches no tiling of which fits the GPU: dropped

    @classmethod
    def outside_tune(cls, mod, target, *, space_generator="post-order-apply", options: SearchOptions | None = None,
                     log=None, task_name: str = "task", generate_spaces: bool = True) -> CandidateFactory:
        """The factory KBSearch makes for `mod` on `target`, without a tune (no GPU needed: sampling,
        postprocessing and lowering run here), for measuring what the search draws. `log`: a
        DecisionLog (default: none kept); `generate_spaces=False` leaves the design spaces empty."""
        from tvm.s_tir import meta_schedule as ms

        from ..decision_log import DecisionLog
        from ..templates import load_templates

        options = options or SearchOptions()
        seed = 1 if options.seed is None else options.seed
        context = ms.TuneContext(mod=mod, target=target, space_generator=space_generator, task_name=task_name,
                                 num_threads=2, rand_state=seed)
        spaces = context.generate_design_space() if generate_spaces else []
        return cls(context=context, design_spaces=spaces, templates=load_templates(target.kind.name),
                   options=options, rng=np.random.default_rng(seed), log=log or DecisionLog(None))

    def close(self) -> None:
        self.executor.shutdown(wait=False)

    # ------------------------------------------------------------ where candidates come from
    def sample(self, space_index: int, count: int) -> list[Candidate]:
        """`count` random valid samples of one design space, drawn by MetaSchedule's own
        multi-threaded ReplayTrace (faster than replaying from Python), then verified. Replayed
        here from explicit seeds instead when repeatable (ReplayTrace's draws depend on which
        thread takes which sample) or when the tiles are fitted to the GPU."""
        from tvm.s_tir.meta_schedule.search_strategy import ReplayTrace
        from tvm.s_tir.schedule import Trace

        plan = self.tile_plan(space_index)
        if space_index in self.unfit_spaces:
            return []
        if plan is not None or self.opt.repeatable:
            design = self.spaces[space_index].trace
            if plan is None:
                return self.realize([(Trace(design.insts, {}), space_index, "sample")] * count)
            choices = [(k, len(inst.attrs[0])) for k, inst in enumerate(design.insts)
                       if inst.kind.name == "SampleCategorical"]
            made: list[Candidate] = []
            for start in range(0, count, 4 * self.workers):  # in chunks, so that bans learnt apply
                size = min(4 * self.workers, count - start)
                tiles = [draw_tiles(self.rng, *plan) for _ in range(size)]
                picks = [{k: int(self.rng.choice(self.categorical_bans.allowed(space_index, k, n)))
                          for k, n in choices} for _ in range(size)]
                made += self.realize([(Trace(design.insts, {}), space_index, "sample")] * size, tiles=tiles,
                                     picks=picks)
            return made

        # a ReplayTrace draws the count its pre_tuning was given at every call (one sampler per
        # space drew its first call's count ever after: asked 16, it gave 2 and called 14 failed)
        sampler = self.samplers.get((space_index, count))
        if sampler is None:
            sampler = ReplayTrace(max_fail_count=64)
            sampler._initialize_with_tune_context(self.ctx)
            sampler.pre_tuning(1 << 30, count, [self.spaces[space_index]], None, None)
            self.samplers[space_index, count] = sampler
        drawn = sampler.generate_measure_candidates() or []
        self.dropped["postproc"] += max(0, count - len(drawn))  # ReplayTrace's own failures, at least
        checked = self.executor.map(self._verify, [c.sch for c in drawn])
        return self._admit([(sch, reason, space_index, "sample", 0, True) for sch, reason in checked])

    def mutate(self, parents: list[Candidate], count: int, *, small_steps: bool, deadline: float) -> list[Candidate]:
        """Up to `count` new children of `parents` (better ranked, more often), by MetaSchedule's
        mutators at their probabilities (`small_steps`: tile sizes and unrolling only),
        postprocessed but not yet checked by lowering (`verified_first` does that)."""
        mutators = self.mutators
        if small_steps:
            mutators = [(m, p) for m, p in mutators if "TileSize" in str(m) or "Unroll" in str(m)] or mutators
        weights = np.array([p for _, p in mutators], dtype=float)
        weights /= weights.sum()
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
                except invalid_schedule_errors():  # a mutator failing a check on a trace: try another
                    trace = None
                if trace is not None:
                    jobs.append((trace, parent.space, f"mutate:{type(mutator).__name__}", parent.generation + 1))
            children += self.realize(jobs, verify=False)
        return children

    def known_good(self) -> list[Candidate]:
        """TVM's hand-written GPU schedule of a matmul (dlight's `Matmul`: tensor cores for fp16
        where the shapes allow), as a candidate: measured in the first batch, the search starts
        no worse than it. Nothing on CPUs or for operators dlight does not schedule."""
        if self.ctx.target.kind.name != "cuda":
            return []
        from tvm.s_tir import dlight

        func = next(iter(self.ctx.mod.functions.values()))
        try:
            with self.ctx.target:
                sch = dlight.gpu.Matmul().apply(func, self.ctx.target, False)
        except invalid_schedule_errors() as err:  # a shape dlight fails on is no candidate
            self.log.write("known-good-failed", rule="dlight.gpu.Matmul", error=f"{type(err).__name__}: {err}"[:300])
            sch = None
        if sch is None:
            return []
        sch, reason = self._verify(sch)
        return self._admit([(sch, reason, 0, "dlight", 0, True)])

    def replay_traces(self, traces: list, origin: str, *, adapt: bool) -> tuple[list[Candidate], int]:
        """Traces from elsewhere (borrowed: `adapt` their tiles to this workload; recorded),
        each replayed in the design space of the same sketch: (candidates, how many had one).
        origin may hold {i}, the trace's index."""
        kinds = [sketch_kinds(space.trace) for space in self.spaces]
        jobs = []
        for index, trace in enumerate(traces):
            space = next((i for i, k in enumerate(kinds) if k == sketch_kinds(trace)), None)
            if space is not None:
                jobs.append((trace, space, origin.replace("{i}", str(index))))
        return self.realize(jobs, adapt=adapt), len(jobs)

    def realize(self, jobs: list[tuple], adapt: bool = False, tiles: list | None = None,
                picks: list[dict[int, int]] | None = None, verify: bool = True) -> list[Candidate]:
        """Replay (trace, space, origin[, generation]) jobs into postprocessed new candidates, checked by
        lowering unless `verify` is False (adapt: fit borrowed tile decisions to this workload;
        tiles: each job's SamplePerfectTile decisions, in trace order; picks: each job's
        SampleCategorical decisions by instruction index, whose outcomes `categorical_bans`
        learns from). The TVM work runs on `workers` threads (TVM releases the GIL)."""
        seeds = [int(v) for v in self.rng.integers(1, 1 << 30, size=len(jobs))]
        tiles = tiles or [None] * len(jobs)
        picks = picks or [None] * len(jobs)
        work = [(job[0], seed, adapt, tile, pick, verify) for job, seed, tile, pick in zip(jobs, seeds, tiles, picks)]
        replayed = list(self.executor.map(self._replay, work))
        for (_, reason), job, pick in zip(replayed, jobs, picks):
            if pick:
                self.categorical_bans.record(job[1], pick, passed=reason != "postproc")
        return self._admit([(sch, reason, job[1], job[2], job[3] if len(job) > 3 else 0, verify or not self.verify)
                            for (sch, reason), job in zip(replayed, jobs)])

    def verified_first(self, proposals: list[Candidate], order, wanted: int) -> tuple[list[int], list[Candidate]]:
        """(the first `wanted` indices of `order` whose candidates lower cleanly, those that did
        not). Evolved children are checked only here, when about to be measured."""
        chosen: list[int] = []
        failed: list[Candidate] = []
        start = 0
        while len(chosen) < wanted and start < len(order):
            chunk = [int(i) for i in order[start:start + max(2 * (wanted - len(chosen)), self.workers)]]
            start += len(chunk)
            todo = [i for i in chunk if not proposals[i].verified]
            for i, (_, reason) in zip(todo, self.executor.map(self._verify, [proposals[i].sch for i in todo])):
                proposals[i].verified = reason is None
                if reason is not None:
                    self.dropped[reason] += 1
                    failed.append(proposals[i])
            chosen += [i for i in chunk if proposals[i].verified][: wanted - len(chosen)]
        return chosen, failed

    # ------------------------------------------------------------ the mechanics
    def tile_plan(self, space_index: int):
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
        # lowering is verified as the builds run it
        if self.verify and not lowers_cleanly(sch.mod, self.ctx.target, self.pass_config(self.ctx.target, sch.mod)):
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
            matched = tuple(Region(space_index, t.name).name for t in self.templates if t.matches(props))
            made.append(Candidate(sch=sch, space=space_index,
                                  regions=matched or (Region(space_index, UNCLASSIFIED).name,),
                                  props=props, keys=self._failure_keys(sch.trace, space_index, props), origin=origin,
                                  generation=generation, verified=verified))
        return made

    def _replay(self, job) -> tuple[object | None, str | None]:
        from tvm.s_tir.schedule import Schedule

        trace, seed, adapt, tiles, picks, verify = job
        if not hasattr(self._local, "postprocs"):  # postprocs may keep state: one copy per thread
            self._local.postprocs = [p.clone() for p in self.postprocs]
        try:
            if adapt:  # a borrowed schedule, its tiles fitted to this workload
                sch = replay_adapted(trace, self.ctx.mod, seed)
                if sch is None:
                    return None, "postproc"
            else:
                sch = Schedule(self.ctx.mod, seed=seed, debug_mask="none", error_render_level="none")
                trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=_decisions_provider(tiles, picks))
            sch.enter_postproc()  # marks what follows as postprocessing, which replays strip
            valid = all(p.apply(sch) for p in self._local.postprocs)
        except invalid_schedule_errors():  # TVM rejected the sample: it is just dropped
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

    def extract_features(self, cands: list[Candidate]) -> None:
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

        # the arguments of the function as built (a packed weight in its packed shape, as
        # stock's search gives them), not the task's
        return MeasureCandidate(cand.sch, built_arguments(cand.sch.mod))



def _decisions_provider(tiles, picks):
    """A decision provider that gives the SamplePerfectTile instructions `tiles`, in order, and
    the instructions at the indices of `picks` their choice (the others keep their decision,
    or sample one where it is None); None when it has nothing to give."""
    if tiles is None and not picks:
        return None
    given = iter(tiles or [])
    position = itertools.count()  # the provider sees every instruction, in trace order

    def decide(inst, inputs, attrs, decision):
        index = next(position)
        if tiles is not None and inst.kind.name == "SamplePerfectTile":
            return list(next(given))
        if picks and index in picks:
            return picks[index]
        return decision

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
                        max_innermost=int(tiles[0].attrs[1]),
                        stages=2 if any(inst.kind.name == "Annotate" and str(inst.attrs[0]) == "double_buffer_scope"
                                        for inst in trace.insts) else 1)
    return extents, limits


def mutator_apply(mutator, trace, seed: int):
    """MetaSchedule's Mutator.apply with the seed given (its Python API always passes -1: the OS's)."""
    from tvm.s_tir.meta_schedule import _ffi_api

    return _ffi_api.MutatorApply(mutator, trace, seed)


def lowers_cleanly(mod, target, pass_config: dict | None = None) -> bool:
    """Run TVM's TIR lowering (no codegen) as the builder would, under `pass_config`: False
    where TVM rejects the schedule (kb_tvm.tvm_errors); any other error propagates."""
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
    except invalid_schedule_errors():  # TVM's lowering failed: so would the build
        return False
    return True
