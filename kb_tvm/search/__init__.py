"""KBSearch's search, in three parts: the planner decides (plain Python, planner.py and
decisions.py), the candidate factory does the TVM work (candidates.py), and the task runs the
loop through its phases (task.py)."""

from .candidates import (
           FEATURE_VERSION,
           Candidate,
           CandidateFactory,
           lowers_cleanly,
           mutator_apply,
           wmma_tile_plan,
)
from .options import SearchOptions
from .planner import Planner
from .task import TaskSearch

__all__ = ["FEATURE_VERSION", "Candidate", "CandidateFactory", "Planner", "SearchOptions", "TaskSearch",
           "lowers_cleanly", "mutator_apply", "wmma_tile_plan"]
