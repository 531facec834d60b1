"""Architectures kb was not built on, tried as a new user would: each Hugging Face architecture
below at toy size (random weights), exported as `export_models` exports its own models, then
`kb-tvm tune --check-numerics-only` (on the CPU unless --target says otherwise) and, with
--budget, a short tune. Three groups:

- decoders: causal LMs, (input_ids, attention_mask) -> logits, the mask's tail padding;
- encoders: text encoders, (input_ids, attention_mask) -> last_hidden_state;
- vision: image models, input [1, 3, 32, 32] -> logits (or the last hidden state).

    python benchmarks/zoo.py --out zoo                       # every architecture, numerics only
    python benchmarks/zoo.py --out zoo --group vision
    python benchmarks/zoo.py --out zoo --budget 40s opt swin
    python benchmarks/zoo.py --out zoo --attention           # also: the attention as one task on sm_90?

Needs the models extra (torch, transformers). One line per architecture: the verdict, or the
error's last line. The summary goes to OUT/zoo.json, written after each architecture.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
from common import HOPPER  # benchmarks/common.py

TOKENS = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=176, max_position_embeddings=256)
SEQ = 32
IMAGE = 32
PATCHES = dict(image_size=IMAGE, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=176)


@dataclass(frozen=True)
class Arch:
    group: str  # decoders, encoders or vision
    model_class: str  # transformers' class
    config: object
    output: str  # the attribute of the model's output that the export returns


def architectures(tf) -> dict[str, Arch]:
    """Name -> architecture, with what each does differently from the models kb was built on
    (Llama, GPT-2, BERT, ViT)."""
    sdpa = {"attn_implementation": "sdpa"}

    def decoder(cls, config):
        return Arch("decoders", cls, config, "logits")

    def encoder(cls, config):
        return Arch("encoders", cls, config, "last_hidden_state")

    def vision(cls, config, output="logits"):
        return Arch("vision", cls, config, output)

    return {
        "qwen2": decoder("Qwen2ForCausalLM", tf.Qwen2Config(**TOKENS, num_key_value_heads=2, **sdpa)),  # QKV biases
        "mistral": decoder("MistralForCausalLM", tf.MistralConfig(**TOKENS, num_key_value_heads=2, **sdpa)),
        "phi": decoder("PhiForCausalLM", tf.PhiConfig(**TOKENS, partial_rotary_factor=0.5, **sdpa)),  # parallel block
        "phi3": decoder("Phi3ForCausalLM", tf.Phi3Config(**TOKENS, num_key_value_heads=4, pad_token_id=0, **sdpa)),
        "gemma": decoder("GemmaForCausalLM", tf.GemmaConfig(**TOKENS, num_key_value_heads=1, head_dim=16, **sdpa)),
        "gpt_neox": decoder("GPTNeoXForCausalLM", tf.GPTNeoXConfig(**TOKENS, rotary_pct=0.25, **sdpa)),
        "opt": decoder("OPTForCausalLM", tf.OPTConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                                                      num_attention_heads=4, ffn_dim=176, max_position_embeddings=256,
                                                      word_embed_proj_dim=64, **sdpa)),  # positions: the mask's cumsum
        "falcon": decoder("FalconForCausalLM", tf.FalconConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                                                               num_attention_heads=4, multi_query=True, **sdpa)),
        "granite": decoder("GraniteForCausalLM", tf.GraniteConfig(**TOKENS, num_key_value_heads=2, **sdpa)),
        "olmo": decoder("OlmoForCausalLM", tf.OlmoConfig(**TOKENS, num_key_value_heads=4, **sdpa)),
        "stablelm": decoder("StableLmForCausalLM", tf.StableLmConfig(**TOKENS, num_key_value_heads=4, **sdpa)),
        "gemma2": decoder("Gemma2ForCausalLM", tf.Gemma2Config(
            **TOKENS, num_key_value_heads=2, head_dim=16, sliding_window=16,
            attn_implementation="eager")),  # soft-capped scores (no sdpa), sliding window
        "qwen3": decoder("Qwen3ForCausalLM", tf.Qwen3Config(**TOKENS, num_key_value_heads=2, head_dim=16,
                                                            **sdpa)),  # RMSNorm on queries and keys
        "mixtral": decoder("MixtralForCausalLM", tf.MixtralConfig(
            **TOKENS, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **sdpa)),  # mixture of experts
        "bloom": decoder("BloomForCausalLM", tf.BloomConfig(vocab_size=512, hidden_size=64, n_layer=2, n_head=4)),
        # ALiBi: no positions, a bias per head (eager attention: no sdpa)
        "gptj": decoder("GPTJForCausalLM", tf.GPTJConfig(vocab_size=512, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                                         n_positions=256, attn_implementation="eager")),
        # interleaved rotary; eager: transformers 5.17 (the GPU machine's) has no sdpa for GPT-J
        "starcoder2": decoder("Starcoder2ForCausalLM", tf.Starcoder2Config(
            **TOKENS, num_key_value_heads=2, sliding_window=16, **sdpa)),  # biases, LayerNorm, GELU MLP
        "roberta": encoder("RobertaModel", tf.RobertaConfig(**TOKENS, pad_token_id=1, **sdpa)),  # positions from ids
        "distilbert": encoder("DistilBertModel", tf.DistilBertConfig(vocab_size=512, dim=64, n_layers=2, n_heads=4,
                                                                     hidden_dim=176, max_position_embeddings=256,
                                                                     **sdpa)),
        "albert": encoder("AlbertModel", tf.AlbertConfig(**TOKENS, embedding_size=32, **sdpa)),  # shared layers
        "electra": encoder("ElectraModel", tf.ElectraConfig(**TOKENS, embedding_size=32, **sdpa)),
        "deberta_v2": encoder("DebertaV2Model", tf.DebertaV2Config(**TOKENS)),  # disentangled relative attention
        "mpnet": encoder("MPNetModel", tf.MPNetConfig(**TOKENS)),  # relative position buckets
        "modernbert": encoder("ModernBertModel", tf.ModernBertConfig(
            vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=176,
            max_position_embeddings=256, global_attn_every_n_layers=2, local_attention=16, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, **sdpa)),  # rotary, GeGLU, local windows
        "deit": vision("DeiTForImageClassification", tf.DeiTConfig(**PATCHES, num_labels=10, **sdpa)),
        "beit": vision("BeitForImageClassification", tf.BeitConfig(
            **PATCHES, num_labels=10, use_relative_position_bias=True)),  # mean pooling, layer scale
        "dinov2": vision("Dinov2ForImageClassification", tf.Dinov2Config(**PATCHES, num_labels=10, **sdpa)),
        "clip_vision": vision("CLIPVisionModel", tf.CLIPVisionConfig(**PATCHES, **sdpa), "pooler_output"),
        "siglip_vision": vision("SiglipVisionModel", tf.SiglipVisionConfig(**PATCHES, **sdpa),
                                "pooler_output"),  # attention-pooling head
        "swin": vision("SwinForImageClassification", tf.SwinConfig(
            image_size=IMAGE, patch_size=2, embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4,
            num_labels=10)),  # shifted windows, patch merging
        "convnext": vision("ConvNextForImageClassification", tf.ConvNextConfig(
            num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10, image_size=IMAGE)),  # 7x7 depthwise
        "segformer": vision("SegformerForImageClassification", tf.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
            strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], num_labels=10)),  # reduced keys
    }


def _module(arch: Arch, tf, torch):
    """The architecture with random weights, in eval mode, returning one tensor."""
    torch.manual_seed(0)
    model = getattr(tf, arch.model_class)(arch.config)

    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            if arch.group == "vision":
                return getattr(self.model(pixel_values=args[0]), arch.output)
            input_ids, attention_mask = args
            kwargs = {"use_cache": False} if arch.group == "decoders" else {}
            return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs), arch.output)

    return One().eval()


def export(arch: Arch, path: Path):
    """`arch` exported as `export_models` exports models of its group; returns (Export, the
    input shapes kb-tvm tune takes)."""
    from kb_tvm.workloads import export_models as em

    torch, tf = em.require("torch", "transformers")
    model = _module(arch, tf, torch)
    if arch.group == "vision":
        args = (torch.randn(1, 3, IMAGE, IMAGE),)
        with em._mha_fastpath_off():  # SigLIP's pooling head is a torch.nn.MultiheadAttention
            done = em._export(model, args, path, ["input"], arch.output,
                              {"input": {0: "batch"}, arch.output: {0: "batch"}})
        return done, [f"input=1x3x{IMAGE}x{IMAGE}"]
    done = em._export_tokens(model, em._example_tokens(arch.config.vocab_size, 1, SEQ), path, arch.output)
    return done, [f"input_ids=1x{SEQ}", f"attention_mask=1x{SEQ}"]


def attention_tasks(path: Path, shapes: list[str]) -> str:
    """How the model's attention reaches an sm_90 GPU in fp16: how many attention calls became one
    `kb_attention` task (the fused kernel's), and how many softmaxes are left apart."""
    import re

    import tvm

    from kb_tvm.kernels.attention.rewrite import NAME
    from kb_tvm.model_tuning import load_onnx
    from kb_tvm.model_tuning.onnx_input import parse_input_shape
    from kb_tvm.model_tuning.relax_build import relax_module

    dims = dict(parse_input_shape(shape) for shape in shapes)
    hopper = tvm.target.Target(HOPPER)
    main = relax_module(load_onnx(path, dims), hopper, precision="fp16", math="exact")["main"].script()
    fused = len(re.findall(rf"R\.call_tir\({NAME}\d*,", main))
    apart = len(re.findall(r"R\.call_tir\(\w*softmax\w*,", main))  # the kernels of softmaxes left in the graph
    return f"{fused} one task, {apart} softmaxes apart"


def _verdict(text: str) -> str:
    """A run's verdict: its "tuned:" line where it has one, else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and "Warning" not in line]
    tuned = [line for line in lines if line.startswith("tuned:")]
    return (tuned or lines or [""])[-1][:300]


@click.command()
@click.argument("names", nargs=-1)
@click.option("--out", type=click.Path(file_okay=False), required=True)
@click.option("--group", type=click.Choice(["decoders", "encoders", "vision"]), default=None,
              help="Only this group's architectures (default: every group).")
@click.option("--budget", default=None, help="Also tune each for this long (e.g. 40s).")
@click.option("--target", default="llvm", show_default=True, help="kb-tvm tune's --target.")
@click.option("--precision", default="fp32", show_default=True, help="kb-tvm tune's --precision.")
@click.option("--attention", is_flag=True,
              help="Also count the attention calls that become one fused-kernel task on an sm_90 GPU in fp16.")
def main(names, out, group, budget, target, precision, attention) -> None:
    """Export each architecture (all by default), check its numerics, and tune it where asked."""
    import transformers

    zoo = architectures(transformers)
    unknown = sorted(set(names) - set(zoo))
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: not one of {', '.join(zoo)}", param_hint="NAMES")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name in names or [n for n, arch in zoo.items() if group in (None, arch.group)]:
        try:
            done, shapes = export(zoo[name], out / f"{name}.onnx")
        except (RuntimeError, ValueError) as err:
            # torch.onnx refuses an operator (RuntimeError), or this transformers refuses the config (ValueError:
            # GPT-J with sdpa before its support): this row's verdict, not the run's end
            summary[name] = {"export": f"failed: {type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"}
            click.echo(f"{name:14s} export {summary[name]['export']}")
            (out / "zoo.json").write_text(json.dumps(summary, indent=1))
            continue
        row = {"export": done.summary()}
        if attention:
            row["attention"] = {"said": attention_tasks(out / f"{name}.onnx", shapes)}
        runs = [("numerics", ["--check-numerics-only"])] + ([("tune", ["--budget", budget])] if budget else [])
        shape_args = [arg for shape in shapes for arg in ("--input-shape", shape)]
        for step, extra in runs:
            ran = subprocess.run([sys.executable, "-m", "kb_tvm.cli", "tune", str(out / f"{name}.onnx"),
                                  "--target", target, "--precision", precision, *shape_args, "--no-experience",
                                  "--work-dir", str(out / f"{name}-{step}"), *extra],
                                 capture_output=True, text=True, check=False)
            (out / f"{name}-{step}.log").write_text(ran.stdout + ran.stderr)  # the whole of what it said
            row[step] = {"exit": ran.returncode, "said": _verdict(ran.stdout if ran.returncode == 0
                                                                  else ran.stdout + "\n" + ran.stderr)}
        summary[name] = row
        click.echo(f"{name:14s} " + "  ".join(f"{step}: {row[step]['said']}"
                                              for step in (["attention"] if attention else []) + [s for s, _ in runs]))
        (out / "zoo.json").write_text(json.dumps(summary, indent=1))  # after each: a cut run keeps its rows


if __name__ == "__main__":
    main()
