"""The experience library in use: a second tune of a similar shape borrows from the first,
nothing crosses target kinds, a damaged library does not stop tuning. Real builds and runs."""

import json
import shutil

import pytest

from kb_tvm.decision_log import read_log
from kb_tvm.experience import Experience, ExperienceWarning
from kb_tvm.warm_start import adapt_tile
from kb_tvm.allocation import improvement_curve


def test_adapt_tile_keeps_inner_factors_that_still_divide():
    assert adapt_tile([4, 8, 16], 512) == [4, 8, 16]
    assert adapt_tile([4, 8, 16], 640) == [5, 8, 16]  # 640 = 5 x 8 x 16
    assert adapt_tile([1, 64, 2, 4], 768) == [3, 32, 2, 4]  # 64 no longer divides 768 / 8
    assert adapt_tile([8, 64], 512, max_innermost=16) == [32, 16]
    for factors, extent in (([2, 3, 5], 97), ([16, 16], 1), ([7, 1, 1], 3000)):
        fitted = adapt_tile(factors, extent)
        assert len(fitted) == len(factors) and __import__("math").prod(fitted) == extent


def test_improvement_curve_from_a_trajectory():
    assert improvement_curve([[10, 4.0], [20, 2.0], [30, 2.0], [40, 1.5]]) == [0.5, 0.0, 0.25]
    assert improvement_curve([[10, 4.0]]) == []


def _tune(name, target, work_dir, budget, experience, seed=1):
    from kb_tvm.tuning import tune_operator
    from kb_tvm.workloads import get_workload

    result = tune_operator(get_workload(name), target=target, budget=budget, work_dir=work_dir, seed=seed,
                           trials_per_batch=8, experience=experience, quiet=True)
    (log_path,) = (work_dir / "kb_logs").glob("*.jsonl")
    return result, read_log(log_path)


@pytest.fixture(scope="module")
def tuned_library(tmp_path_factory, llvm_target):
    """A library holding one tuned gemm-128: tuned once, never handed to a test itself."""
    experience = Experience(tmp_path_factory.mktemp("library"))
    _, log = _tune("gemm-128", llvm_target, tmp_path_factory.mktemp("first"), "15s", experience)
    assert any(e["event"] == "experience-saved" for e in log)
    return experience.path


@pytest.fixture
def library(tuned_library, tmp_path):
    """Each test's own copy of that library: tests add entries and models to it, and no test may
    see what another added (the results would depend on their order)."""
    copy = tmp_path / "library"
    shutil.copytree(tuned_library, copy)
    return Experience(copy)


@pytest.mark.tuning
def test_the_first_tune_is_kept_with_its_records_trajectory_and_samples(library):
    (entry,) = library.entries()
    assert entry.target_kind == "llvm" and entry.workload["op_kind"] == "s2r1i2"
    assert entry.trials > 0 and entry.best_latency_s > 0 and entry.trajectory
    assert entry.trajectory[-1][1] == pytest.approx(entry.best_latency_s)
    records = entry.database().get_all_tuning_records()
    assert 1 <= len(records) <= 5
    version, features, log_latency = entry.samples()
    assert version.startswith("kb1:") and len(features) == len(log_latency) > 0


@pytest.mark.tuning
def test_a_similar_shape_borrows_schedules_regions_costs_and_a_prior(library, llvm_target, tmp_path):
    result, log = _tune("gemm-512", llvm_target, tmp_path / "second", "10s", library)
    (borrowed,) = [e for e in log if e["event"] == "borrowed"]
    (lender,) = borrowed["entries"]
    assert lender["entry"] == library.entries()[-1].id and lender["workload"] == "gemm_128"
    assert lender["schedules"]["applied"] >= 1  # tiles refitted from 128 to 512
    assert borrowed["prior_model"].startswith("fitted on") and borrowed["regions_won_before"]
    first_batch = next(e for e in log if e["event"] == "batch")
    measured = [c for c in first_batch["candidates"] if c["origin"].startswith("borrowed:")]
    assert measured and all(c["measured_ms"] is not None for c in measured)
    # the prior ranks candidates before this task has any data: predictions in batch 1
    assert all(c["predicted_ms"] is not None for c in first_batch["candidates"])
    assert len(library.entries()) == 2  # and the second run is kept too


@pytest.mark.tuning
def test_nothing_is_borrowed_from_another_target_kind(library, llvm_target, tmp_path):
    (entry,) = [e for e in library.entries() if e.workload["name"] == "gemm_128"][:1]
    foreign = Experience(tmp_path / "foreign")
    foreign.add(target={"kind": "cuda", "arch": "sm_90"}, tvm_version=entry.tvm_version, workload=entry.workload,
                best_latency_s=entry.best_latency_s, seconds=entry.seconds, trials=entry.trials,
                trajectory=entry.trajectory, regions_won=entry.regions_won, costs=entry.costs,
                database_files=entry.database_paths(), samples=entry.samples())
    _, log = _tune("gemm-128", llvm_target, tmp_path / "w", "8s", foreign)
    assert not [e for e in log if e["event"] == "borrowed"]


