"""The documentation works as written: the README and every page under docs/.

Every ```python block is a whole program: it runs in a fresh interpreter with
``-W error`` and prints what its ``print(...)  # expected`` comments say, in
order. Every ``$ trio-agent ...`` line of a ```console block runs, in a
directory of its own shared by the block's commands, against the loopback
server, exits 0 and prints the output shown under it. A block that needs
something around it says so on the line above its fence (``<!-- docs-test:
SETUP -->``, tests/support/docs_blocks.py); nothing is skipped, and a page
that could let a block escape fails. Each block is a test of its own, named
``page:line``.

The site builds with ``mkdocs build --strict``, and its API reference
documents every public name.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re

import pytest
import trio
from docs_blocks import (
    Block,
    DocsError,
    blocks,
    commands,
    expected_output,
    page_name,
    pages,
    shown_matches,
)
from docs_reference import PAGE as EXPORTS_PAGE
from docs_reference import PAGES as REFERENCE_PAGES
from docs_reference import current, table
from docs_run import KEYS, build_site, describe, fresh_database, run_cli, run_python
from docs_server import HELLO, DocsServer

import trio_agent

PARSED: dict[str, list[Block] | DocsError] = {}
for path in pages():
    try:
        PARSED[page_name(path)] = blocks(path.read_text(encoding="utf-8"), page_name(path))
    except DocsError as error:
        PARSED[page_name(path)] = error
BLOCKS = [block for found in PARSED.values() if isinstance(found, list) for block in found]
PYTHON = [block for block in BLOCKS if block.language == "python"]
CONSOLE = [block for block in BLOCKS if block.language == "console"]


def by_id(blocks: list[Block]) -> object:
    return pytest.mark.parametrize("block", blocks, ids=[block.id for block in blocks])


@pytest.mark.parametrize("page", sorted(PARSED))
def test_the_page_lets_no_block_escape(page):
    found = PARSED[page]
    assert not isinstance(found, DocsError), f"{page}: {found}"


# --- running them --------------------------------------------------------------------------


async def python_env(block: Block, request, nursery) -> dict[str, str]:
    if block.setup == "keys":
        return dict(KEYS)
    if block.setup == "openai":
        server = DocsServer()
        await nursery.start(server.serve)
        return server.env()
    if block.setup == "postgres":
        cluster = request.getfixturevalue("pg_cluster")
        dsn = await trio.to_thread.run_sync(fresh_database, cluster.dsn)
        return {"TRIO_AGENT_DSN": dsn}
    assert block.setup is None, block
    return {}


@by_id(PYTHON)
async def test_python_block_runs_and_prints_what_it_says(block, tmp_path, request):
    async with trio.open_nursery() as nursery:
        env = await python_env(block, request, nursery)
        done = await run_python(block.code, tmp_path, env)
        nursery.cancel_scope.cancel()
    assert done.returncode == 0, describe(block, done)
    assert done.stderr == "", describe(block, done)
    printed = iter(done.stdout.splitlines())
    for expected in expected_output(block.code):  # in order, other lines between allowed
        assert expected in printed, f"{expected!r} not printed (in order)\n{describe(block, done)}"


@by_id(CONSOLE)
async def test_console_commands_run_and_print_what_they_show(block, tmp_path):
    async with trio.open_nursery() as nursery:
        server = DocsServer()
        await nursery.start(server.serve)
        for command in commands(block):
            done = await run_cli(command.argv, tmp_path, server.env())
            said = f"$ trio-agent {' '.join(command.argv)} (line {command.line})"
            assert done.returncode == 0, f"{said} exited {done.returncode}:\n{done.stdout}"
            missing = shown_matches(command.shown, done.stdout.splitlines())
            assert missing is None, f"{said}: {missing!r} not printed (in order):\n{done.stdout}"
        nursery.cancel_scope.cancel()


INSTALL = re.compile(r"pip install\b([^`\n;|&]*)")


def failing_installs(text: str) -> list[str]:
    """``pip install`` commands that ask PyPI for trio-agent, which is not there yet."""
    bad = []
    for match in INSTALL.finditer(text):
        words = match.group(1).replace("'", " ").replace('"', " ").split()
        for word, after in zip(words, [*words[1:], ""], strict=True):
            if re.match(r"trio[-_]agent(\[[\w,]+\])?$", word) and after != "@":
                bad.append(match.group(0).strip())
    return bad


@pytest.mark.parametrize("path", pages(), ids=page_name)
def test_no_page_shows_an_install_from_pypi(path):
    """The package is not on PyPI yet: ``pip install trio-agent`` fails (the
    README said it, issue 34); install from a clone or the git URL."""
    assert failing_installs(path.read_text(encoding="utf-8")) == []


def test_every_page_is_checked_and_the_docs_have_blocks():
    assert "README.md" in PARSED
    assert len(PYTHON) >= 2
    assert any(expected_output(block.code) for block in PYTHON if block.page == "README.md")


# --- the site and its reference ------------------------------------------------------------

PUBLIC = sorted(
    module.name
    for module in pkgutil.iter_modules(trio_agent.__path__)
    if not module.name.startswith("_") and module.name != "cli"  # cli: the command line
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built with --strict (any warning fails the build) once per run,
    whichever worker asks first."""
    base = tmp_path_factory.getbasetemp()
    return build_site(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


def test_the_site_builds_with_no_warning(site):
    _, done = site
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0 and warnings == [], done.stderr[-6000:]


@pytest.mark.parametrize("module", PUBLIC)
def test_the_reference_documents_every_public_name_of(module, site):
    out, done = site
    assert done.returncode == 0, done.stderr[-3000:]
    page = REFERENCE_PAGES.get(module)
    assert page, f"trio_agent.{module} has no reference page (tests/support/docs_reference.py)"
    html = (out / "reference" / page.removesuffix(".md") / "index.html").read_text()
    names = importlib.import_module(f"trio_agent.{module}").__all__
    missing = [name for name in names if f'id="trio_agent.{module}.{name}"' not in html]
    assert missing == [], f"reference/{page} does not document trio_agent.{module}: {missing}"


def test_the_reference_lists_every_name_of_trio_agent_where_it_is_documented(site):
    assert current(EXPORTS_PAGE.read_text()) == table(), (
        "docs/reference/trio_agent.md is out of date: run "
        ".venv/bin/python tests/support/docs_reference.py"
    )
    text = EXPORTS_PAGE.read_text()
    listed = re.findall(r"\[`(\w+)`\]\[trio_agent\.\w+\.\1\]", text)
    assert sorted(listed) == sorted(trio_agent.__all__)
    out, done = site
    html = (out / "reference" / "trio_agent" / "index.html").read_text()
    assert done.returncode == 0 and "Agent" in html  # --strict: every link resolved


def test_a_docstring_example_in_rest_style_renders_as_python(site):
    """The docstrings introduce examples reST's way (``text::`` and an indented
    block); Markdown showed a stray ``::`` and an unhighlighted block, until
    docs/hooks/docstrings.py fenced them."""
    out, _ = site
    mcp = (out / "reference" / "mcp" / "index.html").read_text()
    output = (out / "reference" / "output" / "index.html").read_text()
    assert "<p>::</p>" not in mcp and "cancellation::" not in output
    assert '<span class="n">MCPServerStdio</span>' in mcp
    assert '<span class="n">partial_output</span>' in output


def test_a_struct_field_shows_its_description_and_its_plain_type(site):
    """A msgspec field documents itself in ``Annotated[T, Meta(description=...)]``;
    the reference showed that whole annotation and no docstring, until
    docs/hooks/docstrings.py made the description the field's docstring."""
    out, _ = site
    session = (out / "reference" / "session" / "index.html").read_text()
    events = (out / "reference" / "events" / "index.html").read_text()
    assert "Who decided, as the application names them." in session  # ApprovalDecision.by
    assert "as in the assistant message that asked for it" in events  # via a Meta constant
    pages = (out / "reference").glob("*/index.html")
    assert not any("Meta(description" in page.read_text() for page in pages)


# --- the checks themselves catch what they are for -----------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("```py\nx = 1\n```\n", "fence Python as ```python"),
        ("```Python\nx = 1\n```\n", "fence Python as ```python"),
        ("  ```python\nx = 1\n  ```\n", "an indented fence"),
        ("```python\nx = 1\n", "never closed"),
        ("```\nx = 1\n```\n", "no language"),
        ("<!-- docs-test: agent -->\n```python\nx = 1\n```\n", "unknown docs-test setup 'agent'"),
        ("<!-- docs-test: keys -->\n\n```python\nx = 1\n```\n", "not just above"),
        ("<!-- docs-test: keys -->\n```sh\nls\n```\n", "does not go above a ```sh"),
        ("<!-- docs-test: shell -->\n```python\nx = 1\n```\n", "not a setup of a ```python"),
        ("<!-- readme-test: keys -->\n```python\nx = 1\n```\n", "not just above"),
        ("```console\n$ trio-agent demo | head\n```\n", "'|': the test runs"),
    ],
)
def test_a_block_cannot_slip_past_the_parser(text, message):
    with pytest.raises(DocsError, match=re.escape(message)):
        for block in blocks(text):
            commands(block)


