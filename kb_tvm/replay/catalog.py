"""Where datasets are and which are held out. Small ones ship in the package
(kb_tvm/replay/data), the large ones live compressed in the repository (datasets/); a folder
of datasets may hold a `catalog.json` naming those held out from training:
{"held_out": ["llvm-conv2d-28x28x32", ...]}. A dataset is found by path or by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .dataset import Dataset, DatasetError

SHIPPED = Path(__file__).resolve().parent / "data"
SUFFIX = ".jsonl.gz"


@dataclass(frozen=True)
class Entry:
    name: str
    path: Path
    held_out: bool


def entries(folders: list[Path] | tuple = ()) -> list[Entry]:
    """The datasets shipped, then those in `folders`, by name (a later folder's name wins)."""
    found: dict[str, Entry] = {}
    for folder in [SHIPPED, *map(Path, folders)]:
        if not folder.is_dir():
            raise DatasetError(f"datasets folder {folder} does not exist")
        catalog = folder / "catalog.json"
        held_out = set(json.loads(catalog.read_text()).get("held_out", [])) if catalog.exists() else set()
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            name = path.name[: -len(SUFFIX)]
            found[name] = Entry(name, path, name in held_out)
    return list(found.values())


def find(name_or_path: str, folders: list[Path] | tuple = ()) -> Entry:
    path = Path(name_or_path)
    if path.is_file():
        return Entry(path.name.removesuffix(SUFFIX), path, False)
    known = entries(folders)
    for entry in known:
        if entry.name == name_or_path:
            return entry
    names = ", ".join(e.name for e in known) or "none"
    raise DatasetError(f"no dataset {name_or_path!r}: give a file or one of {names} (--datasets DIR adds a folder)")


def load(name_or_path: str, folders: list[Path] | tuple = ()) -> tuple[Entry, Dataset]:
    entry = find(name_or_path, folders)
    return entry, Dataset.load(entry.path)
