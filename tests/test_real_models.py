"""Real architectures end to end: torchvision's ResNet-18 and ViT, Hugging Face BERT, a
Llama-style decoder and GPT-2, exported to ONNX with random weights and dynamic axes by
workloads/export_models.py (as a user runs it), pinned with --input-shape and tuned on llvm
under a small budget.

Exporting needs torch (the models extra), which CI does not install (PyPI's Linux torch is
CUDA's, ~6 GB): there the tiny exports shipped in workloads/ are tuned, in fp32, fp16 and bf16;
where torch is installed ResNet-18 and BERT are also exported afresh and tuned."""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from report_helpers import hottest_at_search_start

CASES = {  # export arguments, the shapes pinned for tuning, the fewest tasks a real model of it has
    "resnet18": (["resnet18", "--image", "32"], {"input": (1, 3, 32, 32)}, 12),
    "bert": (["bert", "--layers", "2", "--hidden", "64", "--heads", "2", "--vocab", "1000", "--seq", "16"],
             {"input_ids": (1, 16), "attention_mask": (1, 16)}, 8),
}
DYNAMIC = {"resnet18": {"input": ["batch"]},
           "bert": {"input_ids": ["batch", "sequence"], "attention_mask": ["batch", "sequence"]}}


def _run_at_once(commands: dict[str, list[str]], timeout: float) -> dict[str, tuple[int, str, str]]:
    """One command per model, all running at once (much of each is one busy core: imports, TVM's
    builds, Python), as name -> (exit code, stdout, stderr). Their output goes to files: a pipe
    read only after the commands before it had ended filled up, and its command then stalled
    in a write for seconds of its tuning budget."""
    files = {name: (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for name in commands}
    processes = {name: subprocess.Popen(command, stdout=files[name][0], stderr=files[name][1], text=True)
                 for name, command in commands.items()}
    results = {}
    try:
        for name, process in processes.items():
            process.wait(timeout=timeout)
            out, err = files[name]
            out.seek(0)
            err.seek(0)
            results[name] = (process.returncode, out.read(), err.read())
    finally:
        for name, process in processes.items():
            if process.poll() is None:
                process.kill()
                process.wait()
            for file in files[name]:
                file.close()
    return results


WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
TOKENS16 = {"input_ids": (1, 16), "attention_mask": (1, 16)}
SHIPPED = {  # what export_models.py wrote into workloads/: shapes pinned, fewest tasks, precision tuned in
    "bert": (WORKLOADS / "bert_tiny.onnx", TOKENS16, 8, "fp32"),  # CASES["bert"]
    # a Llama-style decoder (RMSNorm, rotary, GQA, causal sdpa, SwiGLU): fp16 crashed in ToMixedPrecision
    "llama": (WORKLOADS / "llama_tiny.onnx", TOKENS16, 8, "fp16"),
    # GPT-2 (GELU's cube): bf16 failed to lower ("power only applies to float")
    "gpt2": (WORKLOADS / "gpt2_tiny.onnx", TOKENS16, 8, "bf16"),
    "vit": (WORKLOADS / "vit_tiny.onnx", {"input": (1, 3, 32, 32)}, 8, "fp32"),
}


@pytest.mark.tuning
def test_the_shipped_architectures_tune_in_their_precisions(tmp_path):
    """The tiny BERT, Llama-style decoder, GPT-2 and ViT in workloads/, all at once."""
    import onnx

    graph_inputs = onnx.load(str(SHIPPED["bert"][0])).graph.input
    assert {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim if d.dim_param]
            for i in graph_inputs} == DYNAMIC["bert"]
    _tune_and_check({name: path for name, (path, *_) in SHIPPED.items()}, tmp_path,
                    {name: (shapes, fewest, precision) for name, (_, shapes, fewest, precision) in SHIPPED.items()})


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


def _tune_and_check(models: dict, tmp_path, cases: dict | None = None) -> None:
    """cases: name -> (shapes pinned, fewest tasks, precision); default CASES' in fp32."""
    cases = cases or {name: (shapes, fewest, "fp32") for name, (_, shapes, fewest) in CASES.items()}
    # cold (--no-experience): what the suite's earlier runs left in its library is no part of this.
    # 10 s: with four tunes on two cores, the families' first variants and the measuring workers'
    # start took all of 5 s on some runs, and a model then had no batch at all
    commands = {}
    for name in models:
        shapes, _, precision = cases[name]
        pins = [arg for input_name, dims in shapes.items()
                for arg in ("--input-shape", f"{input_name}={'x'.join(map(str, dims))}")]
        commands[name] = [sys.executable, "-m", "kb_tvm.cli", "tune", str(models[name]), *pins, "--budget", "10s",
                          "--target", "llvm", "--work-dir", str(tmp_path / f"work-{name}"), "--seed", "1",
                          "--no-experience", "--precision", precision]
    for name, (code, _, err) in _run_at_once(commands, timeout=600).items():
        assert code == 0, (name, err[-3000:])
        shapes, fewest_tasks, precision = cases[name]
        work_dir = tmp_path / f"work-{name}"
        report = json.loads((work_dir / "report.json").read_text())
        assert report["inputs"] == {input_name: list(dims) for input_name, dims in shapes.items()}
        assert report["numerics"]["ok"] and report["numerics"]["checked_against"].startswith("onnxruntime"), \
            (name, report["numerics"])
        # checked before the budget too, and the reference varies with its input
        assert report["numerics"]["untuned"]["ok"] and not report["numerics"]["constant_reference"], name
        assert report["precision"] == precision
        tasks = report["tasks"]
        assert len(tasks) >= fewest_tasks, (name, [t["task"] for t in tasks])
        # the hottest task MetaSchedule can search (once the CPU GEMM family's kernels replaced the
        # defaults they beat) was tuned first, and every task that got seconds got measured
        # trials; those it cannot (a schedule rule fails on them) are named with why
        searched = [t for t in tasks if t["task"] not in report["tasks_without_design_space"]]
        assert all(t["trials"] is None for t in tasks if t not in searched), (name, tasks)
        assert hottest_at_search_start(report, work_dir, searched)["trials"] > 0, (name, tasks)
        assert sum(t["trials"] for t in searched) == report["trials"], (name, tasks)
        assert all(t["trials"] > 0 for t in tasks if t["seconds"] or t["schedule"] == "tuned"), (name, tasks)
        assert (work_dir / "model.so").is_file() and report["latency_tuned_ms"] > 0


def test_the_torch_baselines_size_only_a_custom_bert_as_the_export_does(capsys, tmp_path):
    from kb_tvm.workloads.torch_baselines import main as baselines

    with pytest.raises(SystemExit):
        baselines(["bert-base", "--layers", "1", "--out", str(tmp_path / "t.json")])
    assert "--layers size a custom BERT: use `bert`, not `bert-base`" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
