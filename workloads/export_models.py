"""Exports real architectures to ONNX for `kb-tvm tune`, with random weights (no download, no network).

torchvision's ResNets and ViTs, and Hugging Face's BERT encoder and Llama and GPT-2 causal LMs, each
built from its config with random weights from a fixed torch seed:

    python -m kb_tvm.workloads.export_models resnet50 --batch 1 --image 224 --out resnet50.onnx
    python -m kb_tvm.workloads.export_models bert-base --batch 1 --seq 128 --out bert.onnx
    python -m kb_tvm.workloads.export_models resnet18 --image 32 --out resnet18.onnx
    python -m kb_tvm.workloads.export_models bert --layers 2 --hidden 64 --heads 2 --vocab 1000 --seq 16 \\
        --out tiny-bert.onnx
    python -m kb_tvm.workloads.export_models llama --seq 128 --out tinyllama.onnx   # TinyLlama-1.1B's shape
    python -m kb_tvm.workloads.export_models gpt2 --seq 128 --out gpt2.onnx         # GPT-2 small
    python -m kb_tvm.workloads.export_models vit-b16 --out vit-b16.onnx             # ViT-B/16, 224x224
    python -m kb_tvm.workloads.export_models llama --seq 1 --past 511 --out step.onnx  # a decode step

`llama` (LlamaForCausalLM, sdpa attention: causal scaled_dot_product_attention, grouped-query when
--kv-heads is fewer than --heads), `gpt2` (GPT2LMHeadModel, sdpa), `vit` (torchvision's
VisionTransformer) and `hf-vit` (Hugging Face's ViTForImageClassification, sdpa) are sized by the
options; by default they are TinyLlama-1.1B (22 layers, hidden 2048, 32 heads, 4 key/value heads,
intermediate 5632, vocab 32000, 2048 positions), GPT-2 small (12 layers, hidden 768, 12 heads,
vocab 50257, 1024 positions) and ViT-B/16 (patch 16, 12 layers, 12 heads, hidden 768, MLP 3072,
1000 classes). The toys shipped in workloads/ (tests/test_export_archs.py)
were made with (from the repository root):

    python -m kb_tvm.workloads.export_models llama --layers 1 --hidden 64 --heads 4 --kv-heads 2 \\
        --ffn 172 --vocab 256 --positions 128 --seq 16 --out workloads/llama_tiny.onnx
    python -m kb_tvm.workloads.export_models gpt2 --layers 1 --hidden 64 --heads 4 --vocab 256 \\
        --positions 64 --seq 16 --out workloads/gpt2_tiny.onnx
    python -m kb_tvm.workloads.export_models vit --image 32 --patch 8 --layers 1 --heads 4 --hidden 64 \\
        --ffn 128 --classes 10 --out workloads/vit_tiny.onnx
    python -m kb_tvm.workloads.export_models hf-vit --image 32 --patch 8 --layers 1 --heads 4 --hidden 64 \\
        --ffn 128 --classes 10 --out workloads/hf_vit_tiny.onnx

Needs the `models` extra (`pip install "kb-tvm[models]"`; add `--extra-index-url
https://download.pytorch.org/whl/cpu` for CPU-only torch). Like real exports, the files carry
dynamic axes:
- ResNets and ViTs: input `input` [batch, 3, image, image] float32, output `logits` [batch,
  classes]; batch dynamic (a ViT's image size is fixed by its position embeddings).
- BERT: inputs `input_ids` and `attention_mask` [batch, seq] int64, output `last_hidden_state`
  [batch, seq, hidden]; batch and sequence dynamic.
- Llama and GPT-2: inputs `input_ids` and `attention_mask` [batch, seq] int64, output `logits`
  [batch, seq, vocab]; batch and sequence dynamic; no key/value cache in or out (use_cache=False).
- Llama and GPT-2 with `--past N`: one decode step with a key/value cache, as optimum's "with
  past" exports: `--seq` new tokens after N cached ones. Inputs `input_ids` and `position_ids`
  [batch, sequence], `attention_mask` [batch, total] and `past_key_values.L.key` / `.value`
  [batch, key/value heads, past, head size] for each layer L; outputs `logits` and
  `present.L.key` / `.value` [.., total, ..]; the four axes dynamic.
`kb-tvm tune` pins them with `--input-shape`, e.g. `--input-shape input=1x3x224x224` or
`--input-shape input_ids=1x128 --input-shape attention_mask=1x128`, or by the axes' names,
`--dim batch=1 --dim sequence=128` (a decode step: `--dim batch=1 --dim sequence=1 --dim
past=511 --dim total=512`). `--batch`, `--image` and `--seq`
set only the example the export traces and checks (and a ViT's image size). Every export is checked
against torch's own output in onnxruntime (where installed) and the max abs error printed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

OPSET = 17
RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
BERTS = ("bert-base", "bert")
CAUSAL_LMS = ("llama", "gpt2")
VITS = ("vit-b16", "vit", "hf-vit")


class MissingExtra(ImportError):
    """torch, torchvision or transformers is missing (or broken): said in one line."""


@dataclass
class Export:
    path: Path
    inputs: dict[str, tuple[int, ...]]  # the example the export traced, name -> shape
    size_bytes: int
    max_abs_error: float | None  # onnxruntime vs torch on that example; None without onnxruntime

    def summary(self) -> str:
        shapes = ", ".join(f"{name}={'x'.join(map(str, dims))}" for name, dims in self.inputs.items())
        check = ("not checked (onnxruntime not installed)" if self.max_abs_error is None
                 else f"max abs error vs torch {self.max_abs_error:.3g}")
        return f"wrote {self.path} ({self.size_bytes / 2**20:.1f} MiB; example {shapes}; {check})"


def require(*modules: str):
    """The modules imported, or MissingExtra naming the extra that installs them."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtra(f"exporting real models needs {' and '.join(missing)}: "
                           f"pip install \"kb-tvm[models]\" --extra-index-url https://download.pytorch.org/whl/cpu")
    loaded = []
    for name in modules:
        try:
            loaded.append(importlib.import_module(name))
        except (ImportError, RuntimeError) as err:  # e.g. a torchvision built for another torch
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise MissingExtra(f"{name} is installed but fails to import ({first_line}); install builds that "
                               f"match torch, e.g. pip install \"kb-tvm[models]\" --extra-index-url "
                               f"https://download.pytorch.org/whl/cpu") from None
    return loaded


