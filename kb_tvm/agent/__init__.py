"""The agent wing: a meta-policy over kb's macro-actions (policy.py), the state it reads off a
search (state.py), its offline training in the replay environment (train.py), and the agent as
a replay strategy (replay_policy.py)."""

from .policy import SCHEMA, MacroPolicy
from .replay_policy import agent_policy
from .state import FEATURES, observe
from .train import Transition, collect, fit

__all__ = ["FEATURES", "SCHEMA", "MacroPolicy", "Transition", "agent_policy", "collect", "fit", "observe"]
