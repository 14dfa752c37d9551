"""``grep``: a regex search in a child process that runs nothing from the workspace,
and a search cut short by ``max_entries`` that says so."""

from __future__ import annotations

import pytest

from trio_agent.workspace import Workspace

pytestmark = pytest.mark.usefixtures("sandbox_mode")  # each test in both modes


async def test_regression_a_regex_grep_never_imports_modules_written_in_the_workspace(tmp_path):
    """Issue 12: the grep child ran ``python -c`` in the workspace root: a json.py there ran inside
    it."""
    (tmp_path / "json.py").write_text(
        "import pathlib\npathlib.Path('pwned').write_text('x')\nfrom _json import *\n"
    )
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    found = await Workspace(tmp_path).grep("al.ha", regex=True)
    assert found == "notes.txt:1: alpha"
    assert not (tmp_path / "pwned").exists()


async def test_regression_grep_said_no_match_when_it_stopped_before_the_file_that_matches(tmp_path):
    """Issue 12: grep said there was no match when it stopped at ``max_entries`` before the file
    that matches; it says it searched only the first files."""
    from trio_agent import Workspace

    for i in range(9):
        (tmp_path / f"f{i}.txt").write_text("nothing here\n")
    (tmp_path / "zz_last.txt").write_text("needle\n")
    workspace = Workspace(tmp_path, max_entries=2)  # searches at most 8 files
    out = await workspace.grep("needle")
    assert "searched only the first 8 files" in out
    small = Workspace(tmp_path, max_entries=5)  # 20 files: all searched
    assert (await small.grep("needle")).startswith("zz_last.txt")
    assert "searched only" not in await small.grep("needle")