def _export(model, args: tuple, path: Path, input_names: list[str], output_names: list[str],
            dynamic_axes: dict[str, dict[int, str]]) -> Export:
    """torch.onnx.export (TorchScript exporter, opset 17) and the onnxruntime check (the largest
    error over the outputs)."""
    import numpy as np
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        # torch >= 2.9 calls the TorchScript exporter legacy; unlike dynamo=True it needs no onnxscript
        warnings.filterwarnings("ignore", "You are using the legacy TorchScript-based ONNX export")
        expected = model(*args)
        expected = [t.numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
        torch.onnx.export(model, args, str(path), input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, opset_version=OPSET, do_constant_folding=True, dynamo=False)
    size = _gather_weights(path)
    feeds = {name: arg.numpy() for name, arg in zip(input_names, args)}
    error = None
    try:
        import onnxruntime
    except ImportError:
        pass
    else:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = session.run(output_names, feeds)
        error = max(float(np.abs(g.astype(np.float64) - e).max()) for g, e in zip(got, expected))
    return Export(path, {name: tuple(a.shape) for name, a in feeds.items()}, size, error)


def _gather_weights(path: Path) -> int:
    """Bytes of the export, weights included. Past protobuf's 2 GB (TinyLlama-1.1B: 4.4 GB) the
    exporter writes each weight to a file of its own beside the model (157 for TinyLlama): gathered
    here into one, `<model>.data`, which onnx.load and onnxruntime read from beside the model."""
    import onnx

    data = path.with_name(path.name + ".data")
    model = onnx.load(str(path), load_external_data=False)
    scattered = {entry.value for tensor in model.graph.initializer
                 if tensor.data_location == onnx.TensorProto.EXTERNAL
                 for entry in tensor.external_data if entry.key == "location"}
    if not scattered:
        return path.stat().st_size
    onnx.load_external_data_for_model(model, str(path.parent))
    data.unlink(missing_ok=True)  # onnx appends to it
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name)
    for name in scattered - {data.name}:
        (path.parent / name).unlink()
    return path.stat().st_size + data.stat().st_size


