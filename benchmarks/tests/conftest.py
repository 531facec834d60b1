"""The harness tests import the harnesses as their scripts do: benchmarks/ on sys.path (a script
run by path finds the modules beside it), the package as installed; tests/isolation.py's fixtures
keep them off the user's home and out of the checkout."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
for folder in (ROOT / "benchmarks", ROOT / "tests"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from isolation import isolated_home, outside_the_checkout  # noqa: E402, F401 - autouse fixtures
