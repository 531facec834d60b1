"""The Llama, GPT-2 and ViT toys that workloads/export_models.py wrote into workloads/ (the commands
are in its docstring and in TOYS below): what they take and give, and what onnxruntime computes from
them at shapes other than the traced ones. Where torch is installed (not in CI), the same toys are
exported afresh from the command line and checked against torch. Importing and tuning them in TVM
is tested elsewhere."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "workloads" / "export_models.py"
VOCAB = 256
INT64, FLOAT = 7, 1  # onnx.TensorProto's element types
TOKENS = {"input_ids": (INT64, ["batch", "sequence"]), "attention_mask": (INT64, ["batch", "sequence"])}
TOYS = {  # export arguments; the graph's inputs and outputs: name -> (element type, dims, a name where dynamic)
    "llama": (["llama", "--layers", "1", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "172",
               "--vocab", str(VOCAB), "--positions", "128", "--seq", "16"],
              TOKENS, {"logits": (FLOAT, ["batch", "sequence", VOCAB])}),
    "gpt2": (["gpt2", "--layers", "1", "--hidden", "64", "--heads", "4", "--vocab", str(VOCAB), "--positions", "64",
              "--seq", "16"],
             TOKENS, {"logits": (FLOAT, ["batch", "sequence", VOCAB])}),
    "vit": (["vit", "--image", "32", "--patch", "8", "--layers", "1", "--heads", "4", "--hidden", "64", "--ffn", "128",
             "--classes", "10"],
            {"input": (FLOAT, ["batch", 3, 32, 32])}, {"logits": (FLOAT, ["batch", 10])}),
    "hf_vit": (["hf-vit", "--image", "32", "--patch", "8", "--layers", "1", "--heads", "4", "--hidden", "64", "--ffn",
                "128", "--classes", "10"],
               {"input": (FLOAT, ["batch", 3, 32, 32])}, {"logits": (FLOAT, ["batch", 10])}),
}


def _shipped(name: str) -> Path:
    return ROOT / "workloads" / f"{name}_tiny.onnx"


def _signature(values) -> dict:
    return {v.name: (v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in values}


def _check_signature(name: str, path: Path) -> None:
    import onnx

    graph = onnx.load(str(path)).graph
    _, inputs, outputs = TOYS[name]
    assert _signature(graph.input) == inputs, name
    assert _signature(graph.output) == outputs, name


@pytest.mark.parametrize("name", TOYS)
def test_a_shipped_toy_takes_and_gives_what_the_export_promises(name):
    _check_signature(name, _shipped(name))
    assert _shipped(name).stat().st_size < 2**20  # it ships in the wheel


def _session(name: str):
    onnxruntime = pytest.importorskip("onnxruntime")
    return onnxruntime.InferenceSession(str(_shipped(name)), providers=["CPUExecutionProvider"])


def _logits(session, ids, mask=None):
    mask = np.ones_like(ids) if mask is None else mask
    (logits,) = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})
    assert logits.shape == (*ids.shape, VOCAB) and np.isfinite(logits).all()
    return logits


def _differ(a, b, axis) -> np.ndarray:
    """Where a and b differ, reduced over `axis`."""
    return np.abs(a - b).max(axis=axis) > 1e-4


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_a_shipped_causal_lm_reads_its_tokens_causally_and_honours_its_mask(name):
    # batch 2, sequence 8: not the 1 x 16 traced, so the axes are dynamic indeed
    session, rng = _session(name), np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, (2, 8), dtype=np.int64)
    logits = _logits(session, ids)
    other = (ids + rng.integers(1, VOCAB, ids.shape)) % VOCAB  # every token another
    assert _differ(logits, _logits(session, other), -1).all()
    # a new last token changes the last position's logits only: causal attention
    last = ids.copy()
    last[:, -1] = (last[:, -1] + 1) % VOCAB
    changed = _differ(logits, _logits(session, last), -1)
    assert not changed[:, :-1].any() and changed[:, -1].all()
    # padding the last 3 positions changes their logits (a padded token is attended by none, not
    # even itself) and no earlier one's: the mask is an input of the graph, not traced away
    mask = np.ones_like(ids)
    mask[:, 5:] = 0
    changed = _differ(logits, _logits(session, ids, mask), -1)
    assert not changed[:, :5].any() and changed[:, 5:].all()


@pytest.mark.parametrize("name", ["vit", "hf_vit"])  # torchvision's and Hugging Face's
def test_the_shipped_vit_tells_images_apart(name):
    # the test the ViT's random head is for: torchvision's zero head gives its bias for any image
    session, rng = _session(name), np.random.default_rng(0)
    images = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    (logits,) = session.run(["logits"], {"input": images})
    assert logits.shape == (3, 10) and np.isfinite(logits).all()
    assert _differ(logits[:, None], logits[None], -1).sum() == 6  # each image's logits differ from the others'
    (alone,) = session.run(["logits"], {"input": images[1:2]})  # batch 1 (the axis is dynamic) of image 1
    np.testing.assert_allclose(alone[0], logits[1], atol=1e-5)


DECODE = ROOT / "tests" / "models" / "llama_decode_tiny.onnx"  # tests/test_attention.py says how it was made


def test_the_decode_step_continues_from_the_cache_it_returns():
    """Two new tokens after a cache of 5 positions, or one and then the other on the cache the
    first returned: the second's logits agree. All four axes are dynamic and named for `--dim`."""
    import onnx

    onnxruntime = pytest.importorskip("onnxruntime")
    graph = onnx.load(str(DECODE)).graph
    cache = ["batch", 2, "past", 16]
    assert _signature(graph.input) == {
        "input_ids": (INT64, ["batch", "sequence"]), "attention_mask": (INT64, ["batch", "total"]),
        "position_ids": (INT64, ["batch", "sequence"]),
        "past_key_values.0.key": (FLOAT, cache), "past_key_values.0.value": (FLOAT, cache)}
    assert _signature(graph.output) == {"logits": (FLOAT, ["batch", "sequence", VOCAB]),
                                        "present.0.key": (FLOAT, ["batch", 2, "total", 16]),
                                        "present.0.value": (FLOAT, ["batch", 2, "total", 16])}
    session, rng = onnxruntime.InferenceSession(str(DECODE), providers=["CPUExecutionProvider"]), \
        np.random.default_rng(0)
    past = {f"past_key_values.0.{kind}": rng.standard_normal((1, 2, 5, 16)).astype(np.float32)
            for kind in ("key", "value")}
    ids = rng.integers(0, VOCAB, (1, 2), dtype=np.int64)

    def step(tokens, appended, cache, mask=None):  # `appended`: tokens the cache holds past the first 5
        start = 5 + appended
        mask = np.ones((1, start + tokens.shape[1]), np.int64) if mask is None else mask
        positions = np.arange(start, start + tokens.shape[1], dtype=np.int64)[None]
        return session.run(None, {"input_ids": tokens, "attention_mask": mask, "position_ids": positions, **cache})

    both = step(ids, 0, past)
    first = step(ids[:, :1], 0, past)
    assert first[1].shape == (1, 2, 6, 16)
    np.testing.assert_array_equal(first[1][:, :, :5], past["past_key_values.0.key"])  # the cache, then the new key
    second = step(ids[:, 1:], 1, {f"past_key_values.0.{kind}": first[1 + i] for i, kind in enumerate(("key", "value"))})
    np.testing.assert_allclose(second[0][:, 0], both[0][:, 1], atol=1e-5)
    # the mask reaches the cache: leaving its first positions out changes the logits
    mask = np.ones((1, 7), np.int64)
    mask[:, :3] = 0
    assert _differ(step(ids, 0, past, mask)[0], both[0], -1).all()


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (["llama", "--hidden", "64", "--heads", "4", "--kv-heads", "3"], "heads=4 must be a multiple of kv_heads=3"),
    (["llama", "--hidden", "60", "--heads", "4", "--kv-heads", "2"], "hidden=60 / heads=4 = 15: rotary embeddings "
     "need an even head size"),
    (["gpt2", "--hidden", "66", "--heads", "4"], "hidden=66 must be a multiple of heads=4"),
    (["vit", "--image", "30", "--patch", "8"], "image=30 must be a multiple of patch=8"),
    (["hf-vit", "--image", "30", "--patch", "8"], "image=30 must be a multiple of patch=8"),
])
def test_inconsistent_sizes_are_refused_in_one_line_before_torch_is_needed(tmp_path, args, message):
    # checked before torch is imported: refused at once, models extra installed or not
    result = _run(*args, "--out", str(tmp_path / "bad.onnx"))
    assert result.returncode == 1 and result.stderr == f"error: {message}\n", result.stderr
    assert not (tmp_path / "bad.onnx").exists()