def _last_hidden_state(bert):
    """BertModel wrapped so that the export has one output, last_hidden_state. The [batch, seq]
    attention mask becomes BERT's additive mask here ((1 - mask) x the dtype's min, broadcast over
    heads and queries: what BertModel itself made of it before transformers 5, which now builds
    it with index arithmetic that TVM 0.27's ONNX importer rejects); transformers 5 takes a 4D mask
    as it is, 4.x makes the same one from the 2D mask."""
    import torch
    import transformers

    takes_4d = int(transformers.__version__.split(".")[0]) >= 5

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            if takes_4d:
                dtype = self.bert.dtype  # float32 when exported; float16 in the torch baselines
                keep = attention_mask[:, None, None, :].to(dtype)
                attention_mask = (1.0 - keep) * torch.finfo(dtype).min
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=torch.zeros_like(input_ids)).last_hidden_state

    return LastHiddenState().eval()


def resnet_module(name: str, *, batch: int = 1, image: int = 224, seed: int = 0):
    """torchvision's `name` (resnet18 ... resnet152) with random weights from `seed`, in eval
    mode, and an example input [batch, 3, image, image]."""
    if name not in RESNETS:
        raise ValueError(f"unknown ResNet {name!r}; one of {', '.join(RESNETS)}")
    torch, torchvision = require("torch", "torchvision")
    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)(weights=None).eval()
    return model, (torch.randn(batch, 3, image, image),)


def export_resnet(name: str, out: str | Path, *, batch: int = 1, image: int = 224, seed: int = 0) -> Export:
    """`resnet_module` exported: input `input` [batch, 3, image, image] (batch dynamic), output
    `logits` [batch, 1000]."""
    model, args = resnet_module(name, batch=batch, image=image, seed=seed)
    return _export(model, args, out, ["input"], ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}})


def _check_heads(hidden: int, heads: int) -> None:
    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")


def _check_seq(seq: int, config, past: int = 0) -> None:
    """The example's positions (a decode step's: the cached `past` ones too) fit the model's."""
    if past + seq > config.max_position_embeddings:
        what = f"past={past} + seq={seq}" if past else f"seq={seq}"
        raise ValueError(f"{what} is longer than the model's {config.max_position_embeddings} positions")


def bert_config(*, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int | None = None,
                vocab: int = 30522, max_positions: int = 512, attention: str = "eager"):
    """A transformers.BertConfig: BERT-base (bert-base-uncased's shape) unless told otherwise.
    attention: "eager" exports (TVM's importer takes it), "sdpa" is what transformers runs by default."""
    _check_heads(hidden, heads)
    (transformers,) = require("transformers")
    return transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                   num_attention_heads=heads, intermediate_size=ffn or 4 * hidden,
                                   max_position_embeddings=max_positions, attn_implementation=attention)