@pytest.mark.tuning
def test_a_damaged_library_entry_is_skipped_with_a_warning(library, llvm_target, tmp_path):
    damaged = Experience(tmp_path / "damaged")
    shutil.copytree(library.path / "entries", damaged.path / "entries")
    bad = damaged.path / "entries" / "bad-entry"
    bad.mkdir()
    (bad / "entry.json").write_text("{ not json")
    old = damaged.path / "entries" / "old-schema"
    shutil.copytree(next((damaged.path / "entries").glob("gemm_128*")), old)
    record = json.loads((old / "entry.json").read_text())
    (old / "entry.json").write_text(json.dumps({**record, "id": "old-schema", "schema": 99}))
    with pytest.warns(ExperienceWarning) as warned:
        _, log = _tune("gemm-128", llvm_target, tmp_path / "w", "8s", damaged)
    messages = " ".join(str(w.message) for w in warned)
    assert "bad-entry" in messages and "schema" in messages
    (borrowed,) = [e for e in log if e["event"] == "borrowed"]
    assert "old-schema" not in [e["entry"] for e in borrowed["entries"]]
    assert any(e["event"] == "batch" for e in log)


@pytest.mark.tuning
def test_train_model_fits_the_library_and_tuning_prefers_it_to_the_shipped_one(library, llvm_target, tmp_path):
    from click.testing import CliRunner

    from kb_tvm.cli import main

    from kb_tvm.warm_start import target_key

    key = target_key(llvm_target)  # "llvm-avx512" on an AVX-512 host
    result = CliRunner().invoke(main, ["train-model", "--target", key, "--experience", str(library.path)])
    assert result.exit_code == 0, result.output
    model_file = library.path / "models" / f"{key}.json"
    meta = json.loads((library.path / "models" / f"{key}.meta.json").read_text())
    assert model_file.exists() and meta["rows"] > 0 and meta["feature_version"].startswith("kb1:")
    # conv2d has no similar workload in the library: its prior is the library's offline model
    _, log = _tune("conv2d-28x28x32", llvm_target, tmp_path / "w", "8s", library)
    assert not [e for e in log if e["event"] == "borrowed"]
    start = [e for e in log if e["event"] == "batch"]
    assert start and start[0]["candidates"][0]["predicted_ms"] is not None
    missing = CliRunner().invoke(main, ["train-model", "--target", "cuda-sm_90", "--experience", str(library.path)])
    assert missing.exit_code != 0 and "no training rows for 'cuda-sm_90'" in missing.output


def test_experience_and_no_experience_contradict(tmp_path):
    from click.testing import CliRunner

    from kb_tvm.cli import main

    result = CliRunner().invoke(main, ["tune-op", "gemm-128", "--experience", str(tmp_path), "--no-experience"])
    assert result.exit_code != 0 and "contradict" in result.output


@pytest.mark.parametrize("target", [{"kind": "llvm"}, {"kind": "llvm", "mcpu": "rocketlake"},
                                    {"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}}])
def test_the_shipped_cost_models_load_for_their_target_and_predict(target):
    import numpy as np
    import tvm

    from kb_tvm.search import FEATURE_VERSION
    from kb_tvm.warm_start import SHIPPED_MODELS, offline_model

    model = offline_model(tvm.target.Target(target), FEATURE_VERSION, [SHIPPED_MODELS])
    assert model is not None and "rows from" in model.source
    features = np.random.default_rng(0).uniform(0, 10, size=(3, model.num_features))
    assert np.isfinite(model.predict(features)).all()
    other = offline_model(tvm.target.Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}}),
                          FEATURE_VERSION, [SHIPPED_MODELS])
    assert other is None  # no model for an arch it was not trained on


@pytest.mark.tuning
def test_tune_op_says_what_it_borrowed(library, tmp_path):
    from click.testing import CliRunner

    from kb_tvm.cli import main

    result = CliRunner().invoke(main, ["tune-op", "gemm-128", "--budget", "8s", "--target", "llvm", "--work-dir",
                                       str(tmp_path / "w"), "--experience", str(library.path)])
    assert result.exit_code == 0, result.output
    assert "warm start from the experience library: gemm_128 (" in result.output
    listed = CliRunner().invoke(main, ["experience", "--experience", str(library.path), "list"])
    assert listed.exit_code == 0 and listed.output.count("gemm_128") >= 2  # this run was added too
