"""How many drawn samples of a GPU design space survive MetaSchedule's postprocessors and TVM's
lowering: KBSearch's sampler (tile decisions fitted to the GPU) against uniform draws (what
MetaSchedule's ReplayTrace does), on the same spaces. No GPU is needed: sampling, postprocessing
and lowering for `cuda -arch=sm_90` run on the CPU.

    python benchmarks/sample_yield.py --workload gemm-4096-fp16 --samples 200 --out gemm-4096-fp16.json

Samples are lowered under the pass options kb builds with (`build_config`: on CUDA, for
tensor-core kernels, `tirx.merge_static_smem`, which avoids the StorageRewrite failure "tvm_access_ptr element type
must match the source buffer" that most tensor-core samples hit in TVM 0.27). `--plain-lowering`
also counts them under TVM's defaults, as stock MetaSchedule builds them.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import click
from common import HOPPER  # benchmarks/common.py



def candidate_factory(workload, target, *, fitted_tiles: bool, seed: int, log_dir: str):
    """KBSearch's candidate factory for `workload`'s space on `target`, outside a tune."""
    from common import design_space  # benchmarks/common.py
    from kb_tvm.decision_log import DecisionLog
    from kb_tvm.search import CandidateFactory, SearchOptions

    return CandidateFactory.outside_tune(
        workload.module(), target, space_generator=design_space(workload, target),
        options=SearchOptions(seed=seed, repeatable=True, fitted_tiles=fitted_tiles), task_name=workload.name,
        log=DecisionLog.for_task(log_dir, workload.name, None))


def sample_yield(workload, target, *, samples: int, fitted_tiles: bool, seed: int = 1,
                 plain_lowering: bool = False) -> dict:
    """Per design space: samples asked, valid (postprocessed and lowered), and the dropped by reason."""
    rows = []
    with tempfile.TemporaryDirectory() as log_dir:
        task = candidate_factory(workload, target, fitted_tiles=fitted_tiles, seed=seed, log_dir=log_dir)
        if plain_lowering:
            task.pass_config = lambda target, mod: {}
        for space in range(len(task.spaces)):
            before = dict(task.dropped)
            started = time.perf_counter()
            valid = task.sample(space, samples)
            dropped = {k: task.dropped[k] - before[k] for k in before}
            rows.append({"space": space, "asked": samples, "valid": len(valid), "dropped": dropped,
                         "seconds": time.perf_counter() - started,
                         "fitted": task.tile_plans.get(space) is not None})
    return {"spaces": rows, "asked": sum(r["asked"] for r in rows), "valid": sum(r["valid"] for r in rows),
            "failed_postproc": sum(r["dropped"]["postproc"] for r in rows),
            "failed_lowering": sum(r["dropped"]["verify"] for r in rows)}


@click.command()
@click.option("--workload", "workload_name", default="gemm-4096-fp16", show_default=True)
@click.option("--target", default=json.dumps(HOPPER), show_default="an sm_90 GPU (H100, H200)")
@click.option("--samples", default=200, show_default=True, help="Per design space and sampler.")
@click.option("--seed", default=1, show_default=True)
@click.option("--plain-lowering", is_flag=True, help="Also lower under TVM's default pass options.")
@click.option("--out", type=click.Path(dir_okay=False), required=True)
def main(workload_name, target, samples, seed, plain_lowering, out) -> None:
    import tvm

    from kb_tvm.workloads import get_workload

    workload = get_workload(workload_name)
    tvm_target = tvm.target.Target(json.loads(target))
    report = {"workload": workload_name, "target": json.loads(target), "samples": samples, "seed": seed, "runs": {}}
    for plain in (True, False) if plain_lowering else (False,):
        for fitted in (False, True):
            label = ("kb" if fitted else "uniform") + (" (plain lowering)" if plain else "")
            result = sample_yield(workload, tvm_target, samples=samples, fitted_tiles=fitted, seed=seed,
                                  plain_lowering=plain)
            report["runs"][label] = result
            click.echo(f"{label:28} valid {result['valid']:4d} of {result['asked']} "
                       f"({result['valid'] / result['asked']:.1%}); failed postprocessing {result['failed_postproc']}, "
                       f"lowering {result['failed_lowering']}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
