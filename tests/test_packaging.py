"""What a user installs is the whole package: the wheel holds every module and data file of the
source tree, and the suite itself runs against the installed package, not the checkout."""

import json
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# source folder -> where its files sit in the wheel (pyproject.toml's package-dir)
SOURCES = {"kb_tvm": "kb_tvm", "schedules": "kb_tvm/schedules", "workloads": "kb_tvm/workloads"}
BUILD_FILES = ("pyproject.toml", "setup.py", "README.md")


def source_files() -> set[str]:
    """Every file of the package's source folders, named as the wheel names it."""
    found = set()
    for folder, inside in SOURCES.items():
        for path in (ROOT / folder).rglob("*"):
            relative = path.relative_to(ROOT / folder)
            if path.is_file() and "__pycache__" not in relative.parts and not path.name.startswith(".") \
                    and path.suffix != ".pyc":
                found.add(f"{inside}/{relative.as_posix()}")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel pip builds from a copy of what the package is made of (no stale build/ folder)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    for folder in SOURCES:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in BUILD_FILES:
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(tmp / "dist"), str(source)],
                           capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    (path,) = (tmp / "dist").glob("kb_tvm-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def test_the_wheel_holds_every_module_and_data_file_of_the_source_tree(wheel):
    assert "kb_tvm/agent/policy.py" in source_files()  # the module a clean install once lacked
    missing = sorted(source_files() - set(wheel.namelist()))
    assert not missing, f"the wheel lacks {len(missing)} file(s) of the source tree: {missing[:20]}"


def test_the_wheel_installs_the_kb_tvm_command(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "kb-tvm = kb_tvm.cli:main" in wheel.read(entry_points).decode()


def test_the_suite_runs_the_installed_package_not_the_checkout():
    """Run as the README says (`pip install ".[test]"`, then `pytest`), kb_tvm comes from the
    installed files; an editable install maps it to the checkout by design."""
    import kb_tvm

    if any(json.loads(d.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable")
           for d in metadata.distributions(name="kb-tvm")):
        pytest.skip("an editable install runs the checkout by design")
    assert Path(kb_tvm.__file__).resolve().parent != ROOT / "kb_tvm", f"kb_tvm imported from {kb_tvm.__file__}"
