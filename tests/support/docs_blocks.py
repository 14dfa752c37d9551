"""Reading the documentation's code blocks: the README and every page under docs/.

Every fenced block names its language. A ```python block is a whole program;
a ```console block's ``$ trio-agent ...`` lines are commands, each followed by
the output it shows. A block that needs something around it is marked on the
line just above its fence with ``<!-- docs-test: SETUP -->`` (SETUPS lists
them; words after the setup are a comment). ``DocsError`` reports whatever
could let a block escape the tests: a Python block fenced as ```py, an
indented or unclosed fence, a fence with no language, an unknown setup, a
setup on the wrong kind of block, or a marker that is not just above a fence.
"""

from __future__ import annotations

import ast
import io
import re
import shlex
import tokenize
from dataclasses import dataclass
from pathlib import Path

from paths import ROOT

DOCS = ROOT / "docs"

SETUPS = {
    "keys": "python: OPENAI_API_KEY and ANTHROPIC_API_KEY set to dummies; no request is made",
    "openai": "python: OPENAI_BASE_URL and ANTHROPIC_BASE_URL point to the loopback server",
    "postgres": "python: TRIO_AGENT_DSN names a fresh database in the suite's cluster",
    "shell": "a ```sh or ```console block (its `$ trio-agent` lines run with the openai setup)",
}
PYTHON_SETUPS = frozenset({"keys", "openai", "postgres"})
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
PYTHONISH = frozenset({"py", "py3", "python3", "pycon", "pyi", "ipython", "pytb"})

FENCE = re.compile(r"^(`{3,}|~{3,})\s*([^\s`{]*)")
MARKER = re.compile(r"^<!--\s*docs-test:\s*(\S+)[^>]*-->\s*$")
MARKER_WORDS = ("docs-test", "readme-test")
EXPECTED = re.compile(r"(?m)^\s*print\(.*\)  # (.+)$")


class DocsError(AssertionError):
    pass


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: README.md, docs/concepts/tools.md
    line: int  # of the opening fence, 1-based
    language: str
    setup: str | None
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.removeprefix('docs/')}:{self.line}"


@dataclass(frozen=True)
class Command:
    """A ``$ trio-agent ...`` line of a console block and the output shown after it."""

    line: int
    argv: tuple[str, ...]  # after ``trio-agent``
    shown: tuple[str, ...]


def pages() -> list[Path]:
    """The README and every Markdown page of the site, in a stable order."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def page_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _closing(lines: list[str], start: int, fence: str) -> int:
    closer = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}\s*$")
    end = start + 1
    while end < len(lines) and not closer.match(lines[end]):
        end += 1
    if end == len(lines):
        raise DocsError(f"line {start + 1}: a code block that is never closed")
    return end


def _setup(lines: list[str], index: int, language: str) -> tuple[str | None, int | None]:
    """The setup marked just above the fence at ``index`` (and the marker's index)."""
    if index == 0:
        return None, None
    marker = MARKER.match(lines[index - 1])
    if marker is None:
        return None, None
    setup = marker.group(1)
    if setup not in SETUPS:
        raise DocsError(
            f"line {index}: unknown docs-test setup {setup!r} (known: {sorted(SETUPS)})"
        )
    if language == "python" and setup not in PYTHON_SETUPS:
        raise DocsError(f"line {index}: {setup!r} is not a setup of a ```python block")
    if language != "python" and (setup != "shell" or language not in SHELL_LANGUAGES):
        raise DocsError(f"line {index}: {setup!r} does not go above a ```{language} block")
    return setup, index - 1


def blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block of a page, with its setup; DocsError for anything that
    could escape the tests."""
    lines = text.splitlines()
    found: list[Block] = []
    markers: set[int] = set()
    index = 0
    while index < len(lines):
        line = lines[index]
        if re.match(r"^\s+(`{3}|~{3})", line):
            raise DocsError(f"line {index + 1}: an indented fence (write fences at column 0)")
        opened = FENCE.match(line)
        if not opened:
            index += 1
            continue
        fence, language = opened.groups()
        end = _closing(lines, index, fence)
        if not language:
            raise DocsError(f"line {index + 1}: a fence with no language (```python, ```sh, ...)")
        if language.lower() in PYTHONISH or (language.lower() == "python" != language):
            raise DocsError(f"line {index + 1}: fence Python as ```python, not ```{language}")
        setup, marker = _setup(lines, index, language)
        if marker is not None:
            markers.add(marker)
        code = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(Block(page, index + 1, language, setup, code))
        index = end + 1
    for number, line in enumerate(lines):
        if any(word in line for word in MARKER_WORDS) and number not in markers:
            raise DocsError(f"line {number + 1}: a docs-test marker not just above a fence")
    return found


def expected_output(code: str) -> list[str]:
    """What a Python block says it prints: the comment right after each of its
    ``print(...)`` calls (``print(x)  # what it prints``), in the order of the
    source. A call that spans lines (as ruff format writes a long one) has its
    comment after its closing parenthesis."""
    try:
        tree = ast.parse(code)
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (SyntaxError, tokenize.TokenError):
        return EXPECTED.findall(code)  # it cannot run either: the run says why
    comments = {token.start: token.string for token in tokens if token.type == tokenize.COMMENT}
    found = []
    for node in ast.walk(tree):
        call = node.value if isinstance(node, ast.Expr) else None
        if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "print"):
            continue
        end = (call.end_lineno or call.lineno, (call.end_col_offset or 0) + 2)
        comment = comments.get(end, "")
        if comment.startswith("# "):
            found.append((call.lineno, call.col_offset, comment[2:]))
    return [text for _, _, text in sorted(found)]


def _words(command: str) -> list[str]:
    """A command line as the shell would split it; DocsError for what only a
    shell could run (pipes, redirections, lists, variables, substitutions)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    for word in words:
        if set(word) <= set("();<>|&") or "$" in word or "`" in word:
            raise DocsError(f"{word!r}: the test runs trio-agent commands as plain words")
    return words


def commands(block: Block) -> list[Command]:
    """The ``$ trio-agent ...`` commands of a console block (other commands are
    shown, not run), each with the output lines shown under it."""
    found: list[Command] = []
    lines = block.code.splitlines()
    index = 0
    while index < len(lines):
        if not lines[index].startswith("$ "):
            index += 1
            continue
        start = index
        command = lines[index][2:]
        while command.endswith("\\") and index + 1 < len(lines):  # continued
            index += 1
            command = command[:-1] + " " + lines[index].strip()
        index += 1
        shown = []
        while index < len(lines) and not lines[index].startswith("$ "):
            shown.append(lines[index].rstrip())
            index += 1
        if not command.startswith("trio-agent"):
            continue
        try:
            words = _words(command)
        except (DocsError, ValueError) as error:
            raise DocsError(f"line {block.line + start + 1}: {error}") from None
        if words[0] != "trio-agent":
            continue
        while shown and not shown[-1]:
            shown.pop()
        found.append(Command(block.line + start + 1, tuple(words[1:]), tuple(shown)))
    return found


def shown_matches(shown: tuple[str, ...], printed: list[str]) -> str | None:
    """None if every shown line was printed, in order (others between them
    allowed; ``...`` in a shown line stands for any text, and a line that is
    just ``...`` for any lines); else the first shown line that was not."""
    rest = iter(line.rstrip() for line in printed)
    for want in shown:
        if not want.strip() or want.strip() == "...":
            continue
        pattern = re.compile(".*?".join(re.escape(part) for part in want.split("...")))
        if not any(pattern.fullmatch(line) for line in rest):
            return want
    return None
