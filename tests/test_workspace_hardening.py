"""Workspace hardening (issue 12, items 14 and 15): globs matched in linear time,
walks that cancellation abandons at once, and names that are not UTF-8."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest
import trio
from helpers import call, user
from hypothesis import given, settings
from hypothesis import strategies as st

import trio_agent.workspace._walk as workspace_module  # where walks and listings stat entries
from trio_agent import ToolResultMessage, run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.workspace import Workspace, WorkspaceError
from trio_agent.workspace._glob import Glob

pytestmark = pytest.mark.usefixtures("sandbox_mode")  # each test in both modes

PATHOLOGICAL = "*a" * 12 + "b"


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root, run_seconds=10, grace_seconds=0.5)


def old_glob_regex(pattern: str) -> re.Pattern[str]:
    """The translation glob used before issue 12: the reference for its semantics."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


# ---------------------------------------------------------------- item 14: glob


# Both checks run in a child process: a backtracking regex holds the GIL for the
# whole match, so no time limit inside the test's own process could ever fire.
_GLOB_CHILD = """
import sys, trio
from pathlib import Path
from trio_agent import Workspace
from trio_agent.workspace._glob import Glob
pattern = sys.argv[2]
if sys.argv[1] == "workspace":
    root = Path(sys.argv[3])
    (root / ("a" * 200)).write_text("x")
    async def main():
        workspace = Workspace(root)
        print(await workspace.glob(pattern), await workspace.glob("*a" * 12),
              await workspace.glob("**" + pattern))
    trio.run(main)
else:
    print(Glob(pattern * 20).match("a" * 4000),
          Glob("**/" * 50 + "*a" * 40).match("a/" * 100 + "a" * 200))
"""


async def glob_child(*args: str) -> str:
    with trio.fail_after(20):  # a hang guard, not a benchmark: exponential never ends
        done = await trio.run_process(
            [sys.executable, "-c", _GLOB_CHILD, *args], capture_stdout=True
        )
    return done.stdout.decode().strip()


async def test_regression_a_backtracking_glob_against_a_long_name_returns_at_once(tmp_path):
    # The glob was a regex: this pattern against one 200-character name backtracked
    # for far longer than run_seconds, in a thread cancellation could not reach.
    found = await glob_child("workspace", PATHOLOGICAL, str(tmp_path))
    assert found == f"(no match) {'a' * 200} (no match)"


async def test_the_matcher_is_linear_on_the_backtracking_pattern():
    assert await glob_child("matcher", PATHOLOGICAL) == "False True"


@settings(max_examples=2000, deadline=None)
@given(
    pattern=st.text(alphabet="ab/*?", max_size=8),
    path=st.text(alphabet="ab/*?", max_size=10),
)
def test_the_matcher_agrees_with_the_old_regex_translation(pattern, path):
    assert Glob(pattern).match(path) == bool(old_glob_regex(pattern).fullmatch(path))


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("**/", "", True),
        ("**/", "a/b/", True),
        ("**/", "a/b", False),  # **/ is whole directories: it must end with a /
        ("**/b", "b", True),
        ("**/b", "ab", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/xb", False),
        ("*", "a/b", False),
        ("**", "a/b", True),
        ("?", "/", False),
        ("***/b", "x/y/b", True),  # ** then *, then a literal /
        ("[a].txt", "[a].txt", True),  # every other character stands for itself
        ("[a].txt", "a.txt", False),
    ],
)
def test_glob_semantics_are_kept(pattern, path, matches):
    assert Glob(pattern).match(path) is matches
    assert bool(old_glob_regex(pattern).fullmatch(path)) is matches


def test_double_star_also_matches_names_with_a_newline():
    # The one deliberate change: the regex's ``.`` stopped at a newline, so ``**``
    # missed a name holding one that ``*`` found.
    assert Glob("**").match("a/b\nc") and Glob("**/c").match("a\nb/c")
    assert Glob("*").match("b\nc") and not Glob("?").match("/")


