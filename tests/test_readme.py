"""The README works as written, on PyPI too.

Every ```python block runs, in a fresh interpreter, and prints what its
``print(...)  # expected`` comments say. A block that cannot run on its own is
marked, on the line just above it, with ``<!-- readme-test: SETUP ... -->``
naming one of the setups in ``SETUPS``; an unknown setup, a stray marker, or
a Python block fenced as anything but ```python fails, so no block is skipped.

Links: PyPI shows the README away from the repository, so every link is an
absolute https URL; one into this repository names a file that exists (and,
tests/test_packaging.py checks, ships in the sdist). Nothing points outside
the repository (``../``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from paths import ROOT
from readme import (
    README,
    REPO_URL,
    Block,
    ReadmeError,
    dead_links,
    link_targets,
    python_blocks,
)

BLOCKS = python_blocks(README.read_text())

# --- running the blocks --------------------------------------------------------------------

AGENT_PRELUDE = '''
import trio

from trio_agent import ToolCall, ToolRegistry, tool
from trio_agent.testing import ScriptedModel, scripted_response


@tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


tools = ToolRegistry([add])
model = ScriptedModel(
    [
        scripted_response("r1", [ToolCall("call-1", "add", {"left": 20, "right": 22})]),
        scripted_response("r2", "The sum is 42."),
        scripted_response("r3", "It is 420."),
        scripted_response("r4", "Done."),
    ]
)
'''

SETUPS = {
    # no marker: the block is a script
    "keys": "a script, with OPENAI_API_KEY and ANTHROPIC_API_KEY set (no request is made)",
    "agent": "the body of async def main(), given model, add and tools (AGENT_PRELUDE)",
    "file": "the block is the named test file, which runs in our suite",
    "postgres": "a script, with TRIO_AGENT_DSN naming a fresh database in the suite's cluster",
}


def expected_output(code: str) -> list[str]:
    """What the block says it prints: the comments after its print(...) calls."""
    return re.findall(r"(?m)^\s*print\(.*\)  # (.+)$", code)


def run_python(source: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.endswith(("_API_KEY", "_BASE_URL"))
    }
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", source],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env={**environment, **env},
    )


def run_block(block: Block, cwd: Path, dsn: str = "") -> subprocess.CompletedProcess[str]:
    if block.setup is None:
        return run_python(block.code, cwd)
    if block.setup == "postgres":
        return run_python(block.code, cwd, TRIO_AGENT_DSN=dsn)
    if block.setup == "keys":
        return run_python(block.code, cwd, OPENAI_API_KEY="sk-test", ANTHROPIC_API_KEY="sk-test")
    assert block.setup == "agent", block
    main = "async def main() -> None:\n" + textwrap.indent(block.code, "    ")
    return run_python(f"{AGENT_PRELUDE}\n\n{main}\n\ntrio.run(main)\n", cwd)


def test_the_readme_has_python_blocks_each_with_a_known_setup():
    assert len(BLOCKS) >= 6
    unknown = [(block.line, block.setup) for block in BLOCKS if block.setup not in {None, *SETUPS}]
    assert unknown == [], f"unknown readme-test setups (known: {sorted(SETUPS)})"
    assert sum(bool(expected_output(block.code)) for block in BLOCKS) >= 5


def fresh_database(request) -> str:
    """A new database in the suite's PostgreSQL cluster; its DSN."""
    import uuid

    import psycopg

    cluster = request.getfixturevalue("pg_cluster")
    name = f"readme_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.dsn, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return cluster.dsn.replace("dbname=postgres", f"dbname={name}")


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: f"line{block.line}")
def test_readme_python_block_runs_and_prints_what_it_says(block, tmp_path, request):
    if block.setup == "file":  # the file runs in our suite; the block must be it, exactly
        assert block.code == (ROOT / block.argument).read_text()
        assert re.fullmatch(r"tests/test_\w+\.py", block.argument)
        return
    dsn = fresh_database(request) if block.setup == "postgres" else ""
    done = run_block(block, tmp_path, dsn)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    printed = iter(done.stdout.splitlines())
    for expected in expected_output(block.code):  # in order, other lines between allowed
        assert expected in printed, f"{expected!r} not printed (in order):\n{done.stdout}"


def block_under(heading: str) -> Block:
    text = README.read_text()
    start = text.index(f"\n{heading}\n")
    line = text.count("\n", 0, start) + 2
    return next(block for block in BLOCKS if block.line > line)


def test_the_first_agent_prints_the_events_the_readme_lists(tmp_path):
    done = run_block(block_under("## A first agent"), tmp_path)
    assert done.returncode == 0, done.stderr
    *events, result = done.stdout.splitlines()
    assert events == [
        "0 turn.started",
        "1 message.accepted",
        "2 model.chunk",
        "3 tool.started",
        "4 tool.finished",
        "5 model.chunk",
        "6 turn.finished",
    ]
    assert result == "completed The sum is 42."
    prose = README.read_text().split("## A first agent", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{event}`" in prose for event in events)


def test_the_loop_example_prints_a_whole_run(tmp_path):
    done = run_block(block_under("## The core loop: `run_agent_loop`"), tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "0 message.accepted" and lines[-2] == "7 run.finished"
    assert lines[-1] == "completed The sum is 42."


def test_the_readme_test_command_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    command = (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
    )
    assert command in ci.splitlines()
    assert f"```sh\n{command}\n```" in README.read_text()


def test_every_readme_link_works_on_pypi():
    assert dead_links(README.read_text(), ROOT) == []
    assert f"{REPO_URL}/blob/main/ARCHITECTURE.md" in link_targets(README.read_text())


# --- the checks themselves catch what they are for -----------------------------------------


def test_the_link_check_finds_each_kind_of_dead_link():
    bad = [
        "../shared/DESIGN.md",  # outside the repository
        "ARCHITECTURE.md",  # relative: dead on PyPI
        "http://example.com",  # not https
        f"{REPO_URL}/blob/main/NOPE.md",  # no such file
        "docs/x.html",  # relative, in HTML
    ]
    text = (
        f'[a]({bad[0]}), [b]({bad[1]}), [c]({bad[2]} "title"), [d]({bad[3]}), '
        f'<a href="{bad[4]}">e</a>, [ok]({REPO_URL}/blob/main/README.md).\n'
        "```python\nprint('[in code](nowhere.md)')\n```\n"
    )
    problems = dead_links(text, ROOT)
    assert problems[0] == "'../' points outside the repository"
    assert [problem.split(": ")[0] for problem in problems[1:]] == bad
    assert dead_links(f"[ok]({REPO_URL}/blob/main/README.md) `code.md`", ROOT) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("```py\nx = 1\n```\n", "fence Python as ```python"),
        ("  ```python\nx = 1\n  ```\n", "an indented fence"),
        ("```python\nx = 1\n", "never closed"),
        ("<!-- readme-test: agent -->\n\n```python\nx = 1\n```\n", "not just above"),
        ("<!-- readme-test: agent -->\n```sh\nls\n```\n", "not just above"),
    ],
)
def test_a_python_block_cannot_slip_past_the_parser(text, message):
    with pytest.raises(ReadmeError, match=re.escape(message)):
        python_blocks(text)


def test_the_parser_reads_markers_and_expected_output():
    text = "<!-- readme-test: file tests/x.py (why) -->\n```python\nprint(1)  # 1\n```\n"
    [block] = python_blocks(text)
    assert (block.line, block.setup, block.argument) == (2, "file", "tests/x.py")
    assert expected_output(block.code) == ["1"]
