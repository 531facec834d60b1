"""`kb-tvm tune MODEL.onnx` as a user runs it: bad inputs, then the shipped model end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_helpers import hottest_at_search_start

from kb_tvm.cli import main

SHIPPED = Path(__file__).resolve().parent.parent / "workloads" / "transformer_block.onnx"


def _onnx(path, node, inputs, opsets=(("", 17),)):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    onnx.save(model, path)
    return path


def _mlp_layer_norm(path):
    """Three tasks: two GEMMs the CPU family takes and a layer norm MetaSchedule searches, whose
    regions are ranked after one batch. A resumed run has what it needs within seconds, where the
    shipped block's eleven tasks took a minute."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.uniform(-1, 1, shape).astype("float32"), name)
               for name, shape in (("w1", (128, 256)), ("w2", (256, 128)), ("g", (128,)), ("b", (128,)))]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["m"]),
         helper.make_node("LayerNormalization", ["m", "g", "b"], ["y"], axis=-1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 128])], initializer=weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _bad_models(tmp_path):
    from onnx import TensorProto, helper

    static = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    dynamic = [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", 4])]
    (tmp_path / "garbage.onnx").write_bytes(b"\x00not a protobuf at all\xff" * 8)
    return {
        "missing": (tmp_path / "missing.onnx", "does not exist"),
        "garbage": (tmp_path / "garbage.onnx", "is not an ONNX model"),
        "unsupported": (_onnx(tmp_path / "custom.onnx", helper.make_node("FrobnicateKB", ["x"], ["y"], domain="kb"),
                              static, (("", 17), ("kb", 1))), "not supported for frontend ONNX: FrobnicateKB"),
        "dynamic": (_onnx(tmp_path / "dynamic.onnx", helper.make_node("Relu", ["tokens"], ["y"]), dynamic),
                    "input 'tokens' has a dynamic dimension 0 ('batch')"),
    }


@pytest.mark.parametrize("case", ["missing", "garbage", "unsupported", "dynamic"])
def test_bad_models_are_one_line_errors_and_write_nothing(tmp_path, case):
    path, message = _bad_models(tmp_path)[case]
    work_dir = tmp_path / "work"
    result = CliRunner().invoke(main, ["tune", str(path), "--target", "llvm", "--work-dir", str(work_dir)])
    assert result.exit_code != 0
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1, result.output
    assert message in result.output
    assert not work_dir.exists()  # nothing half-written to confuse a later run


def test_dynamic_shape_error_names_the_option_that_fixes_it(tmp_path):
    path, _ = _bad_models(tmp_path)["dynamic"]
    result = CliRunner().invoke(main, ["tune", str(path), "--target", "llvm", "--work-dir", str(tmp_path / "w")])
    assert "pin it with --input-shape tokens=Nx4, or on every input with --dim batch=N" in result.output


def test_dim_pins_an_axis_by_its_name_on_every_input(tmp_path):
    """A decoder's step with a key/value cache has an input per layer and kind, its cache length
    on each: `--dim` pins the axis once. `--input-shape` still pins an input whole."""
    from onnx import TensorProto, helper

    from kb_tvm.model_tuning import load_onnx

    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "past", 4]) for name in ("k", "v")]
    path = _onnx(tmp_path / "two.onnx", helper.make_node("Add", ["k", "v"], ["y"]), inputs)
    model = load_onnx(path, {"k": (2, 3, 4)}, {"past": 3, "batch": 2})
    assert {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input} == {
        "k": [2, 3, 4], "v": [2, 3, 4]}
    result = CliRunner().invoke(main, ["tune", str(path), "--target", "llvm", "--check-numerics-only",
                                       "--dim", "batch=2", "--dim", "past=3"])
    assert result.exit_code == 0 and "numerics: the untuned TVM build matches onnxruntime" in result.output, \
        result.output


