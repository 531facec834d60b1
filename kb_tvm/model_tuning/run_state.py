"""The job's resume state in the work dir: written after every scheduler decision, read
back (and its record files repaired) by `--resume`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..allocation import TaskStats
from ..budget import TuningBudget
from ..tuning import KB_STRATEGIES
from .onnx_input import ModelError

STATE_FILE = "kb_state.json"
_DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


def write_state(work_dir: Path, *, name: str, precision: str, math: str, budget: TuningBudget,
                tasks: list[TaskStats], batches: list[dict]) -> None:
    """The job's state after each scheduler decision; written whole and renamed, so a kill
    at any moment leaves either the old or the new file."""
    state = {"schema": 1, "model": name, "precision": precision, "math": math, "budget_s": budget.total, "spent_s": budget.spent,
             "tasks": [vars(t) for t in tasks], "batches": batches}
    partial = work_dir / (STATE_FILE + ".partial")
    partial.write_text(json.dumps(state))
    os.replace(partial, work_dir / STATE_FILE)


def read_state(work_dir: Path, *, name: str, resume: bool, strategy: str, precision: str = "fp32",
               math: str = "exact") -> dict | None:
    """The interrupted run to resume, or None for a new job; one-line errors otherwise."""
    path = work_dir / STATE_FILE
    if not resume:
        if path.exists():
            raise ModelError(f"{work_dir} holds an earlier run: add --resume to continue it, or use another "
                             "--work-dir")
        return None
    if strategy not in KB_STRATEGIES:  # stock's gradient scheduler keeps no state to resume from
        raise ModelError("--resume works with --strategy kb or agent only")
    if not path.exists():
        raise ModelError(f"nothing to resume in {work_dir}: it has no {STATE_FILE}")
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise ModelError(f"{path} is damaged; start a new run in another --work-dir") from None
    if state.get("model") != name:
        raise ModelError(f"{work_dir} holds a run of {state.get('model')}, not {name}")
    if state.get("precision", "fp32") != precision:  # other precisions are other kernels
        raise ModelError(f"{work_dir} holds a --precision {state.get('precision', 'fp32')} run, not {precision}")
    if state.get("math", "exact") != math:  # fast math is other kernels too (runs before it was exact)
        raise ModelError(f"{work_dir} holds a run with {state.get('math', 'exact')} math, not {math}: "
                         + ("add --exact-math" if math == "fast" else "drop --exact-math"))
    for file_name in _DATABASE_FILES:  # a kill mid-write can leave a torn last record
        _drop_torn_tail(work_dir / file_name)
    return state


def _drop_torn_tail(path: Path) -> None:
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    keep = len(lines)
    while keep and not _is_json(lines[keep - 1]):
        keep -= 1
    if keep < len(lines):
        path.write_text("".join(line + "\n" for line in lines[:keep]))


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True