@pytest.mark.parametrize("args, message", [
    (["gpt2", "--kv-heads", "2"], "--kv-heads size a custom Llama: use `llama`, not `gpt2`"),
    (["vit-b16", "--patch", "8"], "--patch size a custom ViT: use `vit`, not `vit-b16`"),
    (["bert-base", "--layers", "1"], "--layers size a custom BERT: use `bert`, not `bert-base`"),
    (["resnet18", "--vocab", "9"], "--vocab size a custom BERT, Llama or GPT-2: use `bert`, `llama` or `gpt2`, "
     "not `resnet18`"),
    (["bert", "--past", "8"], "--past exports a decoder's step with a key/value cache: llama or gpt2, not `bert`"),
])
def test_a_size_for_another_model_is_a_usage_error(tmp_path, args, message):
    result = _run(*args, "--out", str(tmp_path / "bad.onnx"))
    assert result.returncode == 2 and result.stderr.splitlines()[-1].endswith(f"error: {message}"), result.stderr
    assert not (tmp_path / "bad.onnx").exists()


def test_a_sequence_past_the_positions_is_refused(tmp_path):
    pytest.importorskip("transformers", reason="the positions are checked against the transformers config")
    result = _run(*TOYS["gpt2"][0], "--seq", "65", "--out", str(tmp_path / "bad.onnx"))
    assert result.returncode == 1 and result.stderr.splitlines()[-1] == "error: seq=65 is longer than the model's " \
                                                                        "64 positions", result.stderr
    assert not (tmp_path / "bad.onnx").exists()


