"""The search's knobs, each with its meaning, and their validation (`validated_options`: plain
Python, no TVM)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..arguments import check_option


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
    # under a kernel from outside the space (tune-op's kernel family), stop once the best's pace
    # (in log time) times this margin would not reach it in the seconds left
    bar_margin: float = 2.0
    # the search's own time: sampling at most this share of the task's expected seconds,
    # proposing at most this share of the batch it feeds (both at least a second). At 5% an
    # 8-min ViT job's GEMM tasks sampled 5.6-6.6 s before their first batch on an H100, more
    # than that batch's builds and runs (3-7 s)
    sampling_time_share: float = 0.025
    proposing_time_share: float = 0.1
    seed: int | None = None
    # same seed, same draws: samples replayed from explicit seeds in a fixed order, and no
    # time limit on how many are drawn (slower sampling; the budget itself stays wall-clock)
    repeatable: bool = False
    # WMMA tensor-core sketches: draw tile decisions that fit the GPU's warps and shared memory
    # (tensor_core_tiles.py) instead of uniformly as MetaSchedule does (~95% of those fail)
    fitted_tiles: bool = True


def validated_options(**given) -> SearchOptions:
    known = {f.name for f in fields(SearchOptions)}
    unknown = set(given) - known
    if unknown:
        raise TypeError(f"unknown KBSearch option(s) {sorted(unknown)}; known: {sorted(known)}")
    opt = SearchOptions(**given)
    for name in ("coarse_samples_per_space", "coarse_trials_per_region", "keep_regions",
                 "proposals_per_trial", "elites", "refine_elites", "generations", "population",
                 "remeasure_times", "patience"):
        value = getattr(opt, name)
        check_option(name, value, isinstance(value, int) and value >= 1, "must be an integer >= 1")
    check_option("remeasure_top", opt.remeasure_top, isinstance(opt.remeasure_top, int) and opt.remeasure_top >= 0,
                 "must be an integer >= 0")
    for name in ("coarse_max_fraction", "refine_after", "remeasure_share", "sampling_time_share",
                 "proposing_time_share"):
        value = getattr(opt, name)
        check_option(name, value, 0.0 < value <= 1.0, "must be a fraction in (0, 1]")
    for name in ("explore_share", "min_exploration"):
        value = getattr(opt, name)
        check_option(name, value, 0.0 <= value <= 1.0, "must be a fraction in [0, 1]")
    check_option("min_total_gain", opt.min_total_gain, opt.min_total_gain >= 0.0, "must be >= 0")
    check_option("bar_margin", opt.bar_margin, opt.bar_margin >= 1.0,
                 "must be >= 1 (the pace is extrapolated at least as is)")
    check_option("repeatable", opt.repeatable, isinstance(opt.repeatable, bool), "must be True or False")
    return opt