def _example_tokens(vocab: int, batch: int, seq: int) -> tuple:
    """Example (input_ids, attention_mask) [batch, seq] int64: random ids in [0, vocab), the mask's
    last quarter padding, so that the export is checked with a real mask."""
    import torch

    input_ids = torch.randint(0, vocab, (batch, seq), dtype=torch.int64)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    attention_mask[:, seq - seq // 4:] = 0
    return input_ids, attention_mask


def _export_tokens(model, args: tuple, out: str | Path, output_name: str) -> Export:
    """A model of (input_ids, attention_mask) exported, batch and sequence dynamic on both and on its
    one output."""
    axes = {0: "batch", 1: "sequence"}
    return _export(model, args, out, ["input_ids", "attention_mask"], [output_name],
                   {"input_ids": axes, "attention_mask": axes, output_name: axes})


def bert_module(*, batch: int = 1, seq: int = 128, config=None, seed: int = 0):
    """A Hugging Face BertModel encoder (no pooler, one output: last_hidden_state) with random
    weights from `config` (default: BERT-base) and `seed`, and example (input_ids,
    attention_mask) [batch, seq] int64 whose last quarter is padding."""
    torch, transformers = require("torch", "transformers")
    config = config if config is not None else bert_config()
    _check_seq(seq, config)
    torch.manual_seed(seed)
    model = _last_hidden_state(transformers.BertModel(config, add_pooling_layer=False))
    return model, _example_tokens(config.vocab_size, batch, seq)


def export_bert(out: str | Path, *, batch: int = 1, seq: int = 128, config=None, seed: int = 0) -> Export:
    """`bert_module` exported: inputs `input_ids` and `attention_mask` [batch, seq] int64, output
    `last_hidden_state` [batch, seq, hidden], batch and sequence dynamic."""
    model, args = bert_module(batch=batch, seq=seq, config=config, seed=seed)
    return _export_tokens(model, args, out, "last_hidden_state")


def _logits(lm):
    """A transformers causal LM wrapped so that the export has one output, logits [batch, seq,
    vocab]. use_cache=False: no key/value cache in or out. The attention mask is passed (2D, as
    users pass it): without it transformers 5 looks for packed sequences with torch.diff, which
    the TorchScript exporter refuses."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask):
            return self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    return Logits().eval()


def _causal_lm_module(class_name: str, config, batch: int, seq: int, seed: int):
    """transformers.`class_name`(config) with random weights from `seed`, wrapped by _logits, and
    example tokens (_example_tokens: the padded tail is right padding, as a causal LM takes it)."""
    _check_seq(seq, config)
    torch, transformers = require("torch", "transformers")
    torch.manual_seed(seed)
    model = _logits(getattr(transformers, class_name)(config))
    return model, _example_tokens(config.vocab_size, batch, seq)


def _decode_step(lm, layers: int):
    """A transformers causal LM wrapped as one decode step with a key/value cache, as optimum's
    "with past" exports take it: (input_ids, attention_mask, position_ids, then each layer's past
    key and value) -> (logits, then each layer's present key and value)."""
    import torch
    import transformers

    class DecodeStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = transformers.DynamicCache()
            for layer in range(layers):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            out = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          past_key_values=cache, use_cache=True)
            # transformers >= 4.56's cache (the models extra asks for 4.57): a layer's keys and values
            return (out.logits, *(t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)))

    return DecodeStep().eval()


def _export_causal_lm(class_name: str, config, out: str | Path, *, batch: int, seq: int, seed: int,
                      past: int) -> Export:
    """The whole sequence (_causal_lm_module, one output), or with `past` one decode step."""
    if past:
        return export_decode_step(class_name, config, out, batch=batch, seq=seq, past=past, seed=seed)
    model, args = _causal_lm_module(class_name, config, batch, seq, seed)
    return _export_tokens(model, args, out, "logits")


def export_decode_step(class_name: str, config, out: str | Path, *, batch: int, seq: int, past: int,
                       seed: int) -> Export:
    """transformers.`class_name`(config), random weights from `seed`, exported as one decode step
    (_decode_step): `seq` new tokens after `past` cached ones. Inputs input_ids and position_ids
    [batch, sequence], attention_mask [batch, total] (total = past + sequence) int64, and
    past_key_values.L.key / .value [batch, key/value heads, past, head size] float32 for each
    layer L; outputs logits [batch, sequence, vocab] and present.L.key / .value [.., total, ..].
    All four axes dynamic, named so that `kb-tvm tune --dim` pins each once. The example's mask
    leaves the first quarter of the cache out (a batch padded on the left)."""
    _check_seq(seq, config, past)
    torch, transformers = require("torch", "transformers")
    torch.manual_seed(seed)
    layers = config.num_hidden_layers
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_size = config.hidden_size // config.num_attention_heads
    model = _decode_step(getattr(transformers, class_name)(config), layers)
    input_ids = torch.randint(0, config.vocab_size, (batch, seq), dtype=torch.int64)
    attention_mask = torch.ones(batch, past + seq, dtype=torch.int64)
    attention_mask[:, :past // 4] = 0
    position_ids = torch.arange(past, past + seq, dtype=torch.int64).expand(batch, seq)
    cache = [torch.randn(batch, kv_heads, past, head_size) for _ in range(2 * layers)]
    kinds = [(layer, kind) for layer in range(layers) for kind in ("key", "value")]
    pasts = [f"past_key_values.{layer}.{kind}" for layer, kind in kinds]
    presents = [f"present.{layer}.{kind}" for layer, kind in kinds]
    tokens = {0: "batch", 1: "sequence"}
    axes = {"input_ids": tokens, "position_ids": tokens, "attention_mask": {0: "batch", 1: "total"},
            "logits": tokens, **{name: {0: "batch", 2: "past"} for name in pasts},
            **{name: {0: "batch", 2: "total"} for name in presents}}
    return _export(model, (input_ids, attention_mask, position_ids, *cache), out,
                   ["input_ids", "attention_mask", "position_ids", *pasts], ["logits", *presents], axes)


def llama_config(*, layers: int = 22, hidden: int = 2048, heads: int = 32, kv_heads: int = 4, ffn: int = 5632,
                 vocab: int = 32000, positions: int = 2048):
    """A transformers.LlamaConfig with sdpa attention: TinyLlama-1.1B's shape unless told otherwise.
    kv_heads < heads is grouped-query attention (TinyLlama: 4 key/value heads for 32 query heads)."""
    _check_heads(hidden, heads)
    if heads % kv_heads:
        raise ValueError(f"heads={heads} must be a multiple of kv_heads={kv_heads}")
    if hidden // heads % 2:
        raise ValueError(f"hidden={hidden} / heads={heads} = {hidden // heads}: rotary embeddings need an even "
                         f"head size")
    (transformers,) = require("transformers")
    return transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                                    num_hidden_layers=layers, num_attention_heads=heads,
                                    num_key_value_heads=kv_heads, max_position_embeddings=positions,
                                    rms_norm_eps=1e-5, attn_implementation="sdpa")  # TinyLlama's eps


