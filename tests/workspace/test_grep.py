"""``grep``: a regex search in a child process that runs nothing from the workspace,
and a search cut short by ``max_entries`` that says so."""

from __future__ import annotations

import os

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


async def test_regression_a_model_regex_is_compiled_off_the_event_loop(tmp_path, monkeypatch):
    """Review: grep checked a regex with ``re.compile`` on the trio thread. A pattern of under
    1000 characters such as ``(?i)([\\0-\\uffff]|...)`` takes about 0.4 s to compile: each call
    held the event loop that long. It is checked in a worker thread now."""
    import re

    import trio

    slow = "(?i)(" + "|".join([r"[\0-\uffff]"] * 80) + ")"
    on_loop = []
    real = re.compile

    def compile(pattern, flags=0):
        if pattern == slow:
            try:
                trio.lowlevel.current_task()
                on_loop.append(True)
            except RuntimeError:  # a worker thread: no trio task here
                on_loop.append(False)
        return real(pattern, flags)

    monkeypatch.setattr(re, "compile", compile)
    (tmp_path / "notes.txt").write_text("alpha\n")
    assert await Workspace(tmp_path).grep(slow, regex=True) == "notes.txt:1: alpha"
    assert on_loop and not any(on_loop)


@pytest.mark.parametrize("regex", [False, True])
async def test_regression_grep_holds_few_descriptors_and_never_skips_a_file_for_want_of_one(
    tmp_path, regex
):
    """Review: grep opened every file it would search (up to ``4 * max_entries``, 2000 by
    default) before searching any. Past the descriptor limit (1024 by default on Linux) a
    literal search skipped the files it could not open and said "(no match)", and a regex
    search failed with EMFILE; the rest of the agent (its connections) starved meanwhile.
    Files are opened a batch at a time now."""
    import resource

    for i in range(400):
        (tmp_path / f"f{i:03}.txt").write_text("nothing here\n")
    (tmp_path / "f399.txt").write_text("needle\n")
    workspace = Workspace(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 200, hard))
    try:
        found = await workspace.grep("ne+dle" if regex else "needle", regex=regex)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert found == "f399.txt:1: needle"
