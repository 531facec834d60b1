"""What a schedule the dataset does not hold would have measured: its nearest recorded
neighbours in the same sketch, by how many decisions differ. It fails if most of them failed;
else its latency is their latencies' geometric mean. Its error is measured on the dataset itself
(each valid point predicted from the others) and reported beside every result that used it."""

from __future__ import annotations

import math

import numpy as np

from .dataset import Dataset, Point


class NeighbourSurrogate:
    def __init__(self, dataset: Dataset, *, k: int = 5) -> None:
        self.k = k
        self._by_sketch: dict[str, tuple[np.ndarray, list[int], np.ndarray]] = {}
        for sketch in dataset.sketches:
            members = [i for i, p in enumerate(dataset.points) if p.sketch == sketch]
            positions = sorted({inst for i in members for inst, _ in dataset.points[i].decisions})
            codes = np.array([self._codes(dataset.points[i], positions) for i in members], dtype=np.int64)
            self._by_sketch[sketch] = (np.array(members, dtype=np.int64), positions, codes)
        self.dataset = dataset
        self._cache: dict[tuple, np.ndarray] = {}
        self.error = self._leave_one_out()

    def _codes(self, point: Point, positions: list[int]) -> list[int]:
        values = dict(point.decisions)  # hashes serve for equality only, within this process
        return [hash(values.get(inst)) for inst in positions]

    def neighbours(self, sketch: str, decisions: tuple, exclude: int | None = None) -> np.ndarray:
        """Indices of the sketch's points, nearest first (fewest differing decisions, then
        dataset order: deterministic)."""
        members, positions, codes = self._by_sketch.get(sketch, (np.zeros(0, dtype=np.int64), [], None))
        if not len(members):
            return members
        key = (sketch, decisions)
        nearest = self._cache.get(key)
        if nearest is None:  # evolving populations ask for the same schedules again and again
            values = dict(decisions)
            query = np.array([hash(values.get(inst)) for inst in positions], dtype=np.int64)
            nearest = members[np.argsort((codes != query).sum(axis=1), kind="stable")]
            if len(self._cache) < 50_000:
                self._cache[key] = nearest
        return nearest if exclude is None else nearest[nearest != exclude]

    def predict(self, sketch: str, decisions: tuple, exclude: int | None = None) -> tuple[float | None, list[int]]:
        """(latency in seconds or None for a failure, the neighbours it came from)."""
        near = [int(i) for i in self.neighbours(sketch, decisions, exclude)[: self.k]]
        ok = [self.dataset.points[i].latency_s for i in near if self.dataset.points[i].ok]
        if not near or len(ok) * 2 < len(near):
            return None, near
        return math.exp(float(np.mean(np.log(ok)))), near

    def _leave_one_out(self) -> dict:
        """Each point predicted from the rest of its sketch: the median relative latency error
        over valid points, how often failure is called right, and the rank correlation."""
        rel, truth, guess, agree, total = [], [], [], 0, 0
        for i, p in enumerate(self.dataset.points):
            predicted, _ = self.predict(p.sketch, p.decisions, exclude=i)
            total += 1
            agree += (predicted is None) == (not p.ok)
            if p.ok and predicted is not None:
                rel.append(abs(predicted / p.latency_s - 1.0))
                truth.append(p.latency_s)
                guess.append(predicted)
        return {"median_relative_error": float(np.median(rel)) if rel else None,
                "failure_agreement": agree / total if total else None,
                "rank_correlation": _spearman(truth, guess), "points": total}


def _spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    if np.std(ra) == 0 or np.std(rb) == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])
