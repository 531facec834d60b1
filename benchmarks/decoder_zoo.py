"""Decoders kb was not built on, tried as a new user would: each Hugging Face architecture below at
toy size (2 layers, hidden 64, random weights), exported as `export_models` exports Llama and
GPT-2, then `kb-tvm tune --check-numerics-only` on this CPU and, with --budget, a short tune.

    python benchmarks/decoder_zoo.py --out zoo            # every architecture, numerics only
    python benchmarks/decoder_zoo.py --out zoo --budget 40s opt phi3

Needs the models extra (torch, transformers). One line per architecture: the verdict, or the
error's last line. The summary goes to OUT/zoo.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

HIDDEN = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=176, max_position_embeddings=256)
SEQ = 32


def configs(tf) -> dict:
    """Architecture -> (model class, config): what each family does differently from Llama."""
    sdpa = {"attn_implementation": "sdpa"}
    return {
        "qwen2": ("Qwen2ForCausalLM", tf.Qwen2Config(**HIDDEN, num_key_value_heads=2, **sdpa)),  # QKV biases
        "mistral": ("MistralForCausalLM", tf.MistralConfig(**HIDDEN, num_key_value_heads=2, **sdpa)),
        "phi": ("PhiForCausalLM", tf.PhiConfig(**HIDDEN, partial_rotary_factor=0.5, **sdpa)),  # parallel block
        "phi3": ("Phi3ForCausalLM", tf.Phi3Config(**HIDDEN, num_key_value_heads=4, pad_token_id=0, **sdpa)),
        "gemma": ("GemmaForCausalLM", tf.GemmaConfig(**HIDDEN, num_key_value_heads=1, head_dim=16, **sdpa)),
        "gpt_neox": ("GPTNeoXForCausalLM", tf.GPTNeoXConfig(**HIDDEN, rotary_pct=0.25, **sdpa)),
        "opt": ("OPTForCausalLM", tf.OPTConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                                               num_attention_heads=4, ffn_dim=176, max_position_embeddings=256,
                                               word_embed_proj_dim=64, **sdpa)),  # positions: cumsum of the mask
        "falcon": ("FalconForCausalLM", tf.FalconConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                                                        num_attention_heads=4, multi_query=True, **sdpa)),
        "granite": ("GraniteForCausalLM", tf.GraniteConfig(**HIDDEN, num_key_value_heads=2, **sdpa)),
        "olmo": ("OlmoForCausalLM", tf.OlmoConfig(**HIDDEN, num_key_value_heads=4, **sdpa)),
        "stablelm": ("StableLmForCausalLM", tf.StableLmConfig(**HIDDEN, num_key_value_heads=4, **sdpa)),
    }


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and "Warning" not in line]
    return lines[-1].strip()[:300] if lines else ""


@click.command()
@click.argument("names", nargs=-1)
@click.option("--out", type=click.Path(file_okay=False), required=True)
@click.option("--budget", default=None, help="Also tune each for this long (e.g. 40s).")
def main(names, out, budget) -> None:
    """Export each architecture (all by default), check its numerics, and tune it where asked."""
    import transformers

    from kb_tvm.workloads.export_models import _causal_lm_module, _export_tokens

    zoo = configs(transformers)
    unknown = sorted(set(names) - set(zoo))
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: not one of {', '.join(zoo)}", param_hint="NAMES")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = ["--input-shape", f"input_ids=1x{SEQ}", "--input-shape", f"attention_mask=1x{SEQ}"]
    summary = {}
    for name in names or zoo:
        class_name, config = zoo[name]
        path = out / f"{name}.onnx"
        model, args = _causal_lm_module(class_name, config, 1, SEQ, 0)
        row = {"export": _export_tokens(model, args, path, "logits").summary()}
        runs = [("numerics", ["--check-numerics-only"])] + ([("tune", ["--budget", budget])] if budget else [])
        for step, extra in runs:
            done = subprocess.run([sys.executable, "-m", "kb_tvm.cli", "tune", str(path), "--target", "llvm",
                                   *shapes, "--no-experience", "--work-dir", str(out / f"{name}-{step}"), *extra],
                                  capture_output=True, text=True, check=False)
            row[step] = {"exit": done.returncode, "said": _last_line(done.stdout if done.returncode == 0
                                                                    else done.stderr or done.stdout)}
        summary[name] = row
        click.echo(f"{name:10s} " + "  ".join(f"{step}: {row[step]['said']}" for step, _ in runs))
    (out / "zoo.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
