"""The fixtures that keep every test (tests/ and benchmarks/tests/) off the user's state and out of
the checkout; each conftest imports them."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def isolated_home(tmp_path_factory):
    """The suite never reads or writes the user's state: their experience library
    (~/.cache/kb_tvm/experience) or anything else under their home. Subprocesses inherit this."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
        patch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        yield home


@pytest.fixture(autouse=True)
def outside_the_checkout(tmp_path, monkeypatch):
    """Every test runs from a folder of its own, as a user runs kb-tvm: what a test or its
    subprocesses import is the installed package (not the checkout on `python -m`/`-c`'s path),
    and a default work dir (or a harness's output) never lands in the checkout."""
    monkeypatch.chdir(tmp_path)
