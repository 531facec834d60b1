"""The agent: a meta-policy over kb's macro-actions, trained offline (train.py).

For each macro-action it holds a small bootstrap ensemble of XGBoost regressors of the action's
value: the gain in log-latency still to come, less the budget it spends (train.py's reward).
Before each fine-phase batch it takes the action of highest value, "stop" when none is worth
anything, and leaves the batch to the rules (returns None) when it is unsure (the best two
values closer than `margin` times the ensemble's spread) or when the state lies outside what it was trained on.
Every choice goes to the decision log as a "macro" event with the values and the reason.

Saved as JSON (xgboost's own JSON inside): data, never code.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..search.planner import MACRO_ACTIONS
from .state import FEATURES, observe

SCHEMA = "kb-tvm/agent/1"
VALUED = tuple(a for a in MACRO_ACTIONS if a != "stop")  # stop is worth 0 by definition
SHIPPED = Path(__file__).resolve().parent.parent / "models" / "agent.json"


class MacroPolicy:
    def __init__(self, *, models: dict[str, list], low: np.ndarray, high: np.ndarray, source: str = "",
                 trained_on: list[str] | None = None, margin: float = 1.0) -> None:
        missing = [a for a in VALUED if not models.get(a)]
        if missing:
            raise ValueError(f"models: no value model for {', '.join(missing)} (need each of {', '.join(VALUED)})")
        if not (isinstance(margin, (int, float)) and margin >= 0):
            raise ValueError(f"margin={margin!r}: a number >= 0 (how many spreads the best value must lead by)")
        self.margin = float(margin)
        self.models = models
        self.low, self.high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
        self.source = source
        self.trained_on = list(trained_on or [])

    # ------------------------------------------------------------ deciding
    def values(self, state: np.ndarray) -> dict[str, tuple[float, float]]:
        """(mean, spread) of each valued action's predicted value in `state`."""
        out = {}
        for action in VALUED:
            guesses = [float(m.inplace_predict(state[None, :])[0]) for m in self.models[action]]
            out[action] = (float(np.mean(guesses)), float(np.std(guesses)))
        return out

    def mean_values(self, states: np.ndarray) -> np.ndarray:
        """Mean predicted value of each valued action (columns, in VALUED order) for each state."""
        return np.stack([np.mean([m.inplace_predict(states) for m in self.models[a]], axis=0) for a in VALUED],
                        axis=1)

    def out_of_distribution(self, state: np.ndarray) -> list[str]:
        """The features outside the training states' range (with a tenth of it to spare)."""
        pad = 0.1 * (self.high - self.low) + 1e-6
        return [FEATURES[i] for i in np.flatnonzero((state < self.low - pad) | (state > self.high + pad))]

    def choose(self, state: np.ndarray) -> tuple[str | None, dict]:
        """(the macro-action, or None for the rules; why)."""
        outside = self.out_of_distribution(state)
        if outside:
            return None, {"source": "fallback", "why": f"out of distribution: {', '.join(outside)}"}
        values = self.values(state)
        ranked = sorted(values.items(), key=lambda kv: -kv[1][0])
        (best, (value, spread)), (_, (second, _)) = ranked[0], ranked[1]
        info = {"values": {a: round(v, 6) for a, (v, _) in values.items()}, "spread": round(spread, 6)}
        if value + spread < 0:
            return "stop", {**info, "source": "policy", "why": f"no action is worth its seconds (best: {best})"}
        if value < 0 or value - second < self.margin * spread:
            return None, {**info, "source": "fallback",
                          "why": f"unsure: the best values are within {self.margin:g} spread(s)"}
        return best, {**info, "source": "policy", "why": f"{best} has the highest value"}

    def __call__(self, task) -> str | None:
        """TaskSearch's `steer`: a macro-action for its next batch, logged."""
        state = observe(task)
        action, info = self.choose(state)
        task.log.write("macro", action=action or "rules", state=dict(zip(FEATURES, map(float, state))), **info)
        return action

    # ------------------------------------------------------------ storage
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "schema": SCHEMA, "features": list(FEATURES), "source": self.source, "trained_on": self.trained_on,
            "margin": self.margin,
            "low": self.low.tolist(), "high": self.high.tolist(),
            "models": {a: [m.save_raw(raw_format="json").decode() for m in ms] for a, ms in self.models.items()}}))
        return path

    @classmethod
    def load(cls, path: str | Path = SHIPPED) -> MacroPolicy:
        import xgboost as xgb

        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"agent {path}: not readable ({type(err).__name__}: {err})") from None
        if data.get("schema") != SCHEMA or tuple(data.get("features", ())) != FEATURES:
            raise ValueError(f"agent {path}: not an agent of schema {SCHEMA} with this kb_tvm's state features")
        models = {}
        for action, raws in data["models"].items():
            models[action] = []
            for raw in raws:
                booster = xgb.Booster()
                booster.load_model(bytearray(raw.encode()))
                models[action].append(booster)
        return cls(models=models, low=np.array(data["low"]), high=np.array(data["high"]),
                   source=data.get("source", str(path)), trained_on=data.get("trained_on"),
                   margin=data.get("margin", 1.0))
