"""The README's Python example, run as written: a user copies it into a file and runs it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_example() -> str:
    """The first python block of the README's "From Python" section."""
    section = README.read_text().split("\n## From Python\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.tuning
def test_the_readme_python_example_tunes_and_builds_as_written(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(python_example())
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    best_ms = float(re.search(r"^best ([0-9.]+) ms", done.stdout, re.M).group(1))
    assert 0 < best_ms < 1e3  # a real measurement, not MetaSchedule's 1e10 for a failed build
    assert (tmp_path / "work" / "database_tuning_record.json").stat().st_size > 0