@pytest.mark.parametrize("option, given, message", [
    ("--input-shape", "tokens=2", "--input-shape tokens=2 has 1 dimensions; input 'tokens' has 2"),
    ("--input-shape", "tokens=2x5", "dimension 1 of 'tokens' is fixed at 4 in the model"),
    ("--input-shape", "ids=2x4",
     "--input-shape names 'ids', which is not an input of dynamic.onnx; its inputs: tokens"),
    ("--input-shape", "tokens=2xN", "--input-shape 'tokens=2xN': write NAME=DIMS with positive dimensions"),
    ("--input-shape", "tokens", "write NAME=DIMS"),
    ("--dim", "seq=4", "--dim names axis 'seq', which no input of dynamic.onnx has; its dynamic axes: batch"),
    ("--dim", "batch=0", "--dim 'batch=0': write AXIS=SIZE"),
    ("--dim", "batch", "write AXIS=SIZE"),
])
def test_bad_input_shapes_and_dims_are_one_line_errors(tmp_path, option, given, message):
    path, _ = _bad_models(tmp_path)["dynamic"]
    result = CliRunner().invoke(main, ["tune", str(path), "--target", "llvm", option, given,
                                       "--work-dir", str(tmp_path / "w")])
    assert result.exit_code != 0 and result.output.count("\n") == 1 and message in result.output, result.output
    assert not (tmp_path / "w").exists()


