"""What a task borrows from the experience library, and how.

- `workload_summary`: the features by which similar workloads are found (the main block's
  structure as the operator kind, dtypes, log2 extents of its loops), read off the TIR.
- `adapt_tile`: tile factors of a borrowed schedule fitted to a new loop extent.
- `replay_adapted`: a borrowed schedule's trace replayed on the new workload, its tile
  decisions adapted; None where it does not apply (another sketch, an invalid schedule).
- `Borrowed`: what one similar workload lends a search: best traces, winning regions,
  measurement costs, cost-model rows.
- `lend` / `save`: read what similar workloads lend a task, write what a task learned.
- `train_model` / `offline_model`: the prior cost model fitted on a whole library
  (`kb-tvm train-model`), and finding one for a target (the library's, else kb_tvm's own).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .experience import Experience
from .surrogate import PriorModel
from .tvm_errors import invalid_schedule_errors

SHIPPED_MODELS = Path(__file__).resolve().parent / "models"

SPATIAL_DIMS = 4
REDUCE_DIMS = 2


@dataclass
class Borrowed:
    entry_id: str
    workload_name: str
    distance: float
    traces: list  # tvm.s_tir.schedule.Trace, best first
    regions_won: list[str]
    costs: dict
    best_latency_s: float
    samples: tuple[np.ndarray, np.ndarray] | None = None  # (features, log latency)
    used: dict = field(default_factory=dict)  # what the search took, for the log


def _blocks(stmt, found: list) -> None:
    from tvm import s_tir, tirx

    if isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            _blocks(child, found)
    elif isinstance(stmt, s_tir.SBlockRealize):
        _blocks(stmt.block, found)
    elif isinstance(stmt, s_tir.SBlock):
        if stmt.iter_vars:
            found.append(stmt)
        _blocks(stmt.body, found)
    elif hasattr(stmt, "body"):
        _blocks(stmt.body, found)


def workload_summary(mod, name: str) -> dict:
    """Features of an (unscheduled) workload: its main block is the one with a reduction and
    the most iterations (else the most iterations)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm_ffi import structural_hash

    func = next(iter(mod.functions.values()))
    blocks: list = []
    _blocks(func.body, blocks)

    def extents(block, kind: int) -> list[int]:  # loops of extent 1 say nothing
        return sorted((int(iv.dom.extent) for iv in block.iter_vars
                       if int(iv.iter_type) == kind and int(iv.dom.extent) > 1), reverse=True)

    def size(block) -> tuple[bool, int]:
        return bool(extents(block, 2)), math.prod(int(iv.dom.extent) for iv in block.iter_vars)

    main = max(blocks, key=size) if blocks else None
    spatial = extents(main, 0) if main is not None else []
    reduce = extents(main, 2) if main is not None else []
    reads = len(main.reads) if main is not None else 0
    vector = ([math.log2(e) for e in spatial[:SPATIAL_DIMS]] + [0.0] * SPATIAL_DIMS)[:SPATIAL_DIMS]
    vector += ([math.log2(e) for e in reduce[:REDUCE_DIMS]] + [0.0] * REDUCE_DIMS)[:REDUCE_DIMS]
    vector.append(float(len(blocks)))  # fused epilogues change the schedule's sketch
    params = ArgInfo.from_prim_func(func)
    return {
        "name": name,
        # by structure, not by name: "gemm" here is a "matmul" in a model's tasks
        "op_kind": f"s{len(spatial)}r{len(reduce)}i{reads}",
        "dtypes": sorted({str(a.dtype) for a in params}),
        "vector": vector,
        "shapes": [[int(d) for d in a.shape] for a in params],
        "hash": str(structural_hash(mod)),
    }


def adapt_tile(factors: list[int], extent: int, max_innermost: int | None = None) -> list[int]:
    """Factors for a loop of `extent` close to `factors`: each inner factor kept as far as
    it still divides what is left, the outermost takes the rest."""
    rest = int(extent)
    inner = []
    for factor in reversed([int(f) for f in factors[1:]]):
        kept = math.gcd(max(factor, 1), rest)
        inner.append(kept)
        rest //= kept
    new = [rest] + inner[::-1]
    if max_innermost and len(new) > 1:
        while new[-1] > max_innermost:  # move a prime factor of the innermost outwards
            prime = next(p for p in range(2, new[-1] + 1) if new[-1] % p == 0)
            new[-1] //= prime
            new[0] *= prime
    return new


def sketch_kinds(trace) -> list[str]:
    """Instruction kinds of the simplified trace without postprocessing: equal for schedules
    of one design space (stored traces are simplified: compare like with like)."""
    return [inst.kind.name for inst in trace.simplified(remove_postproc=True).insts]


def replay_adapted(trace, mod, seed: int):
    """The trace replayed on `mod` with its tile decisions fitted to `mod`'s loop extents, or
    None where it does not apply."""
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(mod, seed=seed, debug_mask="none", error_render_level="none")

    def decide(inst, inputs, attrs, decision):
        if inst.kind.name == "SamplePerfectTile" and decision is not None:
            extent = int(sch.get(inputs[0]).extent)
            max_innermost = int(attrs[1]) if len(attrs) > 1 else None
            return adapt_tile([int(f) for f in decision], extent, max_innermost)
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=decide)
    except invalid_schedule_errors():  # the borrowed schedule does not fit this workload
        return None
    return sch


def target_mcpu(target) -> str | None:
    """The CPU an llvm target was made for (None: another kind, or a bare llvm target)."""
    if target.kind.name != "llvm":
        return None
    mcpu = target.attrs.get("mcpu")
    return str(mcpu) if mcpu else None


