"""How far a finished tune's best records are from a careful re-timing after it (the winner's
curse: the best of many noisy measurements is the luckiest).

    python benchmarks/retime_fidelity.py --work-dir kb-work/gemm-512-kb --workload gemm-512 --target llvm \
        --out fidelity-gemm512.json

The `--top` best records of the work dir (by the median of their measurements, as a build picks
them) are rebuilt and re-timed in this process, `--rounds` times each (median of 10 repeats x 5
calls each). Records measured more than once (KBSearch re-measures its best few, and the
measurements merge into one record) are reported apart from those measured once.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import click


def _summary(rows: list[dict]) -> dict:
    diffs = sorted(abs(r["relative_difference"]) for r in rows)
    if not diffs:
        return {"count": 0}
    return {"count": len(diffs), "median_abs": statistics.median(diffs), "max_abs": diffs[-1],
            "within_3_percent": sum(d <= 0.03 for d in diffs)}


@click.command()
@click.option("--work-dir", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--workload", "workload_name", required=True)
@click.option("--target", default="llvm", show_default=True)
@click.option("--top", default=10, show_default=True)
@click.option("--rounds", default=3, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), required=True)
def main(work_dir, workload_name, target, top, rounds, out) -> None:
    from kb_tvm import RecordDatabase
    from kb_tvm.measure.records import record_latency
    from kb_tvm.measure.targets import make_target
    from kb_tvm.workloads import get_workload
    from pipeline_cost import retime  # the harness beside this one (benchmarks/)

    tvm_target = make_target(target)
    database = RecordDatabase(work_dir=work_dir)
    workload = database.commit_workload(get_workload(workload_name).module())
    rows = []
    for record in database.get_top_k(workload, top):
        again = [retime(record.as_measure_candidate(), tvm_target) for _ in range(rounds)]
        recorded, reference = record_latency(record.run_secs), statistics.median(again)
        rows.append({"recorded_s": recorded, "measurements": len(record.run_secs), "retimed_s": again,
                     "relative_difference": recorded / reference - 1.0,
                     "retime_spread": (max(again) - min(again)) / reference})
        click.echo(f"recorded {recorded * 1e3:.4f} ms ({len(record.run_secs)} measurement(s)), "
                   f"re-timed {reference * 1e3:.4f} ms: {rows[-1]['relative_difference']:+.1%}")
    report = {"work_dir": str(work_dir), "workload": workload_name, "target": dict(tvm_target.export()),
              "rows": rows, "all": _summary(rows), "measured_more_than_once": _summary(
                  [r for r in rows if r["measurements"] > 1]),
              "measured_once": _summary([r for r in rows if r["measurements"] == 1])}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=1, default=str))
    click.echo(json.dumps({k: report[k] for k in ("all", "measured_more_than_once", "measured_once")}))


if __name__ == "__main__":
    main()
