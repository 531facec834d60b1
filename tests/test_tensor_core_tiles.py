"""Tile decisions for the WMMA tensor-core sketch that fit the GPU: plain rules, then KBSearch's
sampler on the real sm_90 space (no GPU needed: sampling, postprocessing and lowering run here)."""

import json
import math

import numpy as np
import pytest

from kb_tvm.search.tensor_core_tiles import (
    WmmaLimits,
    draw_tiles,
    fits,
    perfect_tile,
    shared_bytes,
    warps,
)

H200 = WmmaLimits(max_warps=32, max_shared_bytes=49152)


def test_drawn_tiles_are_perfect_and_fit():
    rng = np.random.default_rng(0)
    for _ in range(200):
        i, j, k = draw_tiles(rng, (256, 64, 256), H200)
        assert [math.prod(i), math.prod(j), math.prod(k)] == [256, 64, 256]
        assert len(i) == len(j) == 5 and len(k) == 3 and max(i[-1], j[-1], k[-1]) <= 4
        assert warps(i, j) <= 32 and shared_bytes(i, j, k, H200) <= 49152 and fits(i, j, k, H200)
        assert i[3] * i[4] * j[3] * j[4] <= 16


def test_the_limits_are_what_was_measured():
    # warps: i2 * j2 = 1 * 2; A and B: (1*2*1 + 2*1*1) fragments wide, 2*1 deep, 2 bytes each
    i, j, k = [64, 1, 1, 2, 1], [64, 1, 2, 1, 1], [128, 2, 1]
    assert warps(i, j) == 2 and shared_bytes(i, j, k, H200) == 2 * (2 * 16) * (4 * 16)
    assert not fits([1, 1, 64, 4, 1], [1, 1, 1, 1, 1], [256, 1, 1], H200)  # 64 warps
    # a warp holding 2 x 16 accumulator fragments spills (ptxas: 255 registers + stack); 16 does not
    assert not fits([8, 32, 1, 1, 1], [2, 4, 1, 16, 2], [256, 1, 1], H200)
    assert fits([8, 4, 1, 4, 2], [16, 8, 1, 1, 2], [256, 1, 1], H200)


def test_a_sketch_that_cannot_fit_draws_nothing_and_bad_limits_are_errors():
    assert draw_tiles(np.random.default_rng(0), (256, 256, 256), WmmaLimits(max_warps=32, max_shared_bytes=512),
                      tries=200) is None
    assert perfect_tile(np.random.default_rng(0), 7, 3, max_innermost=1) is not None  # 7 = 7 * 1 * 1
    with pytest.raises(ValueError, match="max_warps=0: must be an integer >= 1"):
        WmmaLimits(max_warps=0, max_shared_bytes=49152)


def _yield(target, fitted_tiles, tmp_path, samples=24):
    from kb_tvm.workloads import get_workload

    from tensor_core_helpers import candidate_factory
    from kb_tvm.measure.targets import build_config
    from kb_tvm.search import lowers_cleanly

    task = candidate_factory(get_workload("gemm-1024-fp16"), target, fitted_tiles=fitted_tiles, seed=1,
                       log_dir=str(tmp_path / ("fitted" if fitted_tiles else "uniform")))
    valid = []
    for space in range(len(task.spaces)):
        valid += task.sample(space, samples)
    asked = samples * len(task.spaces)
    assert task.pass_config is build_config
    # tensor-core kernels build with merged shared memory, as kb builds them
    assert all(build_config(target, c.sch.mod) == {"tirx.merge_static_smem": True} for c in valid)
    assert all(lowers_cleanly(c.sch.mod, target, build_config(target, c.sch.mod)) for c in valid)
    return task, valid, asked


@pytest.mark.tuning
def test_fitted_tiles_pass_the_postprocessors_far_more_often_than_uniform_draws(tmp_path):
    import tvm

    from tensor_core_helpers import H200 as h200_target
    from kb_tvm.decision_log import read_log

    target = tvm.target.Target(h200_target)
    fitted, fitted_valid, asked = _yield(target, True, tmp_path)
    uniform, uniform_valid, _ = _yield(target, False, tmp_path)
    assert 1 - fitted.dropped["postproc"] / asked >= 0.6  # measured: ~80%
    assert 1 - uniform.dropped["postproc"] / asked <= 0.35  # measured: ~15%
    assert len(fitted_valid) > len(uniform_valid)
    assert len(fitted_valid) / asked >= 0.5  # issue 9's goal; measured ~75% (lowered as kb builds)
    plans = [e for e in read_log(next((tmp_path / "fitted").glob("*.jsonl"))) if e["event"] == "tile-plan"]
    assert plans and all(p["fits"] and p["max_warps"] == 32 and p["max_shared_bytes"] == 49152 for p in plans)
    assert not any(uniform.tile_plans.values())  # uniform draws: no plan


@pytest.mark.tuning
def test_a_gpu_too_small_for_the_sketch_gets_no_samples_and_the_log_says_why(tmp_path):
    import tvm

    from tensor_core_helpers import H200 as h200_target
    from kb_tvm.decision_log import read_log

    tiny = tvm.target.Target(json.loads(json.dumps({**h200_target, "max_shared_memory_per_block": 256})))
    _, valid, _ = _yield(tiny, True, tmp_path, samples=4)
    assert valid == []
    (plan, *_) = [e for e in read_log(next((tmp_path / "fitted").glob("*.jsonl"))) if e["event"] == "tile-plan"]
    assert not plan["fits"] and "dropped" in plan["why"]


@pytest.mark.tuning
def test_tvms_own_tensor_core_matmul_is_a_candidate_that_builds_and_replays_as_a_record(tmp_path):
    import tvm
    from kb_tvm.workloads import get_workload
    from tvm.s_tir.schedule import Schedule
    from tvm_ffi import structural_equal

    from tensor_core_helpers import H200 as h200_target
    from tensor_core_helpers import candidate_factory
    from kb_tvm.measure.targets import build_config
    from kb_tvm.search import lowers_cleanly

    target = tvm.target.Target(h200_target)
    workload = get_workload("gemm-1024-fp16")
    (known,) = candidate_factory(workload, target, fitted_tiles=True, seed=1, log_dir=str(tmp_path)).known_good()
    assert known.origin == "dlight" and "wmma" in str(known.sch.mod)  # tensor cores
    assert lowers_cleanly(known.sch.mod, target, build_config(target))
    replayed = Schedule(workload.module())  # as compile_tir deploys a record: its trace, replayed
    known.sch.trace.apply_to_schedule(replayed, remove_postproc=False)
    assert structural_equal(replayed.mod, known.sch.mod)
    llvm = candidate_factory(workload, tvm.target.Target({"kind": "llvm", "num-cores": 2}), fitted_tiles=True, seed=1, log_dir=str(tmp_path))
    assert llvm.known_good() == []  # dlight's rules are for GPUs


def test_a_choice_that_never_passes_is_banned_after_enough_failures_but_never_the_last():
    from kb_tvm.search.tensor_core_tiles import CategoricalBans

    bans = CategoricalBans(after=3)
    for _ in range(3):
        bans.record(0, {67: 3, 70: 1}, passed=False)
        bans.record(0, {67: 1, 70: 1}, passed=True)
    assert bans.banned() == [(0, 67, 3)]  # 70=1 passed once: not banned
    assert bans.allowed(0, 67, 4) == [0, 1, 2] and bans.allowed(1, 67, 4) == [0, 1, 2, 3]  # per space
    for _ in range(3):
        bans.record(0, {5: 0}, passed=False)
    assert bans.allowed(0, 5, 1) == [0]  # the only choice stays
