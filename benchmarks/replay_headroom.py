"""Where an agent could beat kb's rules: the rules with other settings of the decisions an agent
would take (the coarse phase's samples and measurements per region, regions kept, batch size,
exploration), beside uniform sampling and stock's search, on the same datasets, budget and
seeds. Per run: seconds to within 5% of the dataset's best (t5; the budget where never), and
whether it ends within 2% of it.

    python benchmarks/replay_headroom.py DATASET.jsonl.gz ... --budget 60s --seeds 10 --out headroom.json

The summary gives each setting's median t5 over (dataset, seed) and its ratio to the rules'
(paired), and the oracle that takes the best setting for each dataset (mean t5 over the seeds),
an upper bound on what choosing settings per task can buy.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
from common import reached, run_in_pool  # benchmarks/common.py: the same t5 as the fidelity's

# name -> (SearchOptions overrides, candidates a batch or None for tune-op's)
SETTINGS = {
    "rules": ({}, None),
    "coarse_1_per_region": ({"coarse_trials_per_region": 1}, None),
    "coarse_4_per_region": ({"coarse_trials_per_region": 4}, None),
    "coarse_64_samples": ({"coarse_samples_per_space": 64}, None),
    "keep_1_region": ({"keep_regions": 1}, None),
    "explore_0.1": ({"explore_share": 0.1}, None),
    "explore_0.6": ({"explore_share": 0.6}, None),
    "batch_8": ({}, 8),
    "batch_32": ({}, 32),
}
BASELINES = ("random", "evolutionary")


def one(job: tuple) -> dict:
    from kb_tvm.replay import POLICIES, Dataset, ReplayEnv
    from kb_tvm.replay.policies import RulesPolicy
    from kb_tvm.search.options import SearchOptions

    path, setting, seed, budget_s = job
    data = Dataset.load(Path(path))
    env = ReplayEnv(data, budget=budget_s)
    if setting in BASELINES:
        policy = POLICIES[setting]()
    else:
        overrides, batch = SETTINGS[setting]
        policy = RulesPolicy(options=SearchOptions(**overrides), trials_per_batch=batch)
    policy.run(env, seed=seed)
    best_ms = data.best_latency_s * 1e3
    final = env.best_at(budget_s)
    return {"dataset": data.name, "setting": setting, "seed": seed, "t5_s": reached(env.curve, 1.05 * best_ms, budget_s),
            "final_over_best": None if final is None else final / best_ms,
            "within_2_percent": final is not None and final <= 1.02 * best_ms, "trials": env.trials}


def summarize(rows: list[dict], budget_s: float) -> dict:
    from scipy.stats import wilcoxon

    t5 = {(r["dataset"], r["setting"], r["seed"]): r["t5_s"] for r in rows}
    datasets = sorted({r["dataset"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    pairs = [(d, s) for d in datasets for s in seeds]
    out = {"settings": {}}
    for name in settings:
        mine = np.array([t5[(d, name, s)] for d, s in pairs])
        rules = np.array([t5[(d, "rules", s)] for d, s in pairs])
        entry = {"median_t5_s": float(np.median(mine)), "mean_t5_s": float(np.mean(mine)),
                 "median_over_rules": float(np.median(mine) / np.median(rules)),
                 "within_2_percent": float(np.mean([r["within_2_percent"] for r in rows if r["setting"] == name])),
                 "per_dataset_mean_t5_s": {d: float(np.mean([t5[(d, name, s)] for s in seeds])) for d in datasets}}
        if name != "rules" and np.any(mine != rules):
            entry["wilcoxon_p_below_rules"] = float(wilcoxon(mine, rules, alternative="less").pvalue)
        out["settings"][name] = entry
    tunable = [n for n in settings if n in SETTINGS]
    pick = {d: min(tunable, key=lambda n: out["settings"][n]["per_dataset_mean_t5_s"][d]) for d in datasets}
    oracle = np.array([t5[(d, pick[d], s)] for d, s in pairs])
    rules = np.array([t5[(d, "rules", s)] for d, s in pairs])
    out["oracle"] = {"pick": pick, "median_t5_s": float(np.median(oracle)),
                     "median_over_rules": float(np.median(oracle) / np.median(rules)), "budget_s": budget_s}
    return out


@click.command()
@click.argument("datasets", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--budget", "budget_s", default=60.0, show_default=True, type=float, help="Simulated seconds.")
@click.option("--seeds", default=10, show_default=True, type=click.IntRange(1))
@click.option("--settings", "names", default=",".join([*SETTINGS, *BASELINES]), show_default=True)
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(1))
@click.option("--out", type=click.Path(dir_okay=False), required=True)
def main(datasets, budget_s, seeds, names, jobs, out) -> None:
    chosen = names.split(",")
    unknown = [n for n in chosen if n not in SETTINGS and n not in BASELINES]
    if unknown or "rules" not in chosen:
        raise click.BadParameter(f"{unknown or 'rules missing'}: settings are {', '.join([*SETTINGS, *BASELINES])}, "
                                 "the rules among them", param_hint="--settings")
    jobs_list = [(path, name, seed, budget_s) for path in datasets for name in chosen for seed in range(seeds)]
    rows = run_in_pool(one, jobs_list, jobs, lambda row: f"{row['dataset']:40s} {row['setting']:22s} seed "
                       f"{row['seed']} t5 {row['t5_s']:6.1f} s final/best {row['final_over_best'] or float('nan'):.3f}")
    report = {"command": "python benchmarks/replay_headroom.py " + " ".join(datasets)
              + f" --budget {budget_s:g} --seeds {seeds} --settings {names}", "runs": rows,
              **summarize(rows, budget_s)}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=1))
    for name, entry in report["settings"].items():
        click.echo(f"{name:22s} median t5 {entry['median_t5_s']:6.1f} s ({entry['median_over_rules']:.2f}x the rules'), "
                   f"within 2%: {entry['within_2_percent']:.0%}" + (f", p={entry['wilcoxon_p_below_rules']:.3g}"
                                                                    if "wilcoxon_p_below_rules" in entry else ""))
    click.echo(f"oracle per dataset: median t5 {report['oracle']['median_t5_s']:.1f} s "
               f"({report['oracle']['median_over_rules']:.2f}x the rules'), picks {report['oracle']['pick']}")


if __name__ == "__main__":
    main()