@pytest.mark.tuning
def test_a_dynamic_export_tunes_once_its_axes_are_pinned(tmp_path):
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq", 32]),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, [32, 16])]
    path = _onnx(tmp_path / "matmul.onnx", helper.make_node("MatMul", ["a", "b"], ["y"]), inputs)
    work_dir = tmp_path / "work"
    run = CliRunner().invoke(main, ["tune", str(path), "--input-shape", "a=2x8x32", "--budget", "6s",
                                    "--target", "llvm", "--work-dir", str(work_dir), "--seed", "1"])
    assert run.exit_code == 0, run.output[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    assert report["inputs"] == {"a": [2, 8, 32], "b": [32, 16]}
    assert report["numerics"]["ok"] and report["numerics"]["checked_against"].startswith("onnxruntime")
    assert report["numerics"]["input_sets"] == 2 and not report["cuda_graph"]  # llvm: no CUDA graphs


def test_integer_example_inputs_are_valid_ids_and_a_mask_that_masks():
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from kb_tvm.model_tuning import example_inputs, onnxruntime_outputs

    table = helper.make_tensor("table", TensorProto.FLOAT, [2, 3], [0, 0, 0, 1, 1, 1])  # a 2-token vocabulary
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ids, scale = example_inputs(model)
    assert ids.dtype == np.int64 and scale.dtype == np.float32
    assert ids.tolist() == [[1, 1, 1, 1, 1, 1, 0, 0]]  # a padded tail, ids valid for any vocabulary
    (out,), _ = onnxruntime_outputs(model, [ids, scale])
    assert out[0, :, 0].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    # the second set the numerics check uses pads more and draws other floats
    ids2, scale2 = example_inputs(model, seed=1)
    assert ids2.tolist() == [[1, 1, 1, 1, 0, 0, 0, 0]] and not np.allclose(scale, scale2)


def test_builds_are_compared_in_turns_each_by_its_fastest_round(monkeypatch):
    """The builds with and without the families' kernels are timed one after another, then again:
    a burst of other work on the machine slows one round, not the comparison."""
    from kb_tvm.model_tuning import profiling

    rounds = {"with": [5.0, 1.0], "without": [2.0, 2.0]}  # "with" timed during a burst, then alone
    calls = []

    def timed(executable, target, input_sets):
        calls.append((executable, len(input_sets)))
        return [[executable]], rounds[executable][sum(name == executable for name, _ in calls) - 1]

    monkeypatch.setattr(profiling, "run_and_time", timed)
    results = profiling.time_in_turns(["with", "without"], "llvm", [["set 1"], ["set 2"]])
    assert results == [([["with"]], 1.0), ([["without"]], 2.0)]
    assert calls == [("with", 2), ("without", 2), ("with", 1), ("without", 1)]  # outputs of both sets once
    rounds["alone"], calls[:] = [3.0], []
    assert profiling.time_in_turns(["alone"], "llvm", [["set 1"]], rounds=3) == [([["alone"]], 3.0)]
    assert calls == [("alone", 1)]  # nothing to compare: timed once


def test_unknown_target_and_unwritable_work_dir(tmp_path):
    result = CliRunner().invoke(main, ["tune", str(SHIPPED), "--target", "tpu", "--work-dir", str(tmp_path / "w")])
    assert result.exit_code != 0 and "unknown target 'tpu'" in result.output and not (tmp_path / "w").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(main, ["tune", str(SHIPPED), "--target", "llvm", "--work-dir", str(blocker / "w")])
    assert result.exit_code != 0 and result.output.startswith("Error: work dir")


@pytest.mark.tuning
def test_tune_the_shipped_model_end_to_end(tmp_path):
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    work_dir = tmp_path / "work"
    run = CliRunner().invoke(main, ["tune", str(SHIPPED), "--budget", "20s", "--target", "llvm",
                                    "--work-dir", str(work_dir), "--seed", "1"])
    assert run.exit_code == 0, run.output[-3000:]
    assert "untuned:" in run.stdout and "first batch" in run.stdout and "tuned:" in run.stdout
    report = json.loads((work_dir / "report.json").read_text())
    assert report["numerics"]["ok"] and report["numerics"]["checked_against"].startswith("onnxruntime")
    assert report["seconds_spent"] <= 20 + max(t["seconds"] for t in report["tasks"]) + 5
    tasks = report["tasks"]
    assert len(tasks) > 5 and sum(t["trials"] for t in tasks) == report["trials"] > 0
    shares = [t["share_of_model_time"] for t in tasks]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0)
    assert sum(t["share_at_end"] for t in tasks) == pytest.approx(1.0)
    kept = [t for t in tasks if t["schedule"] == "default"]  # no task got slower: the untuned ones' shares grow
    assert kept and all(t["share_at_end"] >= t["share_of_model_time"] for t in kept)
    # bottleneck analysis: trivial tasks keep their default schedule without a batch; the task
    # hottest once the CPU GEMM family's kernels replaced the defaults they beat is searched first;
    # the hottest task untuned runs faster in the library, as the family's kernel or a tuned record
    # (unless the others got fast enough to make one a bottleneck: then it came back for seconds)
    trivial = [t for t in tasks if (t["retired"] or "").startswith("trivial")]
    assert trivial and all(t["share_of_model_time"] < 0.02 for t in trivial)
    assert all(t["trials"] == 0 for t in trivial if not t["revived"])
    assert all(t["share_of_model_time"] < 0.02 for t in tasks if t["revived"])
    # the CPU GEMM family computes the block's matmuls; the library is the fastest right build of
    # those tried with and without its kernels (a 40-us model: which one wins is the timer's call)
    assert "cpu_gemm: fused_matmul" in run.stdout
    assert all(k["family"] == "cpu_gemm" for k in report["family_kernels"])
    builds = report["family_builds"]
    assert [] in [b["tasks"] for b in builds] and any(b["tasks"] for b in builds)
    assert report["latency_tuned_ms"] == min(b["latency_ms"] for b in builds if b["mismatch"] is None)
    assert sorted(k["task"] for k in report["family_kernels"]) == sorted(
        next(b["tasks"] for b in builds if b["latency_ms"] == report["latency_tuned_ms"]))
    hottest = hottest_at_search_start(report, work_dir, tasks)
    first_batches = [line for line in run.stdout.splitlines() if "first batch" in line]
    assert f"] {hottest['task']}: first batch" in first_batches[0] and hottest["trials"] > 0
    assert tasks[0]["schedule"] == "tuned" or tasks[0]["schedule"].startswith("cpu_gemm rows=")
    assert tasks[0]["latency_after_ms"] < tasks[0]["latency_before_ms"]
    curve = [point["estimated_ms"] for point in report["curve"]]
    assert curve[0] == pytest.approx(report["latency_untuned_ms"], rel=1e-3) and curve == sorted(curve, reverse=True)
    assert (work_dir / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| task | weight | share untuned | share at end |" in (work_dir / "report.md").read_text()
    # each task's speed at the end and the fraction of this CPU's ceiling it reaches
    assert report["ceiling"].startswith(tuple("123456789")) and "numpy matmul" in report["ceiling"]
    matmuls = [t for t in tasks if "matmul" in t["task"]]
    assert matmuls and all(t["gflops"] > 0 and 0 < t["of_ceiling"] for t in matmuls)
    assert f"the ceiling is {report['ceiling']}" in (work_dir / "report.md").read_text()
    # records are TVM's own JSONDatabase files, one per schedule; the library loads and runs with stock TVM
    records = ms.database.JSONDatabase(work_dir=str(work_dir)).get_all_tuning_records()
    assert len(records) == len({str(r.trace) for r in records}) == report["schedules_measured"] <= report["trials"]
    # every measured candidate kept as data, with the module of each task it belongs to
    from kb_tvm.measure.candidate_log import CandidateLog

    rows = list(CandidateLog.read(report["candidates"]))
    assert len(rows) == report["trials"] and {r["task"] for r in rows} == {t["task"] for t in tasks if t["trials"]}
    assert {w["task"] for w in CandidateLog.read(report["candidates"], kind="workload")} == {r["task"] for r in rows}
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(work_dir / "model.so")), tvm.cpu())
    x = np.random.default_rng(0).uniform(-1, 1, (1, 32, 64)).astype("float32")
    out = vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    assert out.shape == (1, 32, 64) and np.isfinite(out).all()
    # layer norm at the end: each row has mean ~0 and variance ~1
    assert np.allclose(out.mean(axis=-1), 0, atol=1e-3) and np.allclose(out.var(axis=-1), 1, atol=1e-2)
    # the candidate log alone rebuilds the tuned model: each tuned task's fastest schedule replays
    from kb_tvm.measure.targets import make_target
    from kb_tvm.model_tuning import (
        TOLERANCES,
        apply_math,
        build,
        example_inputs,
        load_onnx,
        onnxruntime_outputs,
        prepare,
        run_and_time,
        to_relax,
    )
    from kb_tvm.model_tuning.precision import mismatch, model_space
    from kb_tvm.model_tuning.replay import fastest_rows, records_from_candidates

    target = make_target("llvm")
    model = load_onnx(SHIPPED)
    assert report["math"] == "fast"  # on CPUs by default: the tasks are the fast-math ones
    mod = prepare(apply_math(to_relax(model), report["math"]), target)
    replayed = records_from_candidates(report["candidates"], ms.relax_integration.extract_tasks(mod, target),
                                       target, model_space(target, "fp32"))
    fastest = fastest_rows(report["candidates"])
    replayed_records = replayed.get_all_tuning_records()
    assert len(replayed_records) == len(fastest) == len({r["task"] for r in rows})
    assert sorted(min(float(s) for s in r.run_secs) for r in replayed_records) == \
        pytest.approx(sorted(min(row["latency_s"]) for row in fastest.values()), rel=1e-6)
    inputs = example_inputs(model)
    (outputs,), _ = run_and_time(build(mod, target, replayed), target, [inputs], repeat=1)
    assert mismatch(onnxruntime_outputs(model, inputs)[0], outputs, TOLERANCES["fp32"]) is None


