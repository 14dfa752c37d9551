"""Glob patterns matched in linear time (issue 12, item 14), by simulating their
automaton: a backtracking pattern returns at once, and the matcher means what the
regex translation it replaced meant, with one deliberate change."""

from __future__ import annotations

import os
import re
import sys

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_agent.workspace import Workspace
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
    with trio.fail_after(120):  # a hang guard, not a benchmark: exponential never ends
        done = await trio.run_process(
            [sys.executable, "-c", _GLOB_CHILD, *args], capture_stdout=True
        )
    return done.stdout.decode().strip()


async def test_regression_a_backtracking_glob_against_a_long_name_returns_at_once(tmp_path):
    """Issue 12 item 14: the glob was a regex: this pattern against one 200-character name
    backtracked for far longer than ``run_seconds``, in a thread cancellation could not reach."""
    found = await glob_child("workspace", PATHOLOGICAL, str(tmp_path))
    assert found == f"(no match) {'a' * 200} (no match)"


async def test_the_matcher_is_linear_on_the_backtracking_pattern():
    """Issue 12 item 14: the glob matcher takes linear time on the pattern that made the old regex
    backtrack."""
    assert await glob_child("matcher", PATHOLOGICAL) == "False True"


@settings(max_examples=2000, deadline=None)
@given(
    pattern=st.text(alphabet="ab/*?", max_size=8),
    path=st.text(alphabet="ab/*?", max_size=10),
)
def test_the_matcher_agrees_with_the_old_regex_translation(pattern, path):
    """Issue 12 item 14: the linear matcher means what the regex translation it replaced meant."""
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
    """Issue 12 item 14: the glob's semantics, case by case, are those of the regex translation."""
    assert Glob(pattern).match(path) is matches
    assert bool(old_glob_regex(pattern).fullmatch(path)) is matches


def test_double_star_also_matches_names_with_a_newline():
    """Issue 12 item 14: the one deliberate change: the regex's ``.`` stopped at a newline, so
    ``**`` missed a name holding one that ``*`` found."""
    assert Glob("**").match("a/b\nc") and Glob("**/c").match("a\nb/c")
    assert Glob("*").match("b\nc") and not Glob("?").match("/")


async def test_glob_finds_the_same_paths_in_the_same_order_as_before(workspace):
    """Issue 12 item 14: the new glob finds the paths the old one found, in the same order, and
    enters no symlink."""
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
