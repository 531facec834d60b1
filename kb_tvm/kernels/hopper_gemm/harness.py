"""The Hopper GEMM template (schedules/hopper_gemm.py) on an H200: every variant checked against a
reference before it is timed, beside cuBLAS (through torch) on the same GPU.

    python -m kb_tvm.kernels.hopper_gemm.harness --shape 4096x4096x4096 --tile 128x128x4x1 --out hopper.json
    python -m kb_tvm.kernels.hopper_gemm.harness --shape 4096x4096x4096 --search 5m --out search.json
    python -m kb_tvm.kernels.hopper_gemm.harness --workload gemm-4096-fp16 --search 1m --out search.json

--tile is BMxBNxSTAGESxCONSUMERS[xGROUP_M[xPRODUCER[xPERSISTENT[xPAIRED[xSETMAXNREG[xCLUSTER_M[xPINGPONG]]]]]]]
(repeatable; PRODUCER to SETMAXNREG and PINGPONG are 0 or 1, CLUSTER_M 1 or 2). A variant whose
result differs from the reference is reported as wrong and never timed. `ms` is device time (CUPTI, through
torch.profiler), `call_ms` the call with its launch (CUDA events), for cuBLAS alike.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ...measure.pipeline import CANDIDATE_FAILURES


TILE_FORMAT = "BMxBNxSTAGESxCONSUMERS[xGROUP_M[xPRODUCER[xPERSISTENT[xPAIRED[xSETMAXNREG[xCLUSTER_M[xPINGPONG]]]]]]]"
TILE_FIELDS = ("bm", "bn", "stages", "consumers", "group_m", "producer", "persistent", "paired_stores", "setmaxnreg",
               "cluster_m", "pingpong")  # GemmTile's, in TILE_FORMAT's order
TILE_FLAGS = ("producer", "persistent", "paired_stores", "setmaxnreg", "pingpong")  # 0 or 1 in the text


def _parse(text: str, parts: int, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.lower().split("x")]
    except ValueError:
        values = []
    if len(values) != parts:
        raise click.BadParameter(f"{text!r}: {what}")
    return values


def time_call(fn, *, warmup: int = 10, repeat: int = 100) -> float:
    """Median seconds of one call, timed with CUDA events (torch): the kernel and its launch."""
    from kb_tvm.workloads.torch_baselines import median_ms

    return median_ms(fn, repeat, warmup) * 1e-3


def kernel_seconds(fn, *, calls: int = 50) -> float:
    """Device seconds of one call: the CUDA kernels it launched, as CUPTI (torch.profiler) saw
    them, summed and divided by the calls. Unlike CUDA events around a call it leaves out the host's
    launch work, which dominates a GEMM of a few microseconds (M = 128)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    if not kernels:
        raise RuntimeError("the profiler saw no CUDA kernel")
    return sum(e.time_range.elapsed_us() for e in kernels) * 1e-6 / calls


def run_variant(m, n, k, tile, out_dtype, a, b, reference) -> dict:
    import torch
    import tvm

    from kb_tvm.schedules.hopper_gemm import compile_gemm

    row = {"shape": [m, n, k], "tile": tile.describe(), "out_dtype": out_dtype}
    splits = tile.k_splits  # > 1: the template writes fp32 partial sums, torch sums and casts them
    started = time.monotonic()
    try:
        mod = compile_gemm(m, n, k, tile, "float32" if splits > 1 else out_dtype)
    except (*CANDIDATE_FAILURES, ValueError) as err:  # TVM's and nvcc's failures, or the template's refusal
        row.update(built=False, error=f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}")
        return row
    row["build_s"] = round(time.monotonic() - started, 2)
    c = torch.zeros((splits, m, n) if splits > 1 else (m, n), dtype=torch.float32 if splits > 1 else
                    getattr(torch, out_dtype), device="cuda")
    args = [tvm.runtime.from_dlpack(t) for t in (a, b, c)]

    def call():
        mod(*args)
        return c.sum(0).to(getattr(torch, out_dtype)) if splits > 1 else c

    try:
        out = call()
        torch.cuda.synchronize()
    except CANDIDATE_FAILURES as err:  # a launch that fails (CUDA's errors are RuntimeErrors): this variant's result
        row.update(correct=False, error=f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}")
        return row
    err = (out.float() - reference).abs().max().item()
    scale = reference.abs().max().item()
    row["max_abs_error"] = err
    row["correct"] = bool(err <= 1e-2 * scale + 1e-3)
    if row["correct"]:
        seconds = time_call(call)
        row["call_ms"] = seconds * 1e3
        row["ms"] = kernel_seconds(call) * 1e3  # a split-K's sum and cast included
        row["tflops"] = 2 * m * n * k / (row["ms"] * 1e-3) / 1e12
    return row


def search_shape(m, n, k, dtype, b_layout, out_dtype, budget, a, b, reference, echo) -> dict:
    """kb's search over the template's variants for one shape (variants.py) within
    `budget` seconds: each asked variant built, checked and timed; the best and the curve."""
    from ...budget import TuningBudget
    from .variants import VariantSearch

    clock = TuningBudget(budget).start()
    search = VariantSearch(m, n, k, dtype, b_layout)
    rows, curve, records = [], [], []
    while not clock.exhausted and (tile := search.ask()) is not None:
        row = run_variant(m, n, k, tile, out_dtype, a, b, reference)
        seconds = row["ms"] * 1e-3 if row.get("correct") and row.get("ms") else None
        search.tell(tile, seconds)
        records.append(VariantSearch.record(tile, seconds))
        best = search.best
        curve.append({"seconds": round(clock.spent, 2), "best_ms": best[1] * 1e3 if best else None})
        rows.append(row)
        echo(json.dumps({**row, "spent_s": curve[-1]["seconds"]}))
    best = search.best
    return {"shape": [m, n, k], "budget_s": clock.total, "spent_s": round(clock.spent, 2),
            "stopped": "budget" if clock.exhausted else "nothing left is predicted to beat the best",
            "variants": len(search.pool), "measured": len(records), "curve": curve, "records": records,
            "best": None if best is None else {"tile": best[0].describe(), "ms": best[1] * 1e3}, "rows": rows}


