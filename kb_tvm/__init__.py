"""kb_tvm: budget-aware kernel tuning for TVM MetaSchedule."""

from importlib import import_module as _import_module
from pathlib import Path as _Path

from .budget import TuningBudget, parse_budget
from .logger_guard import guard_metaschedule_logger
from .measure.targets import build_config, register_tensor_intrinsics
from .tuning import measurement_pipeline

# Run from a source checkout (not installed), the data packages schedules/ and workloads/
# sit beside kb_tvm/; installed, they are kb_tvm/schedules and kb_tvm/workloads.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "workloads" / "__init__.py").is_file() and (_checkout / "schedules").is_dir():
    __path__.append(str(_checkout))  # noqa: F821 - a package's __path__

__version__ = "0.1.0"
__all__ = ["Experience", "KBBuilder", "KBRunner", "KBSearch", "KBTaskScheduler", "ProgressRecorder",
           "RecordDatabase", "TensorCoreSpace", "TimeCappedSearch", "TuningBudget", "build_config",
           "guard_metaschedule_logger", "measurement_pipeline", "parse_budget", "register_tensor_intrinsics"]

# MetaSchedule objects -> the module that defines them
_TVM_OBJECTS = {"KBBuilder": "measure.builder", "KBRunner": "measure.runner", "KBSearch": "search.strategy",
                "KBTaskScheduler": "search.task_scheduler", "ProgressRecorder": "measure.callbacks",
                "RecordDatabase": "measure.database", "TensorCoreSpace": "search.tensor_core_space",
                "TimeCappedSearch": "search.strategy"}


def __getattr__(name):
    # TVM loads in seconds: import it only when a MetaSchedule object is asked for
    if name in _TVM_OBJECTS:
        return getattr(_import_module(f".{_TVM_OBJECTS[name]}", __name__), name)
    if name == "Experience":
        from .experience import Experience

        return Experience
    raise AttributeError(f"module 'kb_tvm' has no attribute {name!r}")