def test_the_parser_reads_setups_expected_output_and_commands():
    text = (
        "<!-- docs-test: openai (a comment) -->\n```python\nprint(1)  # 1\n```\n\n"
        "<!-- docs-test: shell -->\n```console\n$ pip install x\nok\n"
        "$ trio-agent run --model 'a b' \\\n    hi\nHello\n\n$ trio-agent --version\n```\n"
    )
    python, console = blocks(text, "docs/x.md")
    assert (python.id, python.setup, expected_output(python.code)) == ("x.md:2", "openai", ["1"])
    assert console.setup == "shell"
    assert [(c.line, c.argv, c.shown) for c in commands(console)] == [
        (10, ("run", "--model", "a b", "hi"), ("Hello",)),
        (14, ("--version",), ()),
    ]


def test_expected_output_survives_ruff_format():
    """``ruff format`` (CI's format step covers the pages' blocks) splits a long
    ``print(...)  # expected`` over lines, the comment after the closing
    parenthesis; a line-based reading lost that check without a word."""
    code = (
        "for n in range(2):\n    print(n)  # 0\n"
        "print(\n    [[spec.name for spec in request.tools] for request in model.requests]\n"
        ")  # [['now'], ['now', 'today']]\n"
        "print('# not a comment')\nvalue = print(5)  # not a print statement\n"
    )
    assert expected_output(code) == ["0", "[['now'], ['now', 'today']]"]