def target_key(target) -> str:
    """Which shipped cost model fits a target: "llvm" (baseline x86-64 code), "llvm-avx512",
    "llvm-avx2", "cuda-sm_90", ..."""
    kind = target.kind.name
    if kind == "llvm" and target_mcpu(target) is not None:
        from tvm.target import codegen

        for isa in ("avx512f", "avx2"):
            if codegen.llvm_cpu_has_features([isa], target):
                return f"llvm-{isa.removesuffix('f')}"
    arch = target.attrs.get("arch") if hasattr(target, "attrs") else None
    return f"{kind}-{arch}" if kind == "cuda" and arch else kind


def offline_model(target, feature_version: str, folders: list[Path]) -> PriorModel | None:
    """The first cost model trained offline (`kb-tvm train-model`) for this target found in
    `folders`: the library's own models/ first, then the one shipped with kb_tvm."""
    import json

    key = target_key(target)
    for folder in folders:
        path, meta_path = folder / f"{key}.json", folder / f"{key}.meta.json"
        if not path.exists() or not meta_path.exists():
            continue
        meta = json.loads(meta_path.read_text())
        if meta.get("feature_version") != feature_version:
            continue
        return PriorModel.load(path, feature_version=feature_version, source=f"offline model {path} "
                               f"({meta.get('rows')} rows from {meta.get('workloads')} workloads)")
    return None


def train_model(experience: Experience, key: str, feature_version: str) -> tuple[PriorModel, dict]:
    """A cost model fitted on every row the library holds for targets of `key` (see target_key:
    "llvm-avx512", "cuda-sm_90", ...), and its description. ValueError if it holds none."""
    import datetime

    features, log_latency, used = [], [], []
    import tvm

    for entry in experience.entries():
        # the stored target is TVM's export, some attributes as strings: rebuild what keys it
        described = {name: entry.target[name] for name in ("kind", "mcpu", "arch") if name in entry.target}
        if target_key(tvm.target.Target(described)) != key:
            continue
        samples = entry.samples()
        if samples is None or samples[0] != feature_version:
            continue
        features.append(samples[1])
        log_latency.append(samples[2])
        used.append(entry.id)
    if not used:
        raise ValueError(f"no training rows for {key!r} in {experience.path}: tune on that target first")
    model = PriorModel.fit(np.concatenate(features), np.concatenate(log_latency), feature_version=feature_version,
                           source=f"trained on {len(used)} entries")
    meta = {"target": key, "feature_version": feature_version, "rows": int(sum(len(y) for y in log_latency)),
            "workloads": len(used), "entries": used,
            "trained": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    return model, meta


def lend(experience: Experience, mod, task_name: str, target, feature_version: str,
         k: int = 3, traces_each: int = 4) -> tuple[list[Borrowed], PriorModel | None]:
    """What the nearest similar workloads on this target kind lend a new task, and a prior
    cost model: fitted on their rows, else one trained offline (the library's, else kb_tvm's)."""
    summary = workload_summary(mod, task_name)
    borrowed = []
    for distance, entry in experience.nearest(summary, target_kind=target.kind.name, mcpu=target_mcpu(target), k=k):
        try:
            records = entry.database().get_all_tuning_records()
        except Exception as err:  # noqa: BLE001 - a damaged entry is skipped, not fatal
            warnings.warn(f"experience entry {entry.id}: its records cannot be read ({err}); skipped",
                          stacklevel=2)
            continue
        records = sorted(records, key=lambda r: _mean(r.run_secs))[:traces_each]
        samples = entry.samples()
        rows = None
        if samples is not None and samples[0] == feature_version:
            rows = (samples[1], samples[2])
        borrowed.append(Borrowed(entry.id, entry.workload["name"], distance, [r.trace for r in records],
                                 list(entry.regions_won), dict(entry.costs), entry.best_latency_s, rows))
    with_rows = [b for b in borrowed if b.samples is not None]
    if with_rows:
        features = np.concatenate([b.samples[0] for b in with_rows])
        log_latency = np.concatenate([b.samples[1] for b in with_rows])
        prior = PriorModel.fit(features, log_latency, feature_version=feature_version,
                               source="fitted on " + ", ".join(b.entry_id for b in with_rows))
    else:
        prior = offline_model(target, feature_version, [experience.path / "models", SHIPPED_MODELS])
    return borrowed, prior


def _mean(run_secs) -> float:
    secs = [float(s) for s in run_secs or []]
    return sum(secs) / len(secs) if secs else math.inf


def save(experience: Experience, context, payload: dict) -> str:
    """Write one task's experience (from TaskSearch.experience) as a library entry; its id."""
    import json

    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

    mod, target = context.mod, context.target
    func = next(iter(mod.functions.values()))
    with tempfile.TemporaryDirectory(prefix="kb-experience-") as tmp:
        files = (Path(tmp) / "database_workload.json", Path(tmp) / "database_tuning_record.json")
        database = JSONDatabase(path_workload=str(files[0]), path_tuning_record=str(files[1]))
        workload = database.commit_workload(mod)
        for trace, latency in payload["best"]:
            database.commit_tuning_record(TuningRecord(trace, workload, [float(latency)], target,
                                                       ArgInfo.from_prim_func(func)))
        entry = experience.add(
            target=json.loads(json.dumps(dict(target.export()), default=str)), tvm_version=tvm.__version__,
            workload=workload_summary(mod, str(context.task_name or "main")),
            best_latency_s=float(payload["best"][0][1]), seconds=float(payload["seconds"]),
            trials=int(payload["trials"]), trajectory=payload["trajectory"], regions_won=payload["regions_won"],
            costs=payload["costs"], database_files=files, samples=payload["samples"])
    return entry.id
