"""The README is the front page, on PyPI too.

Its code blocks run with every page of the site's (tests/test_docs.py); here,
what only the front page must do. Links: PyPI shows the README away from the
repository, so every link is an absolute https URL; one into this repository
names a file that exists (and, tests/test_packaging.py checks, ships in the
sdist). Nothing points outside the repository (``../``). The README stays a
front page: at most ``MAX_BYTES``, one example, the commands to set up, test
and build the site.
"""

from __future__ import annotations

from docs_blocks import blocks
from docs_run import run_python
from paths import ROOT
from readme import README, REPO_URL, dead_links, link_targets, repo_path

MAX_BYTES = 15 * 1024
TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
)


def section(heading: str) -> str:
    return README.read_text().split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_a_front_page_of_at_most_15_kb():
    """Issue 34: the README had grown to 107 KB, every feature's manual in the
    order it was added; the manual is the site now."""
    assert len(README.read_bytes()) <= MAX_BYTES
    python = [block for block in blocks(README.read_text()) if block.language == "python"]
    assert len(python) == 1, "one example: the rest belongs on the site's pages"


async def test_the_first_agent_prints_the_events_the_readme_lists(tmp_path):
    [block] = [block for block in blocks(section("## A first agent")) if block.language == "python"]
    done = await run_python(block.code, tmp_path, {})
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
    prose = section("## A first agent")
    assert all(f"`{event}`" in prose for event in events)


def test_the_readme_test_command_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert TEST_COMMAND in ci.splitlines()
    assert f"```sh\n{TEST_COMMAND}\n```" in README.read_text()


def test_the_readme_installs_from_the_repository_and_builds_the_site():
    """The package is not on PyPI: ``pip install trio-agent`` (the README's
    first instruction) failed for everyone who tried it (issue 34)."""
    text = README.read_text()
    assert f"pip install 'trio-agent @ git+{REPO_URL}'" in text
    assert "pip install trio-agent" not in text
    site = "python3 -m venv .venv && .venv/bin/pip install -e '.[docs]' && .venv/bin/mkdocs serve"
    assert f"```sh\n{site}\n```" in text


def test_every_readme_link_works_on_pypi():
    assert dead_links(README.read_text(), ROOT) == []
    assert f"{REPO_URL}/blob/main/ARCHITECTURE.md" in link_targets(README.read_text())


def test_the_readme_links_into_the_site():
    """Each feature of the list links to its page of the site (which exists:
    the link check above), and the front page reaches the reference."""
    linked = {repo_path(target) for target in link_targets(README.read_text())}
    pages = {path for path in linked if path and path.startswith("docs/")}
    assert {"docs/index.md", "docs/why-trio.md", "docs/reference/index.md"} <= pages
    concepts = {path.name for path in (ROOT / "docs" / "concepts").glob("*.md")}
    assert {f"docs/concepts/{name}" for name in concepts} <= pages, "a concept page not linked"
    assert concepts, "docs/concepts/ has no page"


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