def test_a_torn_last_record_is_dropped_before_resuming(tmp_path):
    from kb_tvm.model_tuning import _drop_torn_tail

    path = tmp_path / "database_tuning_record.json"
    path.write_text('[0, {"a": 1}]\n[1, {"b": 2}]\n[2, {"c"')
    _drop_torn_tail(path)
    assert path.read_text() == '[0, {"a": 1}]\n[1, {"b": 2}]\n'


def test_resume_needs_an_earlier_run_and_a_new_run_needs_a_clean_dir(tmp_path):
    work_dir = tmp_path / "w"
    result = CliRunner().invoke(main, ["tune", str(SHIPPED), "--target", "llvm", "--work-dir", str(work_dir),
                                       "--resume"])
    assert result.exit_code != 0 and "nothing to resume" in result.output and result.output.count("\n") == 1
    assert not work_dir.exists()
    work_dir.mkdir()
    (work_dir / "kb_state.json").write_text(json.dumps({"model": str(SHIPPED), "spent_s": 1.0, "tasks": []}))
    result = CliRunner().invoke(main, ["tune", str(SHIPPED), "--target", "llvm", "--work-dir", str(work_dir)])
    assert result.exit_code != 0 and "add --resume" in result.output


@pytest.mark.tuning
def test_resume_after_kill_keeps_records_budget_and_finished_tasks(tmp_path):
    import os
    import signal
    import time

    from tvm.s_tir import meta_schedule as ms

    work_dir = tmp_path / "work"
    model = _mlp_layer_norm(tmp_path / "mlp.onnx")
    command = [sys.executable, "-m", "kb_tvm.cli", "tune", str(model), "--target", "llvm",
               "--work-dir", str(work_dir), "--seed", "2", "--trials-per-batch", "8"]
    # the first run's budget is room, not pace: it is killed as soon as it has what the test
    # resumes (on a slow CPU 50 s ended it first, each task one batch in and none ranked)
    first = subprocess.Popen(command + ["--budget", "120s"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_path = work_dir / "kb_state.json"
    deadline = time.monotonic() + 240
    state = None
    # wait until two tasks have a measured batch and one of them has ranked its regions (ended
    # its coarse phase: when that happens depends on how many batches its regions needed)
    logs = work_dir / "kb_logs"
    while time.monotonic() < deadline:
        assert first.poll() is None, "the first run ended before two tasks were measured and one ranked its regions"
        if state_path.exists():
            state = json.loads(state_path.read_text())
            measured = [len(t["batch_seconds"]) for t in state["tasks"] if t["batch_seconds"]]
            ranked = any('"event": "regions"' in log.read_text() for log in logs.glob("*.jsonl"))
            if len(measured) >= 2 and ranked:
                break
        time.sleep(0.5)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    state = json.loads(state_path.read_text())  # the last state written before the kill
    done_before = {t["name"]: t for t in state["tasks"] if t["batch_seconds"]}
    assert len(done_before) >= 2
    schedules_before = {str(r.trace) for r in ms.database.JSONDatabase(work_dir=str(work_dir)).get_all_tuning_records()}
    assert schedules_before

    second_started = time.time()
    budget = f"{state['spent_s'] + 5:.0f}s"  # 5 s more than the first run spent
    second = subprocess.run(command + ["--budget", budget, "--resume"], capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming:" in second.stdout
    first_batches = [line for line in second.stdout.splitlines() if "first batch" in line]
    assert not any(f" {name}: first batch" in line for line in first_batches for name in done_before)
    report = json.loads((work_dir / "report.json").read_text())
    assert report["seconds_spent"] >= state["spent_s"]  # the budget counts both runs
    tasks = {t["task"]: t for t in report["tasks"]}
    for name, before in done_before.items():
        assert tasks[name]["seconds"] >= before["seconds"] and tasks[name]["trials"] >= before["trials"]
    schedules_after = {str(r.trace) for r in ms.database.JSONDatabase(work_dir=str(work_dir)).get_all_tuning_records()}
    assert schedules_before <= schedules_after  # nothing measured was lost
    # each resumed task goes on from its earlier run's regions: one whose coarse phase had
    # finished does not measure it again
    from kb_tvm.decision_log import earlier_events

    finished_coarse = 0
    for name in done_before:
        runs = [work_dir / "kb_logs" / f"{name}.jsonl", work_dir / "kb_logs" / f"{name}.2.jsonl"]
        assert all(run.exists() for run in runs) and not (work_dir / "kb_logs" / f"{name}.3.jsonl").exists()
        before = [e for e in earlier_events(work_dir / "kb_logs", name) if e["time"] < second_started]
        resumed = [json.loads(line) for line in runs[1].read_text().splitlines()]
        (restored,) = [e for e in resumed if e["event"] == "resumed"]
        assert restored["earlier_trials"] == sum(len(e["candidates"]) for e in before if e["event"] == "batch") > 0
        if any(e["event"] == "regions" for e in before):
            finished_coarse += 1
            assert restored["coarse_finished_before"]
            assert all(e["phase"] != "coarse" for e in resumed if e["event"] == "batch")
    assert finished_coarse >= 1
    assert report["numerics"]["ok"]
