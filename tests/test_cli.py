"""The kb-tvm command line as a user runs it."""

import json
import statistics

import pytest
from click.testing import CliRunner

from kb_tvm.cli import main
from kb_tvm.decision_log import read_log


@pytest.mark.parametrize("args, message", [
    (["tune-op", "no-such-op"], "unknown workload 'no-such-op'; known: gemm-128"),
    (["tune-op", "gemm-128", "--budget", "ten minutes"], 'budget \'ten minutes\' is not a duration: use "90s"'),
    (["tune-op", "gemm-128", "--budget", "0s"], "must be a positive duration"),
    (["tune-op", "gemm-128", "--repeatable"], "--repeatable needs --seed N"),
    (["tune-op", "gemm-128", "--repeatable", "--seed", "1", "--strategy", "evolutionary"],
     "--repeatable applies to --strategy kb"),
    (["tune-op", "gemm-128", "--target", "tpu"], "unknown target 'tpu': use llvm, cuda, or a JSON target"),
    (["tune-op", "gemm-128", "--target", '{"kind": "llvm"'], "is not valid JSON"),
])
def test_bad_input_is_a_one_line_error(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and message in lines[0]


def test_an_unwritable_work_dir_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = CliRunner().invoke(main, ["tune-op", "gemm-128", "--target", "llvm",
                                       "--work-dir", str(blocker / "work")])
    assert result.exit_code != 0
    assert result.output.startswith("Error: work dir") and result.output.count("\n") == 1


def test_ops_lists_every_workload_family():
    result = CliRunner().invoke(main, ["ops"])
    assert result.exit_code == 0
    for family in ("gemm-", "gemm-gelu-", "conv2d-", "batch_matmul-", "softmax-", "layernorm-", "-fp16",
                   "linear-MxNxK-fp16"):
        assert family in result.output


@pytest.mark.tuning
def test_tune_op_end_to_end_shows_progress_and_a_result(tmp_path):
    work_dir = tmp_path / "work"
    out = tmp_path / "result.json"
    run = CliRunner().invoke(main, ["tune-op", "gemm-128", "--budget", "20s", "--target", "llvm",
                                    "--work-dir", str(work_dir), "--json-out", str(out), "--seed", "3"])
    assert run.exit_code == 0, run.output[-2000:]
    lines = run.stdout.splitlines()
    progress = [line for line in lines if line.startswith("[")]
    assert progress and all("trials" in line and "best" in line for line in progress)
    # the search's phases are shown as they happen, coarse first
    phases = [line.split(":")[0] for line in lines if line.startswith(("coarse:", "fine:", "refine:"))]
    assert phases[:2] == ["coarse", "fine"]
    best_line = next(line for line in lines if line.startswith("best "))
    assert "GFLOP/s, re-timed" in best_line and "trials" in best_line
    # the CPU GEMM family's variants were a region of the search, measured before MetaSchedule's
    assert any(line.startswith("cpu_gemm region: best variant rows=") for line in lines)
    result = json.loads(out.read_text())
    assert result["template"]["family"] == "cpu_gemm" and result["template"]["ms"] > 0
    assert result["strategy"] == "kb" and result["final_ms"] > 0 and result["trials"] > 0
    assert result["gflops"] == pytest.approx(2 * 128**3 / (result["final_ms"] * 1e-3) / 1e9)
    assert list((work_dir / "kb_logs").glob("*.jsonl"))
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from kb_tvm.kernels.task_search import read_rows

    # stock MetaSchedule reads the records: one per schedule, a value per measurement of it
    records = JSONDatabase(work_dir=str(work_dir)).get_all_tuning_records()
    assert len({str(r.trace) for r in records}) == len(records)
    (log_path,) = (work_dir / "kb_logs").glob("*.jsonl")
    from kb_tvm.measure.targets import physical_cores

    # the search sizes its first batch by the builds kb's builder runs at once (one per core here)
    (start,) = [e for e in read_log(log_path) if e["event"] == "start"]
    assert start["build_workers"] == physical_cores()
    remeasured = [c for e in read_log(log_path) if e["event"] == "batch" for c in e["candidates"]
                  if c["origin"] == "remeasure"]
    assert remeasured, "the best candidates were never measured again"
    variants = read_rows(work_dir)  # the family's, counted as trials too
    assert variants and len(records) == result["trials"] - len(remeasured) - len(variants)
    assert any(len(r.run_secs) > 1 for r in records)
    # what is reported is the median of the deployed record's measurements
    medians = [statistics.median(float(s) for s in r.run_secs) * 1e3 for r in records if float(r.run_secs[0]) < 1e9]
    assert result["best_ms"] == pytest.approx(min(medians), rel=1e-5)
    target = json.loads(result["target"])
    assert target["mcpu"] and result["pipeline"] == "kb"  # the detected host CPU, not bare llvm
    assert f"mcpu={target['mcpu']}" in lines[0]


def test_tune_shows_the_hopper_template_stage_a_line_a_task(capsys):
    """On an sm_90 GPU the template's variants are searched before MetaSchedule's (tens of
    seconds): `kb-tvm tune` says what each matmul task got, or why it was skipped."""
    from kb_tvm.cli import _show_model_event

    _show_model_event({"event": "kernel_best", "family": "hopper_gemm", "task": "fused_matmul_cast1_add2",
                       "seconds": 4.56e-6, "default_s": 4.21e-5, "variant": "bm=64, bn=64, stages=3"})
    _show_model_event({"event": "kernel_skip", "family": "hopper_gemm", "task": "fused_matmul1_softmax",
                       "why": "2 reduction blocks of 4, not one GEMM"})
    _show_model_event({"event": "kernel_variant", "family": "hopper_gemm", "task": "fused_matmul_cast1_add2",
                       "seconds": 5e-6})
    assert capsys.readouterr().out.splitlines() == [
        "hopper_gemm: fused_matmul_cast1_add2: 0.0046 ms (untuned 0.0421) with bm=64, bn=64, stages=3",
        "hopper_gemm: fused_matmul1_softmax skipped: 2 reduction blocks of 4, not one GEMM",
    ]
