"""The search's cost model: a small bootstrap ensemble of XGBoost regressors that predicts
log-latency from TIR features, with the ensemble spread as its uncertainty."""

from __future__ import annotations

import numpy as np


class EnsembleCostModel:
    """Predicts (mean, std) of log-latency. Untrained, it predicts the prior with a wide std."""

    def __init__(self, *, members: int = 5, rounds: int = 60, min_samples: int = 6, seed: int = 0) -> None:
        if members < 2:
            raise ValueError(f"members={members!r}: an ensemble needs at least 2 members")
        self.members = members
        self.rounds = rounds
        self.min_samples = min_samples
        self._rng = np.random.default_rng(seed)
        self._boosters: list = []
        self._prior_mean = 0.0
        self._prior_std = 1.0

    @property
    def trained(self) -> bool:
        return bool(self._boosters)

    def fit(self, features: np.ndarray, log_latency: np.ndarray) -> None:
        import xgboost as xgb

        y = np.asarray(log_latency, dtype=float)
        if len(y) == 0:
            return
        self._prior_mean = float(np.mean(y))
        self._prior_std = float(max(np.std(y), 0.1))
        if len(y) < self.min_samples:
            return
        params = {"max_depth": 4, "eta": 0.2, "subsample": 1.0, "min_child_weight": 1,
                  "objective": "reg:squarederror", "nthread": 1, "verbosity": 0}
        boosters = []
        for member in range(self.members):
            rows = self._rng.integers(0, len(y), len(y))  # bootstrap
            data = xgb.DMatrix(features[rows], label=y[rows])
            boosters.append(xgb.train({**params, "seed": member}, data, num_boost_round=self.rounds))
        self._boosters = boosters

    def predict(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(features)
        if not self._boosters or n == 0:
            return np.full(n, self._prior_mean), np.full(n, self._prior_std)
        import xgboost as xgb

        data = xgb.DMatrix(features)
        preds = np.stack([b.predict(data) for b in self._boosters])
        # the ensemble spread underestimates far from the data: keep a floor
        return preds.mean(axis=0), np.maximum(preds.std(axis=0), 0.03)
