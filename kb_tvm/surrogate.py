"""The search's cost model: a small bootstrap ensemble of XGBoost regressors that predicts
log-latency from TIR features, with the ensemble spread as its uncertainty.

A `PriorModel` (trained on similar workloads from the experience library, or offline and
shipped with kb_tvm) ranks candidates before the task has data of its own; once it has, the
ensemble learns the prior's residuals on this task (XGBoost's base margin), so a good prior
helps and a poor one is corrected by the task's own measurements."""

from __future__ import annotations

import numpy as np


PARAMS = {"max_depth": 4, "eta": 0.2, "subsample": 1.0, "min_child_weight": 1,
          "objective": "reg:squarederror", "nthread": 1, "verbosity": 0}


class PriorModel:
    """An XGBoost regressor of log-latency from features of one `feature_version`."""

    def __init__(self, booster, *, feature_version: str, source: str) -> None:
        self.booster = booster
        self.feature_version = feature_version
        self.source = source  # where it came from, for the decision log

    @property
    def num_features(self) -> int:
        return int(self.booster.num_features())

    @classmethod
    def fit(cls, features: np.ndarray, log_latency: np.ndarray, *, feature_version: str, source: str,
            rounds: int = 120) -> PriorModel:
        import xgboost as xgb

        data = xgb.DMatrix(np.asarray(features, dtype=float), label=np.asarray(log_latency, dtype=float))
        return cls(xgb.train({**PARAMS, "nthread": 2}, data, num_boost_round=rounds),
                   feature_version=feature_version, source=source)

    @classmethod
    def load(cls, path, *, feature_version: str, source: str) -> PriorModel:
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(str(path))  # xgboost's own JSON: data, never code
        return cls(booster, feature_version=feature_version, source=source)

    def save(self, path) -> None:
        self.booster.save_model(str(path))

    def predict(self, features: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(np.asarray(features, dtype=float)))


class EnsembleCostModel:
    """Predicts (mean, std) of log-latency. Untrained, it predicts the prior model (if any)
    with a wide std, else the mean of what it has seen."""

    def __init__(self, *, members: int = 5, rounds: int = 60, min_samples: int = 6, seed: int = 0,
                 prior: PriorModel | None = None, prior_std: float = 0.5) -> None:
        if members < 2:
            raise ValueError(f"members={members!r}: an ensemble needs at least 2 members")
        self.members = members
        self.rounds = rounds
        self.min_samples = min_samples
        self._rng = np.random.default_rng(seed)
        self._boosters: list = []
        self._prior_mean = 0.0
        self._prior_std = 1.0
        self.prior = prior
        self.prior_std = prior_std
        self._offset = 0.0  # this task's log-latency minus the prior's, on average

    @property
    def trained(self) -> bool:
        return bool(self._boosters)

    @property
    def informed(self) -> bool:
        """Its ranking means something: trained, or a prior model to go on."""
        return self.trained or self.prior is not None

    def _margin(self, features: np.ndarray) -> np.ndarray | None:
        return None if self.prior is None else self.prior.predict(features) + self._offset

    def fit(self, features: np.ndarray, log_latency: np.ndarray) -> None:
        import xgboost as xgb

        y = np.asarray(log_latency, dtype=float)
        if len(y) == 0:
            return
        self._prior_mean = float(np.mean(y))
        self._prior_std = float(max(np.std(y), 0.1))
        if self.prior is not None:
            self._offset = float(np.mean(y - self.prior.predict(features)))
        if len(y) < self.min_samples:
            return
        margin = self._margin(features)
        boosters = []
        for member in range(self.members):
            rows = self._rng.integers(0, len(y), len(y))  # bootstrap
            data = xgb.DMatrix(features[rows], label=y[rows],
                               base_margin=None if margin is None else margin[rows])
            boosters.append(xgb.train({**PARAMS, "seed": member}, data, num_boost_round=self.rounds))
        self._boosters = boosters

    def predict(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(features)
        if n and not self._boosters and self.prior is not None:
            return self._margin(features), np.full(n, self.prior_std)
        if not self._boosters or n == 0:
            return np.full(n, self._prior_mean), np.full(n, self._prior_std)
        import xgboost as xgb

        data = xgb.DMatrix(features, base_margin=self._margin(features))
        preds = np.stack([b.predict(data) for b in self._boosters])
        # the ensemble spread underestimates far from the data: keep a floor
        return preds.mean(axis=0), np.maximum(preds.std(axis=0), 0.03)
