"""`KernelFamily`: what a family of kernels written outside MetaSchedule's space supplies (match a
task, propose variants, build one); checking, timing and recording them is shared (task_search.py).
Modelled on dlight's ScheduleRule.apply(func, target, tunable) and its per-rule Config dataclass."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol


class NotApplicable(ValueError):
    """A task (or shape) a family does not compute; the message says why."""


def root_blocks(sch, refuse: type[NotApplicable]) -> list:
    """The blocks under the root of `sch`'s function, or `refuse` where it has no blocks (TOPI
    writes a cumsum, OPT's positions, as plain loops)."""
    from tvm.s_tir import ScheduleError

    try:
        root = sch.get_sblock("root")
    except ScheduleError:
        raise refuse("a function of plain loops, without blocks") from None
    return [sch.get(rv) for rv in sch.get_child_blocks(root)]


class VariantSearch(Protocol):
    """A family's search over one problem's variants (`pool`: those it may ask): ask for the next
    one to measure (None: done), tell what it measured (seconds, or None for a variant that failed)."""

    pool: list

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


class PatientSearch:
    """Ask/tell over `pool` (variants in the order to measure them) that stops after `patience`
    measurements that did not beat the best by `min_gain`; a failed variant (None) is never the
    best. `what` names the problem in errors."""

    def __init__(self, pool: list, *, patience: int = 4, min_gain: float = 0.02, what: str = "this problem"):
        if patience < 1:
            raise ValueError(f"patience={patience!r}: at least 1 measurement")
        if not 0 <= min_gain < 1:
            raise ValueError(f"min_gain={min_gain!r}: a fraction in [0, 1)")
        self.pool, self.patience, self.min_gain, self.what = list(pool), patience, min_gain, what
        self.measured: dict[Any, float | None] = {}
        self.since_gain = 0  # measurements since the best last improved by min_gain

    @property
    def best(self) -> tuple[Any, float] | None:
        return fastest(self.measured)

    def ask(self) -> Any | None:
        """The next variant in the pool's order, or None when the search is done."""
        if self.since_gain >= self.patience and self.best is not None:
            return None
        return next((v for v in self.pool if v not in self.measured), None)

    def tell(self, params: Any, seconds: float | None) -> None:
        if params not in self.pool:
            raise ValueError(f"{type(params).__name__}({params.describe()}) is not a variant of {self.what}")
        best = self.best
        self.measured[params] = seconds
        gained = seconds is not None and (best is None or seconds < best[1] * (1 - self.min_gain))
        self.since_gain = 0 if gained else self.since_gain + 1


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
    # False where MetaSchedule's space cannot reach what the family's kernel does (a fused
    # attention keeps the scores on chip): a task the family took is then not searched at all
    metaschedule_competes: bool = True

    @abstractmethod
    def applies(self, target, precision: str | None = None) -> str | None:
        """Why the family does not serve this target (and model precision; None: tune-op, where
        the task's dtypes decide), or None if it does."""

    @abstractmethod
    def match(self, mod, target) -> Any:
        """The problem `mod`'s "main" (a task or workload) poses to this family, or NotApplicable."""

    @abstractmethod
    def variants(self, problem, target, *, constants: frozenset[int] = frozenset()) -> VariantSearch:
        """The search over `problem`'s variants, asking in its order of expected gain; NotApplicable
        where no variant fits. `constants`: which of the task's inputs (by position) are constants
        wherever a model calls it (weights), which a family may take packed once at build."""

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

    def check_inputs(self, problem, arrays: list, seed: int) -> list:
        """The arrays (`task_inputs`' activation-like ones, output last) a variant is checked on
        for input set `seed` (0, 1); set 1 is also the one timed. A family whose kernels take
        paths that random values never reach shapes them here."""
        return arrays

    def problem_record(self, problem) -> dict:
        """What a kernels.jsonl row says about the problem (its shape), beside the params."""
        return {}

    def __repr__(self) -> str:
        return f"<kernel family {self.name}>"