async def test_glob_finds_the_same_paths_in_the_same_order_as_before(workspace):
    root = workspace.root
    for rel in ("b.txt", "a/z.py", "a/b/c.py", "a/b/d/e.py", "c/x.py", "a.py", "a/y.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("needle\n")
    os.symlink(root / "a", root / "link")  # listed, never entered
    expected = []
    for top, dirs, files, _ in os.fwalk(root, follow_symlinks=False):
        rel = os.path.relpath(top, root)  # noqa: ASYNC240 - a test's reference
        expected += [n if rel == "." else f"{rel}/{n}" for n in sorted(dirs + files)]
        dirs.sort()
    for pattern in ("**", "**/*.py", "a/**", "*", "a/*/*.py", "**/b/**/*.py"):
        want = [p for p in expected if old_glob_regex(pattern).fullmatch(p)]
        assert await workspace.glob(pattern) == "\n".join(want), pattern
    assert "link/z.py" not in expected


def slow_entries(monkeypatch, seconds: float) -> list[float]:
    """Make the per-entry step of a walk or listing slow; returns the times it ran."""
    calls: list[float] = []
    real = workspace_module._mode

    def slow(name: str, dir_fd: int) -> int | None:
        calls.append(time.monotonic())
        time.sleep(seconds)
        return real(name, dir_fd)

    monkeypatch.setattr(workspace_module, "_mode", slow)
    return calls


def open_fds(workspace) -> int:
    """Descriptors of this process open on the workspace root or below it."""
    root, count = str(workspace.root), 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        count += target == root or target.startswith(root + "/")
    return count


async def wait_until_quiet(workspace, calls: list[float], fds: int) -> None:
    """Wait (at most 5 s) for the abandoned thread to stop and close its descriptors."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if open_fds(workspace) == fds and time.monotonic() - calls[-1] > 0.2:
            return
        await trio.sleep(0.02)


def many_files(workspace, count: int = 300) -> None:
    (workspace.root / "many").mkdir()
    for i in range(count):
        (workspace.root / "many" / f"f{i:03d}.txt").write_text("needle\n")


CANCELLABLE = [
    ("glob", lambda w: w.glob("**/*.py")),
    ("list_dir", lambda w: w.list_dir("many")),
    ("grep", lambda w: w.grep("needle")),
    ("regex grep", lambda w: w.grep("need+le", regex=True)),
]


@pytest.mark.parametrize("operation", [c[1] for c in CANCELLABLE], ids=[c[0] for c in CANCELLABLE])
async def test_regression_cancelling_a_slow_walk_returns_at_once_and_the_thread_stops(
    workspace, monkeypatch, operation
):
    # The walk ran in trio.to_thread.run_sync, which cancellation cannot interrupt:
    # a cancelled turn waited for the whole walk (here 300 entries x 20 ms).
    many_files(workspace)
    fds = open_fds(workspace)
    calls = slow_entries(monkeypatch, 0.02)
    started = time.monotonic()
    with trio.move_on_after(0.2) as scope:
        await operation(workspace)
    elapsed = time.monotonic() - started
    assert scope.cancelled_caught and elapsed < 2  # not the 6 s of the whole walk
    at_cancel = len(calls)
    await wait_until_quiet(workspace, calls, fds)
    assert len(calls) <= at_cancel + 2  # the abandoned thread stopped at its next entry
    assert open_fds(workspace) == fds  # ... and closed what it had opened


@pytest.mark.parametrize(
    "operation", [c[1] for c in CANCELLABLE[:2]], ids=[c[0] for c in CANCELLABLE[:2]]
)
async def test_regression_cancelling_during_one_slow_entry_returns_at_once(
    workspace, monkeypatch, operation
):
    # A per-entry check alone would still wait for the step in progress (a stat
    # on a hung file system): the thread is abandoned instead, and stops after it.
    many_files(workspace, 3)
    fds = open_fds(workspace)
    calls = slow_entries(monkeypatch, 1.5)
    started = time.monotonic()
    with trio.move_on_after(0.2) as scope:
        await operation(workspace)
    assert scope.cancelled_caught and time.monotonic() - started < 1.0
    await wait_until_quiet(workspace, calls, fds)
    assert len(calls) == 1 and open_fds(workspace) == fds


async def test_regression_cancelling_a_turn_during_a_slow_glob_returns_at_once(
    workspace, monkeypatch
):
    many_files(workspace)
    fds = open_fds(workspace)
    calls = slow_entries(monkeypatch, 0.02)
    model = ScriptedModel(
        [
            scripted_response("r1", [call("glob", "c1", {"pattern": "**/*.txt"})]),
            scripted_response("r2", "unreachable"),
        ]
    )
    run = run_agent_loop(messages=[user()], model=model, tools=workspace.tools(), max_steps=4)
    started = time.monotonic()
    with trio.move_on_after(0.3):
        await run.wait()
    assert time.monotonic() - started < 2
    assert model.call_count == 1
    await wait_until_quiet(workspace, calls, fds)
    assert open_fds(workspace) == fds


async def test_regression_the_walk_time_limit_holds_inside_one_big_directory(
    workspace, monkeypatch
):
    # The limit was checked once per directory: one directory of slow entries
    # ran on past it.
    many_files(workspace)
    workspace.run_seconds = 0.3
    slow_entries(monkeypatch, 0.02)
    with trio.fail_after(5):
        with pytest.raises(WorkspaceError, match=r"the walk took longer than 0.3 s"):
            await workspace.glob("**")
        with pytest.raises(WorkspaceError, match=r"listing 'many' took longer than 0.3 s"):
            await workspace.list_dir("many")


# ------------------------------------------------------ item 15: names not UTF-8


def make_non_utf8_names(workspace) -> None:
    root = os.fsencode(workspace.root)
    for name in (b"caf\xe9", b"sub/na\xefve.txt"):
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_WRONLY)
        os.write(fd, b"needle here\n")
        os.close(fd)


async def test_regression_direct_workspace_results_have_no_lone_surrogates(workspace):
    # list_dir returned "caf\udce9": text that cannot be encoded (only the tool
    # path cleaned it); a regex grep failed to encode its request to the child.
    make_non_utf8_names(workspace)
    results = {
        "list_dir": await workspace.list_dir("."),
        "list_dir sub": await workspace.list_dir("sub"),
        "glob": await workspace.glob("**"),
        "grep": await workspace.grep("needle"),
        "regex grep": await workspace.grep("need+le", regex=True),
        "write": await workspace.write_file("caf\udce9.md", "x"),
        "edit": await workspace.edit_file("caf\udce9.md", "x", "y"),
    }
    for name, text in results.items():
        text.encode("utf-8")  # raises on a lone surrogate
        assert "\ufffd" in text, name
    assert results["list_dir"] == "caf\ufffd\nsub/"
    assert results["grep"] == "caf\ufffd:1: needle here\nsub/na\ufffdve.txt:1: needle here"
    assert results["regex grep"] == results["grep"]


async def test_regression_tool_results_for_names_not_utf8_encode(workspace):
    make_non_utf8_names(workspace)
    calls = [
        call("list_dir", "c1", {"path": "."}),
        call("glob", "c2", {"pattern": "**"}),
        call("grep", "c3", {"pattern": "needle"}),
        call("grep", "c4", {"pattern": "need+le", "regex": True}),
    ]
    model = ScriptedModel([scripted_response("r1", calls), scripted_response("r2", "done")])
    result = await run_agent_loop(
        messages=[user()], model=model, tools=workspace.tools(), max_steps=4
    ).wait()
    assert result.status == "completed"
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [a.is_error for a in answers] == [False] * 4, [a.content for a in answers]
    for answer in answers:
        answer.content.encode("utf-8")
        assert "caf\ufffd" in answer.content


async def test_regression_a_regex_grep_never_imports_modules_written_in_the_workspace(tmp_path):
    # The grep child ran `python -c` in the root: a json.py there ran inside it.
    (tmp_path / "json.py").write_text(
        "import pathlib\npathlib.Path('pwned').write_text('x')\nfrom _json import *\n"
    )
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    found = await Workspace(tmp_path).grep("al.ha", regex=True)
    assert found == "notes.txt:1: alpha"
    assert not (tmp_path / "pwned").exists()


async def test_regression_grep_said_no_match_when_it_stopped_before_the_file_that_matches(tmp_path):
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
