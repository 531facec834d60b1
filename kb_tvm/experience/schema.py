"""What an experience entry holds on disk (its files, fields and SCHEMA_VERSION) and the checks
its writers and readers share: each bad field is a one-line ValueError naming it."""

from __future__ import annotations

import json
import math
import re
import reprlib
from datetime import datetime

import numpy as np

SCHEMA_VERSION = 1

_ENTRY_FILE = "entry.json"
_DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")
_SAMPLES_FILE = "samples.json"
_ENTRY_FILES = frozenset((_ENTRY_FILE, *_DATABASE_FILES, _SAMPLES_FILE))
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_WORKLOAD_KEYS = ("name", "op_kind", "dtypes", "vector", "shapes", "hash")
_COST_KEYS = ("per_batch_s", "per_candidate_s", "per_run_second")
_FIELDS = ("id", "created", "target_kind", "target", "tvm_version", "workload", "best_latency_s",
           "seconds", "trials", "trajectory", "regions_won", "costs")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _short(value) -> str:
    # a long vector or trajectory is shortened ("[1, 2, 3, 4, 5, 6, ...]"): one short line, cheap to build
    return reprlib.repr(value)


def _check_workload(workload) -> None:
    _check(isinstance(workload, dict), f"workload={_short(workload)}: workload must be a dict")
    missing = [key for key in _WORKLOAD_KEYS if key not in workload]
    _check(not missing,
           f"workload is missing {', '.join(missing)}: workload needs {', '.join(_WORKLOAD_KEYS)}")
    for key in ("name", "op_kind", "hash"):
        value = workload[key]
        _check(isinstance(value, str) and value != "",
               f"workload {key}={_short(value)}: {key} must be a non-empty string")
    dtypes = workload["dtypes"]
    _check(isinstance(dtypes, list) and all(isinstance(d, str) for d in dtypes),
           f"workload dtypes={_short(dtypes)}: dtypes must be a list of strings")
    vector = workload["vector"]
    _check(isinstance(vector, list) and all(_is_number(v) for v in vector),
           f"workload vector={_short(vector)}: vector must be a list of finite numbers")
    shapes = workload["shapes"]
    _check(isinstance(shapes, list) and all(isinstance(s, list) and all(_is_int(d) for d in s) for s in shapes),
           f"workload shapes={_short(shapes)}: shapes must be a list of lists of ints")


def _check_record(record: dict) -> None:
    """Raises a one-line ValueError naming the first bad field of an entry.json record."""
    entry_id = record["id"]
    _check(isinstance(entry_id, str) and _ID_RE.fullmatch(entry_id) is not None,
           f"id={_short(entry_id)}: id must be letters, digits, '.', '_' or '-', not starting with '.', '_' or '-'")
    created = record["created"]
    try:
        datetime.fromisoformat(created)
    except (TypeError, ValueError):
        raise ValueError(f"created={_short(created)}: created must be an ISO-8601 time") from None
    target = record["target"]
    _check(isinstance(target, dict) and isinstance(target.get("kind"), str) and target["kind"] != "",
           f"target={_short(target)}: target must be a dict with a non-empty 'kind'")
    _check(record["target_kind"] == target["kind"],
           f"target_kind={_short(record['target_kind'])}: target_kind must equal target['kind']")
    version = record["tvm_version"]
    _check(isinstance(version, str) and version != "",
           f"tvm_version={_short(version)}: tvm_version must be a non-empty string")
    _check_workload(record["workload"])
    best = record["best_latency_s"]
    _check(_is_number(best) and best > 0,
           f"best_latency_s={_short(best)}: best_latency_s must be finite and > 0")
    seconds = record["seconds"]
    _check(_is_number(seconds) and seconds >= 0, f"seconds={_short(seconds)}: seconds must be finite and >= 0")
    trials = record["trials"]
    _check(_is_int(trials) and trials >= 0, f"trials={_short(trials)}: trials must be an int >= 0")
    trajectory = record["trajectory"]
    _check(isinstance(trajectory, list) and all(
        isinstance(p, list) and len(p) == 2 and _is_number(p[0]) and p[0] >= 0 and _is_number(p[1]) and p[1] > 0
        for p in trajectory),
        f"trajectory={_short(trajectory)}: trajectory must be [[seconds >= 0, latency > 0], ...]")
    times = [p[0] for p in trajectory]
    _check(times == sorted(times),
           f"trajectory seconds={_short(times)}: trajectory seconds must be non-decreasing")
    regions = record["regions_won"]
    _check(isinstance(regions, list) and all(isinstance(r, str) for r in regions),
           f"regions_won={_short(regions)}: regions_won must be a list of strings")
    costs = record["costs"]
    _check(isinstance(costs, dict) and all(_is_number(costs.get(k)) and costs[k] >= 0 for k in _COST_KEYS),
           f"costs={_short(costs)}: costs must hold finite numbers >= 0 for {', '.join(_COST_KEYS)}")


def _json_default(value):
    # numpy scalars and arrays from the tuner become plain JSON numbers and lists
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON data")


def _plain(name: str, value):
    """`value` as plain JSON data (numpy scalars converted), or a ValueError naming it."""
    try:
        return json.loads(json.dumps(value, default=_json_default, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}={_short(value)}: {name} must be JSON data ({err})") from None


def _check_samples(samples) -> tuple[str, np.ndarray, np.ndarray]:
    _check(isinstance(samples, tuple) and len(samples) == 3,
           f"samples={_short(samples)}: samples must be (feature_version, X, y) or None")
    version, x, y = samples
    _check(isinstance(version, str) and version != "",
           f"samples feature_version={version!r}: feature_version must be a non-empty string")
    try:
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"samples: X and y must be numeric arrays ({err})") from None
    _check(x.ndim == 2, f"samples X has shape {x.shape}: X must be 2-D [n x d]")
    _check(y.ndim == 1, f"samples y has shape {y.shape}: y must be 1-D [n]")
    _check(x.shape[0] == len(y),
           f"samples X has {x.shape[0]} rows, y has {len(y)} values: X rows must equal len(y)")
    _check(len(y) >= 1, "samples have 0 rows: samples must hold at least one row (pass samples=None instead)")
    _check(bool(np.isfinite(x).all() and np.isfinite(y).all()),
           "samples hold NaN or inf: X and y must be finite")
    return version, x, y


def _round6(value: float) -> float:
    return float(f"{value:.6g}")  # 6 significant digits: plenty for a cost model, files stay small
