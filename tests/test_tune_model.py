"""`kb-tvm tune MODEL.onnx` as a user runs it: bad inputs, then the shipped model end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb_tvm.cli import main

SHIPPED = Path(__file__).resolve().parent.parent / "workloads" / "transformer_block.onnx"


def _onnx(path, node, inputs, opsets=(("", 17),)):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    onnx.save(model, path)
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


def test_dynamic_shape_error_says_how_to_fix_it(tmp_path):
    path, _ = _bad_models(tmp_path)["dynamic"]
    result = CliRunner().invoke(main, ["tune", str(path), "--target", "llvm", "--work-dir", str(tmp_path / "w")])
    assert "make_dynamic_shape_fixed --dim_param batch" in result.output


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
    run = subprocess.run(
        [sys.executable, "-m", "kb_tvm.cli", "tune", str(SHIPPED), "--budget", "40s", "--target", "llvm",
         "--work-dir", str(work_dir), "--seed", "1"],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "untuned:" in run.stdout and "first batch" in run.stdout and "tuned:" in run.stdout
    report = json.loads((work_dir / "report.json").read_text())
    assert report["numerics"]["ok"] and report["latency_tuned_ms"] > 0
    assert report["seconds_spent"] <= 40 + max(t["seconds"] for t in report["tasks"]) + 5
    tasks = report["tasks"]
    assert len(tasks) > 5 and sum(t["trials"] for t in tasks) == report["trials"] > 0
    shares = [t["share_of_model_time"] for t in tasks if t["latency_after_ms"] is not None]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0)
    assert "| task | weight |" in (work_dir / "report.md").read_text()
    # records are TVM's own JSONDatabase; the library loads and runs with stock TVM
    assert len(ms.database.JSONDatabase(work_dir=str(work_dir)).get_all_tuning_records()) == report["trials"]
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(work_dir / "model.so")), tvm.cpu())
    x = np.random.default_rng(0).uniform(-1, 1, (1, 32, 64)).astype("float32")
    out = vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    assert out.shape == (1, 32, 64) and np.isfinite(out).all()
    # layer norm at the end: each row has mean ~0 and variance ~1
    assert np.allclose(out.mean(axis=-1), 0, atol=1e-3) and np.allclose(out.var(axis=-1), 1, atol=1e-2)
