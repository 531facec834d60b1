"""The replay wing: recorded tuning datasets (dataset.py), a simulated tuning run on one
(env.py, with surrogate.py for schedules it does not hold), and the strategies it runs
(policies.py). No TVM: a 240-s run replays in seconds on one core."""

from .dataset import SCHEMA, Dataset, DatasetError, Point, build_dataset
from .env import Outcome, Query, ReplayEnv
from .policies import (
           POLICIES,
           EvolutionaryPolicy,
           RandomPolicy,
           ReplayPolicy,
           RulesPolicy,
)
from .surrogate import NeighbourSurrogate

__all__ = ["POLICIES", "SCHEMA", "Dataset", "DatasetError", "EvolutionaryPolicy",
           "NeighbourSurrogate", "Outcome", "Point", "Query", "RandomPolicy", "ReplayEnv", "ReplayPolicy",
           "RulesPolicy", "build_dataset"]
