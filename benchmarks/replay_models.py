"""Allocations side by side on a model-level replay (kb_tvm/replay/model.py): a model's tasks,
each answered from its dataset, on one clock; each allocator deals out the same batches.

    python benchmarks/replay_models.py --datasets datasets --budget 240s --seeds 10 --out models.json

Per model and seed every allocator runs the same task searches (kb's rules at that seed), each
task's search batch by batch as the allocator gives it seconds.
Reported: the model's latency at 10/25/50/100% of the budget and its mean over the budget, each
allocator against KBTaskScheduler's rule ("rule"), paired over seeds (one-sided Wilcoxon where
scipy is installed, else the count of seeds where it is lower).
"""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click
import numpy as np

from kb_tvm import parse_budget


def _one(job: tuple) -> list[dict]:
    from kb_tvm.replay.model import ALLOCATORS, load_model, model_tasks, replay_model

    name, spec, seed, budget_s, folders = job
    model, rows = load_model(spec, folders), []
    for label, allocator in ALLOCATORS.items():
        tasks, clock = model_tasks(model, budget_s=budget_s, seed=seed)
        rows.append({"model": name, "seed": seed, "allocator": label,
                     **replay_model(tasks, allocator, budget_s=budget_s, clock=clock).summary()})
    return rows


def paired(rows: list[dict], metric) -> dict:
    """Each allocator's metric against the rule's, over (model, seed) pairs: mean ratio, how often lower."""
    by = {}
    for r in rows:
        by.setdefault((r["model"], r["seed"]), {})[r["allocator"]] = metric(r)
    out = {}
    for label in sorted({r["allocator"] for r in rows} - {"rule"}):
        pairs = [(v[label], v["rule"]) for v in by.values() if label in v and "rule" in v]
        ratios = [a / b for a, b in pairs]
        entry = {"pairs": len(pairs), "mean_ratio_to_rule": float(np.mean(ratios)),
                 "lower_than_rule": sum(a < b for a, b in pairs)}
        try:
            from scipy.stats import wilcoxon

            diffs = [a - b for a, b in pairs]
            entry["wilcoxon_p_lower"] = float(wilcoxon(diffs, alternative="less").pvalue) if any(diffs) else 1.0
        except ImportError:
            pass
        out[label] = entry
    return out


@click.command()
@click.option("--datasets", "folders", multiple=True, type=click.Path(file_okay=False), default=("datasets",),
              show_default=True, help="Folders of datasets; the first holds models.json.")
@click.option("--models", "models_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Default: models.json in the first --datasets folder.")
@click.option("--budget", default="240s", show_default=True)
@click.option("--seeds", default=10, show_default=True, type=click.IntRange(1))
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(1))
@click.option("--out", type=click.Path(dir_okay=False), required=True)
def main(folders, models_file, budget, seeds, jobs, out) -> None:
    """Replay each model's tuning under every allocator, seed by seed."""
    models = json.loads(Path(models_file or Path(folders[0]) / "models.json").read_text())["models"]
    budget_s = parse_budget(budget)
    jobs_list = [(name, spec, seed, budget_s, folders) for name, spec in models.items() for seed in range(seeds)]
    rows = []
    with ProcessPoolExecutor(jobs) as pool:
        for batch in pool.map(_one, jobs_list):
            rows.extend(batch)
            for r in batch:
                click.echo(f"{r['model']:16s} seed {r['seed']} {r['allocator']:14s} at 25% "
                           f"{r['latency_ms_at']['25%']:.4f} ms, mean {r['mean_latency_ms']:.4f} ms "
                           f"(best possible {r['best_possible_ms']:.4f})")
    report = {"command": f"python benchmarks/replay_models.py {' '.join(f'--datasets {f}' for f in folders)} "
                         f"--budget {budget} --seeds {seeds}",
              "runs": rows,
              "at_25_percent": paired(rows, lambda r: r["latency_ms_at"]["25%"]),
              "mean_over_budget": paired(rows, lambda r: r["mean_latency_ms"])}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=1))
    for metric in ("at_25_percent", "mean_over_budget"):
        for label, entry in report[metric].items():
            click.echo(f"{metric}: {label} / rule = {entry['mean_ratio_to_rule']:.3f} "
                       f"(lower on {entry['lower_than_rule']} of {entry['pairs']})")


if __name__ == "__main__":
    main()