def problems(shapes, workload_names, dtype, b_layout, out_dtype) -> list:
    """The GEMMs to run: each --shape with the dtype and layout options, and each --workload of
    the suite as its TIR says (kernels/fused_gemm.py), or a one-line error why it cannot be."""
    from ..fused_gemm import GemmProblem, NotAGemm
    from .family import match_hopper_gemm
    from kb_tvm.workloads import get_workload

    out = []
    for text in shapes:
        m, n, k = _parse(text, 3, "MxNxK")
        out.append(GemmProblem(m=m, n=n, k=k, dtype=dtype, out_dtype=out_dtype, b_layout=b_layout))
    for name in workload_names:
        try:
            problem = match_hopper_gemm(get_workload(name).module()).problem
        except NotAGemm as err:
            raise click.BadParameter(f"{name}: {err}", param_hint="--workload") from None
        except ValueError as err:  # an unknown name
            raise click.BadParameter(str(err), param_hint="--workload") from None
        if problem.batch > 1:
            raise click.BadParameter(f"{name}: a batch of {problem.batch} GEMMs; this harness times one GEMM "
                                     "(kb-tvm tune-op searches the batched kernels)", param_hint="--workload")
        out.append(problem)
    return out


@click.command()
@click.option("--shape", "shapes", multiple=True, help="MxNxK (with --dtype, --b-layout, --out-dtype)")
@click.option("--workload", "workload_names", multiple=True,
              help="A GEMM of the suite (e.g. gemm-4096-fp16): its shape, dtypes and layout; needs --search")
@click.option("--tile", "tiles", multiple=True, default=("128x128x4x1",),
              help=TILE_FORMAT)
@click.option("--dtype", default="float16", type=click.Choice(["float16", "bfloat16"]))
@click.option("--out-dtype", default="float16", type=click.Choice(["float32", "float16", "bfloat16"]))
@click.option("--b-layout", default="nk", type=click.Choice(["nk", "kn"]), help="B as [N, K] or [K, N]")
@click.option("--search", "budget", default=None, help="Instead of --tile: kb's variant search within this budget, e.g. 5m")
@click.option("--out", "out_path", type=click.Path(path_type=Path), required=True)
def main(shapes, workload_names, tiles, dtype, out_dtype, b_layout, budget, out_path):
    if workload_names and budget is None:
        raise click.UsageError("--workload needs --search BUDGET (its variants follow its dtype and layout)")
    from kb_tvm.budget import parse_budget
    from kb_tvm.schedules.hopper_gemm import GemmTile

    todo = problems(shapes or (() if workload_names else ("4096x4096x4096",)), workload_names, dtype,
                    b_layout, out_dtype)
    if budget is not None:
        try:
            parse_budget(budget)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--search") from None
    variants = []
    for text in tiles:
        parts = len(text.split("x"))
        values = _parse(text, parts if 4 <= parts <= len(TILE_FIELDS) else 4, TILE_FORMAT)
        given = dict(zip(TILE_FIELDS, values))
        for flag in TILE_FLAGS:
            if flag in given:
                given[flag] = bool(given[flag])
        try:
            variants.append(GemmTile(**given, b_layout=b_layout, dtype=dtype))
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--tile") from None
    try:
        import torch
    except ImportError:
        raise click.ClickException("the harness needs torch (its reference and cuBLAS) and an sm_90 GPU") from None
    rows = []

    def save(dtype):  # after every row: a run cut short keeps what it measured
        out_path.write_text(json.dumps({"device": torch.cuda.get_device_name(), "dtype": dtype, "rows": rows},
                                       indent=1))

    for problem in todo:
        m, n, k, dtype, b_layout, out_dtype = (problem.m, problem.n, problem.k, problem.dtype, problem.b_layout,
                                               problem.out_dtype)
        torch_dtype = getattr(torch, dtype)
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn((m, k), device="cuda", dtype=torch_dtype, generator=gen)
        b = torch.randn((n, k) if b_layout == "nk" else (k, n), device="cuda", dtype=torch_dtype, generator=gen)
        b_kn = b.T if b_layout == "nk" else b  # B as [K, N] for torch either way
        reference = a.float() @ b_kn.float()
        def cublas(a=a, b_kn=b_kn):
            return torch.matmul(a, b_kn)

        cublas_call_s, cublas_s = time_call(cublas), kernel_seconds(cublas)
        rows.append({"shape": [m, n, k], "dtype": dtype, "b_layout": b_layout, "out_dtype": out_dtype,
                     "cublas_ms": cublas_s * 1e3, "cublas_call_ms": cublas_call_s * 1e3,
                     "cublas_tflops": 2 * m * n * k / cublas_s / 1e12})
        click.echo(json.dumps(rows[-1]))
        if budget is not None:
            rows.append(search_shape(m, n, k, dtype, b_layout, out_dtype, budget, a, b, reference, click.echo))
            save(dtype)
            continue
        for tile in variants:
            if tile.fits(m, n, k):
                continue
            rows.append(run_variant(m, n, k, tile, out_dtype, a, b, reference))
            click.echo(json.dumps(rows[-1]))
            save(dtype)
    save(dtype)


if __name__ == "__main__":
    main()
