"""Datasets from candidate logs: every workload (and target) the logs hold becomes one dataset.

    python -m kb_tvm.replay.build kb-work/*/candidates.jsonl --out datasets

A dataset is named TARGETKIND-[PREFIX]TASK (e.g. llvm-gemm_512). Workloads with fewer than
--min-points distinct schedules are left out (a model's trivial tasks).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import click

from ..measure.candidate_log import CandidateLog
from .catalog import SUFFIX
from .dataset import build_dataset


@click.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder for the datasets.")
@click.option("--prefix", default="", help="Put before each task's name (a model's, say: bert-base-).")
@click.option("--min-points", default=100, show_default=True, help="Smaller workloads are left out.")
def main(logs, out_dir, prefix, min_points) -> None:
    groups: dict[tuple[str, str], set[str]] = defaultdict(set)
    for log in logs:
        for row in CandidateLog.read(log):
            groups[(row["workload"], row["target"])].add(log)
    for (workload, _target), sources in sorted(groups.items()):
        dataset = build_dataset(sorted(sources), name="", workload=workload)
        dataset.name = f"{dataset.target_kind}-{prefix}{dataset.task}"
        if dataset.size < min_points:
            click.echo(f"{dataset.name}: {dataset.size} schedules, fewer than {min_points}: left out")
            continue
        path = dataset.save(Path(out_dir) / f"{dataset.name}{SUFFIX}")
        valid = sum(p.ok for p in dataset.points)
        click.echo(f"{dataset.name}: {dataset.size} schedules ({valid} valid), {len(dataset.sketches)} sketches, "
                   f"{path.stat().st_size / 1e6:.2f} MB -> {path}")


if __name__ == "__main__":
    main()