def test_the_toys_export_afresh_and_match_torch(tmp_path):
    pytest.importorskip("torch", reason="exporting needs the models extra (torch, torchvision, transformers)")
    paths = {name: tmp_path / f"{name}.onnx" for name in TOYS}
    processes = {name: subprocess.Popen([sys.executable, str(SCRIPT), *TOYS[name][0], "--out", str(paths[name])],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in TOYS}
    for name, process in processes.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, (name, err[-3000:])
        # checked at export: onnxruntime on the exported file computes what torch computes
        assert float(re.search(r"max abs error vs torch (\S+)\)", out).group(1)) < 1e-4, (name, out)
        _check_signature(name, paths[name])


def test_weights_the_exporter_scatters_past_2_gb_are_gathered_into_one_file(tmp_path, monkeypatch):
    # the TorchScript exporter writes each weight of a model past 2 GB to a file of its own (157 for
    # TinyLlama-1.1B); made small here, as it leaves them
    import importlib.util

    import onnx
    from onnx import helper, numpy_helper

    spec = importlib.util.spec_from_file_location("export_models", SCRIPT)
    export_models = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, export_models)  # its dataclass looks itself up there
    spec.loader.exec_module(export_models)
    rng = np.random.default_rng(0)
    weights = {name: rng.standard_normal((64, 64)).astype(np.float32) for name in ("w1", "w2")}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])],
                              [numpy_helper.from_array(w, name) for name, w in weights.items()])
    path = tmp_path / "out" / "big.onnx"
    path.parent.mkdir()
    onnx.save_model(helper.make_model(graph), str(path), save_as_external_data=True, all_tensors_to_one_file=False,
                    size_threshold=0)
    assert sorted(p.name for p in path.parent.iterdir()) == ["big.onnx", "w1", "w2"]

    size = export_models._gather_weights(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["big.onnx", "big.onnx.data"]
    assert size == path.stat().st_size + (path.parent / "big.onnx.data").stat().st_size > 2 * 64 * 64 * 4
    loaded = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    assert all(np.array_equal(loaded[name], w) for name, w in weights.items()) and loaded.keys() == weights.keys()
