"""The README's example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_readme_example_runs_and_prints_what_it_says():
    example = re.search(r"## Example\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert example is not None
    done = subprocess.run(
        [sys.executable, "-c", example.group(1)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "completed The sum is 42."
    assert lines[0] == "0 message.accepted" and lines[-2] == "7 run.finished"


def test_readme_testing_example_is_the_file_that_runs_in_our_suite():
    example = (Path(__file__).parent / "test_example_agent.py").read_text()
    assert f"```python\n{example}```" in README.read_text()