def llama_module(*, batch: int = 1, seq: int = 128, config=None, seed: int = 0):
    """A LlamaForCausalLM (default: TinyLlama-1.1B's shape) with random weights from `seed`, one
    output (logits), and example (input_ids, attention_mask) [batch, seq] int64."""
    return _causal_lm_module("LlamaForCausalLM", config if config is not None else llama_config(),
                             batch, seq, seed)


def export_llama(out: str | Path, *, batch: int = 1, seq: int = 128, config=None, seed: int = 0,
                 past: int = 0) -> Export:
    """`llama_module` exported: inputs `input_ids` and `attention_mask` [batch, seq] int64, output
    `logits` [batch, seq, vocab], batch and sequence dynamic. With `past`, one decode step with a
    key/value cache of that many positions (export_decode_step)."""
    return _export_causal_lm("LlamaForCausalLM", config if config is not None else llama_config(), out,
                             batch=batch, seq=seq, seed=seed, past=past)


def gpt2_config(*, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int | None = None,
                vocab: int = 50257, positions: int = 1024):
    """A transformers.GPT2Config with sdpa attention (it exports): GPT-2 small unless told otherwise.
    The last id is begin and end of text, as in GPT-2's vocabulary."""
    _check_heads(hidden, heads)
    (transformers,) = require("transformers")
    return transformers.GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_inner=ffn,
                                   n_positions=positions, bos_token_id=vocab - 1, eos_token_id=vocab - 1,
                                   attn_implementation="sdpa")


def gpt2_module(*, batch: int = 1, seq: int = 128, config=None, seed: int = 0):
    """A GPT2LMHeadModel (default: GPT-2 small) with random weights from `seed`, one output
    (logits), and example (input_ids, attention_mask) [batch, seq] int64."""
    return _causal_lm_module("GPT2LMHeadModel", config if config is not None else gpt2_config(),
                             batch, seq, seed)


def export_gpt2(out: str | Path, *, batch: int = 1, seq: int = 128, config=None, seed: int = 0,
                past: int = 0) -> Export:
    """`gpt2_module` exported: inputs `input_ids` and `attention_mask` [batch, seq] int64, output
    `logits` [batch, seq, vocab], batch and sequence dynamic. With `past`, one decode step with a
    key/value cache of that many positions (export_decode_step)."""
    return _export_causal_lm("GPT2LMHeadModel", config if config is not None else gpt2_config(), out,
                             batch=batch, seq=seq, seed=seed, past=past)


def vit_config(*, patch: int = 16, layers: int = 12, heads: int = 12, hidden: int = 768, ffn: int = 3072,
               classes: int = 1000) -> dict:
    """torchvision VisionTransformer's arguments but the image size: ViT-B/16 unless told otherwise."""
    _check_heads(hidden, heads)
    return dict(patch_size=patch, num_layers=layers, num_heads=heads, hidden_dim=hidden, mlp_dim=ffn,
                num_classes=classes)


