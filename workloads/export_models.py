"""Exports real architectures to ONNX for `kb-tvm tune`: torchvision's ResNets and a Hugging Face
BERT encoder, with random weights built from their configs (no download, no network).

    python -m kb_tvm.workloads.export_models resnet50 --batch 1 --image 224 --out resnet50.onnx
    python -m kb_tvm.workloads.export_models bert-base --batch 1 --seq 128 --out bert.onnx
    python -m kb_tvm.workloads.export_models resnet18 --image 32 --out resnet18.onnx
    python -m kb_tvm.workloads.export_models bert --layers 2 --hidden 64 --heads 2 --vocab 1000 --seq 16 \\
        --out tiny-bert.onnx

Needs the `models` extra (`pip install "kb-tvm[models]"`; add `--extra-index-url
https://download.pytorch.org/whl/cpu` for CPU-only torch). Like real exports, the files carry
dynamic axes: batch for the ResNets (input `input`, output `logits`), batch and sequence for BERT
(inputs `input_ids` and `attention_mask`, int64; output `last_hidden_state`). `kb-tvm tune` pins
them with `--input-shape`, e.g. `--input-shape input=1x3x224x224` or `--input-shape
input_ids=1x128 --input-shape attention_mask=1x128`. `--batch`, `--image` and `--seq` set only the
example the export traces and checks. Weights come from a fixed torch seed; every export is checked
against torch's own output in onnxruntime (where installed) and the max abs error printed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

OPSET = 17
RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
BERTS = ("bert-base", "bert")


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


def _export(model, args: tuple, path: Path, input_names: list[str], output_name: str,
            dynamic_axes: dict[str, dict[int, str]]) -> Export:
    """torch.onnx.export (TorchScript exporter, opset 17) and the onnxruntime check."""
    import numpy as np
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        # torch >= 2.9 calls the TorchScript exporter legacy; unlike dynamo=True it needs no onnxscript
        warnings.filterwarnings("ignore", "You are using the legacy TorchScript-based ONNX export")
        expected = model(*args).numpy()
        torch.onnx.export(model, args, str(path), input_names=input_names, output_names=[output_name],
                          dynamic_axes=dynamic_axes, opset_version=OPSET, do_constant_folding=True, dynamo=False)
    feeds = {name: arg.numpy() for name, arg in zip(input_names, args)}
    error = None
    try:
        import onnxruntime
    except ImportError:
        pass
    else:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (got,) = session.run([output_name], feeds)
        error = float(np.abs(got.astype(np.float64) - expected).max())
    return Export(path, {name: tuple(a.shape) for name, a in feeds.items()}, path.stat().st_size, error)


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
    return _export(model, args, out, ["input"], "logits", {"input": {0: "batch"}, "logits": {0: "batch"}})


def bert_config(*, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int | None = None,
                vocab: int = 30522, max_positions: int = 512, attention: str = "eager"):
    """A transformers.BertConfig: BERT-base (bert-base-uncased's shape) unless told otherwise.
    attention: "eager" exports (TVM's importer takes it), "sdpa" is what transformers runs by default."""
    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")
    (transformers,) = require("transformers")
    return transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                   num_attention_heads=heads, intermediate_size=ffn or 4 * hidden,
                                   max_position_embeddings=max_positions, attn_implementation=attention)


def bert_module(*, batch: int = 1, seq: int = 128, config=None, seed: int = 0):
    """A Hugging Face BertModel encoder (no pooler, one output: last_hidden_state) with random
    weights from `config` (default: BERT-base) and `seed`, and example (input_ids,
    attention_mask) [batch, seq] int64 whose last quarter is padding."""
    torch, transformers = require("torch", "transformers")
    config = config if config is not None else bert_config()
    if seq > config.max_position_embeddings:
        raise ValueError(f"seq={seq} is longer than the model's {config.max_position_embeddings} positions")
    torch.manual_seed(seed)
    model = _last_hidden_state(transformers.BertModel(config, add_pooling_layer=False))
    input_ids = torch.randint(0, config.vocab_size, (batch, seq), dtype=torch.int64)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    attention_mask[:, seq - seq // 4:] = 0  # padded tail, so the export is checked with a real mask
    return model, (input_ids, attention_mask)


def export_bert(out: str | Path, *, batch: int = 1, seq: int = 128, config=None, seed: int = 0) -> Export:
    """`bert_module` exported: inputs `input_ids` and `attention_mask` [batch, seq] int64, output
    `last_hidden_state` [batch, seq, hidden], batch and sequence dynamic."""
    model, args = bert_module(batch=batch, seq=seq, config=config, seed=seed)
    axes = {0: "batch", 1: "sequence"}
    return _export(model, args, out, ["input_ids", "attention_mask"], "last_hidden_state",
                   {"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})


BERT_SIZES = ("layers", "hidden", "heads", "ffn", "vocab")


def add_bert_sizes(group) -> None:
    """The options that size a custom `bert` (bert_config's arguments)."""
    for key in BERT_SIZES:
        group.add_argument(f"--{key}", type=int,
                           help="intermediate size (default 4 x hidden)" if key == "ffn" else None)


def bert_sizes(parser, args) -> dict:
    """bert_config's arguments given on the command line; a parser error if they size another model."""
    sizes = {key: getattr(args, key) for key in BERT_SIZES if getattr(args, key) is not None}
    if sizes and args.model != "bert":
        parser.error(f"--{'/--'.join(sizes)} size a custom BERT: use `bert`, not `{args.model}`")
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="e.g. kb-tvm tune resnet50.onnx --input-shape input=1x3x224x224")
    parser.add_argument("model", choices=RESNETS + BERTS,
                        help="a torchvision ResNet, bert-base (BERT-base's shape) or bert (sized by the options)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=1, help="batch of the example traced (the axis stays dynamic)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the random weights")
    resnet = parser.add_argument_group("ResNet")
    resnet.add_argument("--image", type=int, default=224, help="height and width of the example image")
    bert = parser.add_argument_group("BERT (bert's defaults are BERT-base's)")
    bert.add_argument("--seq", type=int, default=128, help="sequence length of the example (stays dynamic)")
    add_bert_sizes(bert)
    args = parser.parse_args(argv)
    sizes = bert_sizes(parser, args)
    if any(value <= 0 for value in [args.batch, args.image, args.seq, *sizes.values()]):
        parser.error("sizes must be positive")
    try:
        if args.model in RESNETS:
            result = export_resnet(args.model, args.out, batch=args.batch, image=args.image, seed=args.seed)
        else:
            result = export_bert(args.out, batch=args.batch, seq=args.seq, config=bert_config(**sizes),
                                 seed=args.seed)
    except (MissingExtra, ValueError) as err:
        sys.exit(f"error: {err}")
    print(result.summary())


if __name__ == "__main__":
    main()
