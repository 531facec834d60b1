"""The tuning budget: wall-clock seconds, a value object that strategies ask.

Nothing else in kb_tvm measures time for budgeting: the search and the CLI ask a
`TuningBudget` how much is spent and left.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
ACCEPTED_FORMS = '"90s", "10m", "2h", "1h30m", "50h" or a number of seconds'


def parse_budget(value: str | float | int) -> float:
    """Return seconds for a budget written as "90s", "10m", "1h30m" or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"budget {value!r} is not a duration: use {ACCEPTED_FORMS}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            units = [unit for _, unit in parts]
            well_formed = "".join(n + u for n, u in parts) == text
            ordered = units == sorted(set(units), key="hms".index)
            if not text or not parts or not well_formed or not ordered:
                raise ValueError(
                    f"budget {value!r} is not a duration: use {ACCEPTED_FORMS}"
                ) from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"budget {value!r} must be a positive duration: use {ACCEPTED_FORMS}")
    return seconds


def format_seconds(seconds: float) -> str:
    """120.0 -> "2m00s"; short enough for a progress line."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class TuningBudget:
    """A wall-clock budget. The clock starts at the first `start()` (idempotent).

    `already_spent` counts seconds of an earlier run of the same job, so a resumed
    job keeps counting where the first one stopped.

    A budget shared by the tasks of a model (KBTaskScheduler calls `share_among_tasks`) also
    gives each task its own clock, `task(name)`: see TaskClock.
    """

    def __init__(
        self,
        total: str | float | int,
        *,
        already_spent: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = parse_budget(total)
        if already_spent < 0:
            raise ValueError(f"already_spent={already_spent!r} must be >= 0 seconds")
        self._already_spent = float(already_spent)
        self._clock = clock
        self._started_at: float | None = None
        self._tasks: dict[str, TaskClock] | None = None  # None: not shared among tasks

    def share_among_tasks(self) -> TuningBudget:
        if self._tasks is None:
            self._tasks = {}
        return self

    def task(self, name: str) -> TuningBudget | TaskClock:
        """The budget as task `name` should read it: its own clock where the budget is shared
        among tasks, else the budget itself."""
        if self._tasks is None:
            return self
        return self._tasks.setdefault(name, TaskClock(self))

    def start(self) -> TuningBudget:
        if self._started_at is None:
            self._started_at = self._clock()
        return self

    @property
    def started(self) -> bool:
        return self._started_at is not None

    @property
    def spent(self) -> float:
        running = 0.0 if self._started_at is None else self._clock() - self._started_at
        return self._already_spent + running

    @property
    def remaining(self) -> float:
        return max(0.0, self.total - self.spent)

    @property
    def fraction_used(self) -> float:
        return min(1.0, self.spent / self.total)

    @property
    def task_remaining(self) -> float:
        """Seconds a task may still expect: all that remain, for a budget not shared."""
        return self.remaining

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.total

    def __repr__(self) -> str:
        return (
            f"TuningBudget(total={format_seconds(self.total)}, spent={format_seconds(self.spent)}, "
            f"remaining={format_seconds(self.remaining)})"
        )


class TaskClock:
    """One task's view of a shared budget. The job's seconds bound it (`spent`, `remaining`,
    `exhausted`, `total` are the job's), but its progress is its own: `fraction_used` is the
    seconds its batches took over the seconds it is expected to get (its share of the job,
    set by the task scheduler), so a task first scheduled late in the job still starts with
    a coarse phase, and one that got more than its share refines."""

    def __init__(self, job: TuningBudget) -> None:
        self.job = job
        self.own_seconds = 0.0
        self.expected_seconds = job.total

    def start(self) -> TaskClock:
        self.job.start()
        return self

    def charge(self, seconds: float, expected_seconds: float) -> None:
        """Before each batch the scheduler hands out: its seconds so far, and what it is now
        expected to get."""
        self.own_seconds = seconds
        self.expected_seconds = max(expected_seconds, 1e-9)

    @property
    def total(self) -> float:
        return self.job.total

    @property
    def spent(self) -> float:
        return self.job.spent

    @property
    def remaining(self) -> float:
        return self.job.remaining

    @property
    def exhausted(self) -> bool:
        return self.job.exhausted

    @property
    def fraction_used(self) -> float:
        return min(1.0, self.own_seconds / self.expected_seconds)

    @property
    def task_remaining(self) -> float:
        """Seconds of its expected share it has not spent (never more than the job has left)."""
        return min(self.job.remaining, max(0.0, self.expected_seconds - self.own_seconds))

    def __repr__(self) -> str:
        return (f"TaskClock({format_seconds(self.own_seconds)} of {format_seconds(self.expected_seconds)} "
                f"expected; job {self.job!r})")