def test_shown_output_matches_in_order_with_elisions():
    printed = ["sandbox: none", "Hello there", "   [ok] 3 lines", "done in 0.2 s"]
    assert shown_matches(("Hello there", "done in ... s"), printed) is None
    assert shown_matches(("...", "   [ok] ..."), printed) is None
    assert shown_matches(("done in ... s", "Hello there"), printed) == "Hello there"
    assert shown_matches(("Hello",), printed) == "Hello"  # whole lines, not parts


def test_an_install_from_pypi_is_caught():
    assert failing_installs("`pip install trio-agent`") == ["pip install trio-agent"]
    assert failing_installs("pip install 'trio-agent[mcp]'\n") == ["pip install 'trio-agent[mcp]'"]
    url = "git+https://github.com/trio-agent/trio-agent"
    assert failing_installs(f"pip install 'trio-agent[mcp] @ {url}'\npip install -e .\n") == []


async def test_the_loopback_server_answers_each_api_as_the_docs_say(tmp_path):
    code = """
import trio
from trio_agent import ModelRequest, UserMessage
from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel

async def main():
    request = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())
    for kind in (OpenAIChatModel, OpenAIResponsesModel, AnthropicModel):
        async with kind("m") as model, model.stream(request) as stream:
            async for _ in stream:
                pass
            response = await stream.response()
        print(response.content[0].text, response.usage.output_tokens)

trio.run(main)
"""
    async with trio.open_nursery() as nursery:
        server = DocsServer()
        await nursery.start(server.serve)
        done = await run_python(code, tmp_path, server.env())
        nursery.cancel_scope.cancel()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{HELLO} 7"] * 3
    assert server.paths == ["/v1/chat/completions", "/v1/responses", "/v1/messages"]
