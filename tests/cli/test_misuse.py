"""A new user's mistakes and a hostile terminal, each a real ``trio-agent``
subprocess: a clear one-line error and the documented exit code, never a
traceback, and the recorded session kept."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cli_runner import ENV, cli

SCRIPT = [str(Path(sys.executable).parent / "trio-agent")]


async def test_an_agent_module_with_a_syntax_error_is_named_at_its_own_file_and_line(tmp_path):
    """A module given to ``--agent`` that does not compile is named at its own file
    and line (the bug: the error said it was raised in the command line's own
    ``_app.py``, the innermost frame of the import)."""
    (tmp_path / "typo.py").write_text("x = 1\n\ndef f(:\n    pass\n")
    done = await cli([*SCRIPT, "run", "--agent", "typo:agent", "x"], cwd=tmp_path)
    error = done.stderr.decode().splitlines()[-1]
    assert done.returncode == 2
    assert error.startswith("trio-agent run: error: --agent typo:agent: importing typo raised ")
    assert error.endswith(f"(at {tmp_path / 'typo.py'}:3)"), error
    assert "_app.py" not in error and "Traceback" not in done.stderr.decode()
