"""A region of one task's search: a design space and a strategy template (`schedules/*.toml`).
Decision logs, the planner and the experience library know it by its name, `s<space>/<template>`;
this is the one place that makes and reads that name."""

from __future__ import annotations

import re
from dataclasses import dataclass

UNCLASSIFIED = "unclassified"  # a sample no template matches still belongs to its space's region
_NAME = re.compile(r"s(\d+)/(.+)")


@dataclass(frozen=True)
class Region:
    space: int  # index of the design space
    template: str

    @property
    def name(self) -> str:
        return f"s{self.space}/{self.template}"

    @classmethod
    def from_name(cls, name: str) -> Region:
        match = _NAME.fullmatch(name)
        if match is None:
            raise ValueError(f"region {name!r}: not of the form s<space>/<template>")
        return cls(int(match.group(1)), match.group(2))
