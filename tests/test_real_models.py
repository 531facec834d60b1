"""Real architectures end to end: torchvision's ResNet-18 and a tiny Hugging Face BERT encoder,
exported to ONNX with random weights and dynamic axes by workloads/export_models.py (as a user
runs it), pinned with --input-shape and tuned on llvm under a small budget.

Exporting needs torch (the models extra), which CI does not install (PyPI's Linux torch is
CUDA's, ~6 GB): there the BERT the script exported into workloads/ is tuned; where torch is
installed both are exported afresh and tuned."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

CASES = {  # export arguments, the shapes pinned for tuning, the fewest tasks a real model of it has
    "resnet18": (["resnet18", "--image", "32"], {"input": (1, 3, 32, 32)}, 12),
    "bert": (["bert", "--layers", "2", "--hidden", "64", "--heads", "2", "--vocab", "1000", "--seq", "16"],
             {"input_ids": (1, 16), "attention_mask": (1, 16)}, 8),
}
DYNAMIC = {"resnet18": {"input": ["batch"]},
           "bert": {"input_ids": ["batch", "sequence"], "attention_mask": ["batch", "sequence"]}}


def _run_at_once(commands: dict[str, list[str]], timeout: float) -> dict[str, tuple[int, str, str]]:
    """One command per model, all running at once (much of each is one busy core: imports, TVM's
    builds, Python), as name -> (exit code, stdout, stderr)."""
    processes = {name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for name, command in commands.items()}
    results = {}
    try:
        for name, process in processes.items():
            out, err = process.communicate(timeout=timeout)
            results[name] = (process.returncode, out, err)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    return results


SHIPPED_BERT = Path(__file__).resolve().parent.parent / "workloads" / "bert_tiny.onnx"


@pytest.mark.tuning
def test_an_exported_bert_tunes_with_its_dynamic_axes_pinned(tmp_path):
    """The 2-layer BERT export_models.py wrote into workloads/ (see CASES["bert"])."""
    import onnx

    graph_inputs = onnx.load(str(SHIPPED_BERT)).graph.input
    assert {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim if d.dim_param]
            for i in graph_inputs} == DYNAMIC["bert"]
    _tune_and_check({"bert": SHIPPED_BERT}, tmp_path)


@pytest.mark.tuning
def test_real_architectures_export_and_tune(tmp_path):
    pytest.importorskip("torch", reason="exporting needs the models extra (torch, torchvision, transformers)")
    import onnx

    models = {name: tmp_path / f"{name}.onnx" for name in CASES}
    exports = _run_at_once({name: [sys.executable, "-m", "kb_tvm.workloads.export_models", *CASES[name][0],
                                "--out", str(models[name])] for name in CASES}, timeout=300)
    for name, (code, out, err) in exports.items():
        assert code == 0, (name, err[-3000:])
        # checked at export: onnxruntime on the exported file computes what torch computes
        assert float(re.search(r"max abs error vs torch (\S+)\)", out).group(1)) < 1e-4, (name, out)
        # dynamic axes, as real exports carry: tuning needs them pinned
        graph_inputs = onnx.load(str(models[name]), load_external_data=False).graph.input
        assert {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim if d.dim_param]
                for i in graph_inputs} == DYNAMIC[name]

    _tune_and_check(models, tmp_path)


def _tune_and_check(models: dict, tmp_path) -> None:
    # cold (--no-experience): what the suite's earlier runs left in its library is no part of this
    commands = {}
    for name in models:
        _, shapes, _ = CASES[name]
        pins = [arg for input_name, dims in shapes.items()
                for arg in ("--input-shape", f"{input_name}={'x'.join(map(str, dims))}")]
        commands[name] = [sys.executable, "-m", "kb_tvm.cli", "tune", str(models[name]), *pins, "--budget", "5s",
                          "--target", "llvm", "--work-dir", str(tmp_path / f"work-{name}"), "--seed", "1",
                          "--no-experience"]
    for name, (code, _, err) in _run_at_once(commands, timeout=600).items():
        assert code == 0, (name, err[-3000:])
        _, shapes, fewest_tasks = CASES[name]
        work_dir = tmp_path / f"work-{name}"
        report = json.loads((work_dir / "report.json").read_text())
        assert report["inputs"] == {input_name: list(dims) for input_name, dims in shapes.items()}
        assert report["numerics"]["ok"] and report["numerics"]["checked_against"].startswith("onnxruntime"), \
            (name, report["numerics"])
        tasks = report["tasks"]
        assert len(tasks) >= fewest_tasks, (name, [t["task"] for t in tasks])
        # the hottest task was tuned first, and every task that got seconds got measured trials
        assert tasks[0]["trials"] > 0 and sum(t["trials"] for t in tasks) == report["trials"], (name, tasks)
        assert all(t["trials"] > 0 for t in tasks if t["seconds"] or t["schedule"] == "tuned"), (name, tasks)
        assert (work_dir / "model.so").is_file() and report["latency_tuned_ms"] > 0


def test_the_torch_baselines_size_only_a_custom_bert_as_the_export_does(capsys, tmp_path):
    from kb_tvm.workloads.torch_baselines import main as baselines

    with pytest.raises(SystemExit):
        baselines(["bert-base", "--layers", "1", "--out", str(tmp_path / "t.json")])
    assert "--layers size a custom BERT: use `bert`, not `bert-base`" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
