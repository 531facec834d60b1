"""The decision log: one JSON-lines file per task, flushed line by line, so a person (or a
crashed run's post-mortem) can read why the search did what it did."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path


def _clean(value):
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 9)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


class DecisionLog:
    """Writes events to `path` (if any) and hands each to `listener` (if any), e.g. a CLI
    that prints the phase changes."""

    def __init__(self, path: str | Path | None, listener: Callable[[dict], None] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.listener = listener
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def for_task(log_dir: str | Path, task_name: str, listener: Callable[[dict], None] | None = None) -> DecisionLog:
        stem = _stem(task_name)
        path = Path(log_dir) / f"{stem}.jsonl"
        index = 1
        while path.exists():  # a second task of the same name, or a second run: never mix logs
            index += 1
            path = Path(log_dir) / f"{stem}.{index}.jsonl"
        return DecisionLog(path, listener)

    def write(self, event: str, **fields) -> None:
        record = {"event": event, "time": round(time.time(), 3), **_clean(fields)}
        if self.path is not None:
            with self.path.open("a") as out:
                out.write(json.dumps(record) + "\n")
        if self.listener is not None:
            self.listener(record)


# a file name may hold 255 bytes: a fused task's name can be longer (an im2col of 49 slices)
MAX_STEM = 160


def _stem(task_name: str) -> str:
    """The task's log file name without its ending: its name, cut and told apart by a hash of
    the whole where it would not fit in a file name."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", task_name) or "task"
    if len(stem) <= MAX_STEM:
        return stem
    return f"{stem[:MAX_STEM - 13]}-{hashlib.sha1(task_name.encode()).hexdigest()[:12]}"


def read_log(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def earlier_events(log_dir: str | Path, task_name: str) -> list[dict]:
    """Every event that earlier runs in `log_dir` logged for `task_name`, oldest run first (a
    line torn by a kill is skipped): what a resumed search rebuilds its state from."""
    name = re.compile(rf"{re.escape(_stem(task_name))}(?:\.(\d+))?\.jsonl")
    runs = sorted((int(m.group(1) or 1), path) for path in Path(log_dir).glob("*.jsonl")
                  if (m := name.fullmatch(path.name)))
    events = []
    for _, path in runs:
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events
