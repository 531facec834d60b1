"""Strategy templates: named regions over a candidate's schedule properties.

Templates are data, one TOML file per target kind in `schedules/` (shipped as
`kb_tvm.schedules`), or in a directory the user names. A template bounds some
properties of a concrete schedule (see `kb_tvm.schedule_props`), e.g.

    [[template]]
    name = "high-occupancy"
    why = "256..1024 threads per block hide latency"
    threads_per_block = { min = 256, max = 1024 }
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .schedule_props import PROPERTY_NAMES


@dataclass(frozen=True)
class Template:
    name: str
    why: str = ""
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)

    def matches(self, props: dict[str, float]) -> bool:
        return all(lo <= props.get(key, 0.0) <= hi for key, (lo, hi) in self.bounds.items())


def parse_templates(text: str, source: str) -> list[Template]:
    """Templates from the text of one TOML file; errors name the file and the template."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{source}: not valid TOML ({err})") from None
    templates = []
    for entry in data.get("template", []):
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{source}: every [[template]] needs a name")
        bounds = {}
        for key, value in entry.items():
            if key in ("name", "why"):
                continue
            if key not in PROPERTY_NAMES:
                raise ValueError(
                    f"{source}: template {name!r} bounds unknown property {key!r}; "
                    f"known: {', '.join(PROPERTY_NAMES)}"
                )
            if not isinstance(value, dict) or not set(value) <= {"min", "max"} or not value:
                raise ValueError(
                    f"{source}: template {name!r}: {key} must be a table like {{ min = 1, max = 8 }}"
                )
            bounds[key] = (float(value.get("min", float("-inf"))), float(value.get("max", float("inf"))))
        templates.append(Template(name=name, why=str(entry.get("why", "")), bounds=bounds))
    names = [t.name for t in templates]
    if len(set(names)) != len(names):
        raise ValueError(f"{source}: template names repeat: {names}")
    return templates


def load_templates(target_kind: str, directory: str | Path | None = None) -> list[Template]:
    """The templates for a target kind ("llvm", "cuda"), from `directory` or the shipped ones."""
    file_name = f"{target_kind}.toml"
    if directory is not None:
        path = Path(directory) / file_name
        if not path.is_file():
            raise ValueError(f"no templates for target kind {target_kind!r}: {path} does not exist")
        return parse_templates(path.read_text(), str(path))
    shipped = resources.files("kb_tvm.schedules").joinpath(file_name)
    if not shipped.is_file():
        return []
    return parse_templates(shipped.read_text(), f"schedules/{file_name}")
