"""The harness tests import the harnesses as their scripts do: benchmarks/ on sys.path (a script
run by path finds the modules beside it), the package as installed."""

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))


@pytest.fixture(scope="session", autouse=True)
def isolated_home(tmp_path_factory):
    """As in tests/: the harness tests never read or write the user's experience library or
    anything else under their home. Subprocesses inherit this."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
        patch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        yield home


@pytest.fixture(autouse=True)
def outside_the_checkout(tmp_path, monkeypatch):
    """Every test runs from a folder of its own, so a harness's output never lands in the checkout."""
    monkeypatch.chdir(tmp_path)
