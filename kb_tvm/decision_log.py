"""The decision log: one JSON-lines file per task, flushed line by line, so a person (or a
crashed run's post-mortem) can read why the search did what it did."""

from __future__ import annotations

import json
import math
import re
import time
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
    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def for_task(log_dir: str | Path, task_name: str) -> DecisionLog:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", task_name) or "task"
        path = Path(log_dir) / f"{stem}.jsonl"
        index = 1
        while path.exists():  # a second task of the same name, or a second run: never mix logs
            index += 1
            path = Path(log_dir) / f"{stem}.{index}.jsonl"
        return DecisionLog(path)

    def write(self, event: str, **fields) -> None:
        if self.path is None:
            return
        record = {"event": event, "time": round(time.time(), 3), **_clean(fields)}
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")


def read_log(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