def vit_module(*, batch: int = 1, image: int = 224, config: dict | None = None, seed: int = 0):
    """torchvision's ViT with random weights from `seed`, in eval mode, and an example input
    [batch, 3, image, image]: vit_b_16 without `config`, else VisionTransformer(**config) (vit_config)."""
    patch = (config or {}).get("patch_size", 16)
    if image % patch:
        raise ValueError(f"image={image} must be a multiple of patch={patch}")
    torch, torchvision = require("torch", "torchvision")
    torch.manual_seed(seed)
    if config is None:
        model = torchvision.models.vit_b_16(weights=None, image_size=image)
    else:
        model = torchvision.models.vision_transformer.VisionTransformer(image_size=image, **config)
    # torchvision zeroes the classifier head, so every output is its bias whatever the input: a
    # check of such a model against torch proves nothing, and its logits tell no inputs apart
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    torch.nn.init.normal_(model.heads.head.bias, std=0.02)
    return model.eval(), (torch.randn(batch, 3, image, image),)


@contextlib.contextmanager
def _mha_fastpath_off():
    """In eval mode torch.nn.MultiheadAttention takes PyTorch's fused fast path
    (aten::_native_multi_head_attention), which the TorchScript exporter refuses: off while this
    runs, then as it was."""
    import torch

    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def hf_vit_module(*, batch: int = 1, image: int = 224, config: dict | None = None, seed: int = 0):
    """Hugging Face's ViTForImageClassification (sdpa attention) with random weights from `seed`,
    sized by `config` (vit_config's keys; default ViT-B/16), in eval mode, its logits the one
    output, and an example input [batch, 3, image, image]."""
    c = config or vit_config()
    if image % c["patch_size"]:
        raise ValueError(f"image={image} must be a multiple of patch={c['patch_size']}")
    torch, transformers = require("torch", "transformers")
    torch.manual_seed(seed)
    vit = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=image, patch_size=c["patch_size"], num_hidden_layers=c["num_layers"],
        num_attention_heads=c["num_heads"], hidden_size=c["hidden_dim"], intermediate_size=c["mlp_dim"],
        num_labels=c["num_classes"], attn_implementation="sdpa"))

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = vit

        def forward(self, pixel_values):
            return self.vit(pixel_values=pixel_values).logits

    return Logits().eval(), (torch.randn(batch, 3, image, image),)


def export_vit(out: str | Path, *, batch: int = 1, image: int = 224, config: dict | None = None,
               seed: int = 0, hugging_face: bool = False) -> Export:
    """`vit_module` (`hf_vit_module` where `hugging_face`) exported: input `input` [batch, 3,
    image, image] (batch dynamic), output `logits` [batch, classes]."""
    module = hf_vit_module if hugging_face else vit_module
    model, args = module(batch=batch, image=image, config=config, seed=seed)
    with _mha_fastpath_off():
        return _export(model, args, out, ["input"], ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}})


# the models the options size
SIZED = {"bert": "BERT", "llama": "Llama", "gpt2": "GPT-2", "vit": "ViT", "hf-vit": "Hugging Face ViT"}
TWINS = {"bert-base": "bert", "vit-b16": "vit"}  # fixed shapes that a sized model takes as its defaults
SIZE_OPTIONS = {  # option -> (the models it sizes, help: each one's default)
    "layers": (("bert", "llama", "gpt2", "vit", "hf-vit"), "layers (bert 12, llama 22, gpt2 12, vit 12)"),
    "hidden": (("bert", "llama", "gpt2", "vit", "hf-vit"), "hidden size (bert 768, llama 2048, gpt2 768, vit 768)"),
    "heads": (("bert", "llama", "gpt2", "vit", "hf-vit"), "attention heads (bert 12, llama 32, gpt2 12, vit 12)"),
    "kv-heads": (("llama",), "key/value heads, fewer than --heads for grouped-query attention (llama 4)"),
    "ffn": (("bert", "llama", "gpt2", "vit", "hf-vit"), "intermediate (FFN, MLP) size (bert 4 x hidden, llama 5632, "
            "gpt2 4 x hidden, vit 3072)"),
    "vocab": (("bert", "llama", "gpt2"), "vocabulary (bert 30522, llama 32000, gpt2 50257)"),
    "positions": (("llama", "gpt2"), "most positions, the longest --seq (llama 2048, gpt2 1024)"),
    "patch": (("vit", "hf-vit"), "patch height and width, a divisor of --image (vit 16)"),
    "classes": (("vit", "hf-vit"), "classes of the head (vit 1000)"),
}


