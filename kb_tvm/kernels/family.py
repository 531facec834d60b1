"""`KernelFamily`: what a family of kernels written outside MetaSchedule's space supplies (match a
task, propose variants, build one); checking, timing and recording them is shared (task_search.py).
Modelled on dlight's ScheduleRule.apply(func, target, tunable) and its per-rule Config dataclass."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol


class NotApplicable(ValueError):
    """A task (or shape) a family does not compute; the message says why."""


class VariantSearch(Protocol):
    """A family's search over one problem's variants: ask for the next one to measure (None: done),
    tell what it measured (seconds, or None for a variant that failed)."""

    def ask(self) -> Any | None: ...

    def tell(self, params: Any, seconds: float | None) -> None: ...

    @property
    def best(self) -> tuple[Any, float] | None: ...


def fastest(measured: dict) -> tuple | None:
    """(params, seconds) of the fastest right variant of `measured` (params -> seconds, None for
    a variant that failed), ties broken by `params.describe()`; None if none ran right."""
    done = [(seconds, params.describe(), params) for params, seconds in measured.items() if seconds is not None]
    if not done:
        return None
    seconds, _, params = min(done)
    return params, seconds


class KernelFamily(ABC):
    """One family of kernels. `params` is the family's dataclass of parameters (one variant);
    `problem` is what `match` read off a task's TIR. Families are stateless: one instance each."""

    name: str  # e.g. "hopper_gemm": events, kernels.jsonl's rows, report rows
    source: str  # where its kernels are written, for reports (e.g. "schedules/hopper_gemm.py")
    # a right variant's output is within this fraction of the output's scale of the reference's
    tolerance: float = 0.02
    # a model's tasks whose names hold this are those users expect the family to take: its
    # refusals of them are shown (the rest would be noise)
    shows_refusals_of: str | None = None

    @abstractmethod
    def applies(self, target, precision: str | None = None) -> str | None:
        """Why the family does not serve this target (and model precision; None: tune-op, where
        the task's dtypes decide), or None if it does."""

    @abstractmethod
    def match(self, mod, target) -> Any:
        """The problem `mod`'s "main" (a task or workload) poses to this family, or NotApplicable."""

    @abstractmethod
    def variants(self, problem, target) -> VariantSearch:
        """The search over `problem`'s variants, asking in its order of expected gain; NotApplicable
        where no variant fits."""

    @abstractmethod
    def build(self, problem, params, target, task: str):
        """The `ExternKernel` (kernels/extern.py) that computes task `task` with variant `params`."""

    @abstractmethod
    def describe(self, params) -> str:
        """One line for logs and reports."""

    @abstractmethod
    def record(self, params) -> dict:
        """`params` as JSON data that `from_record` turns back into them (a row's family part)."""

    @abstractmethod
    def from_record(self, row: dict):
        """The params of a row `record` wrote."""

    def problem_record(self, problem) -> dict:
        """What a kernels.jsonl row says about the problem (its shape), beside the params."""
        return {}

    def __repr__(self) -> str:
        return f"<kernel family {self.name}>"
