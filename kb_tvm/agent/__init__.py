"""The agent wing: a meta-policy over kb's macro-actions (policy.py), the state it reads off a
search (state.py), and its offline training in the replay environment (train.py)."""

from .policy import SCHEMA, MacroPolicy
from .state import FEATURES, observe
from .train import Transition, collect, fit

__all__ = ["FEATURES", "SCHEMA", "MacroPolicy", "Transition", "collect", "fit", "observe"]