def add_sizes(group) -> None:
    """The options that size a custom bert, llama, gpt2 or vit."""
    for key, (_, text) in SIZE_OPTIONS.items():
        group.add_argument(f"--{key}", type=int, help=text)


def _either(words) -> str:
    """'a', 'a or b', 'a, b or c'."""
    words = list(words)
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def given_sizes(parser, args) -> dict:
    """The sizes given on the command line as the model's config function takes them (kv_heads for
    --kv-heads); a parser error if they size another model."""
    sizes = {key: getattr(args, key.replace("-", "_")) for key in SIZE_OPTIONS}
    sizes = {key: value for key, value in sizes.items() if value is not None}
    foreign = [key for key in sizes if args.model not in SIZE_OPTIONS[key][0]]
    if foreign:
        takers = [model for model in SIZED if all(model in SIZE_OPTIONS[key][0] for key in foreign)]
        if TWINS.get(args.model) in takers:
            takers = [TWINS[args.model]]
        if not takers:  # e.g. --kv-heads and --patch
            parser.error("; ".join(f"--{key} sizes {_either(SIZE_OPTIONS[key][0])}" for key in foreign)
                         + f": not `{args.model}`")
        parser.error(f"--{'/--'.join(foreign)} size a custom {_either(SIZED[m] for m in takers)}: use "
                     f"{_either(f'`{m}`' for m in takers)}, not `{args.model}`")
    return {key.replace("-", "_"): value for key, value in sizes.items()}


def export(args, sizes: dict) -> Export:
    """The export the command line asks for."""
    common = dict(batch=args.batch, seed=args.seed)
    if args.model in RESNETS:
        return export_resnet(args.model, args.out, image=args.image, **common)
    if args.model in VITS:
        config = vit_config(**sizes) if args.model != "vit-b16" else None
        return export_vit(args.out, image=args.image, config=config, hugging_face=args.model == "hf-vit", **common)
    if args.model in BERTS:
        return export_bert(args.out, seq=args.seq, config=bert_config(**sizes), **common)
    if args.model == "llama":
        return export_llama(args.out, seq=args.seq, config=llama_config(**sizes), past=args.past, **common)
    return export_gpt2(args.out, seq=args.seq, config=gpt2_config(**sizes), past=args.past, **common)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="e.g. kb-tvm tune resnet50.onnx --input-shape input=1x3x224x224")
    parser.add_argument("model", choices=RESNETS + BERTS + CAUSAL_LMS + VITS,
                        help="a torchvision ResNet, bert-base (BERT-base's shape), vit-b16 (ViT-B/16), or bert, "
                             "llama, gpt2, vit, hf-vit (sized by the options; defaults: BERT-base, TinyLlama-1.1B, "
                             "GPT-2 small, ViT-B/16 from torchvision and from Hugging Face)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=1, help="batch of the example traced (the axis stays dynamic)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the random weights")
    images = parser.add_argument_group("ResNet and ViT")
    images.add_argument("--image", type=int, default=224,
                        help="height and width of the example image (a ViT's is fixed at export)")
    tokens = parser.add_argument_group("BERT, Llama and GPT-2")
    tokens.add_argument("--seq", type=int, default=128, help="sequence length of the example (stays dynamic)")
    tokens.add_argument("--past", type=int, default=0,
                        help="llama and gpt2: export one decode step with a key/value cache of this many positions "
                        "(inputs past_key_values.L.key/.value, outputs present.L.key/.value; --seq new tokens, "
                        "e.g. --seq 1); 0, the default: the whole sequence, no cache")
    add_sizes(parser.add_argument_group("sizes of bert, llama, gpt2 and vit (each model's default in parentheses)"))
    args = parser.parse_args(argv)
    sizes = given_sizes(parser, args)
    if any(value <= 0 for value in [args.batch, args.image, args.seq, *sizes.values()]) or args.past < 0:
        parser.error("sizes must be positive")
    if args.past and args.model not in CAUSAL_LMS:
        parser.error(f"--past exports a decoder's step with a key/value cache: {_either(CAUSAL_LMS)}, "
                     f"not `{args.model}`")
    try:
        result = export(args, sizes)
    except (MissingExtra, ValueError) as err:
        sys.exit(f"error: {err}")
    print(result.summary())


if __name__ == "__main__":
    main()
