"""The agent as a replay strategy: kb's search (the replay's RulesPolicy) steered by a trained
MacroPolicy, for `kb-tvm replay --policy agent` and the replay benchmarks."""

from __future__ import annotations

from ..replay import RulesPolicy
from .policy import MacroPolicy


def agent_policy(path=None) -> RulesPolicy:
    """kb's search steered by a trained agent (default: the one shipped in kb_tvm/models)."""
    return RulesPolicy(steer=MacroPolicy.load() if path is None else MacroPolicy.load(path))
