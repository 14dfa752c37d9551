"""Reading the README: its ```python blocks with their ``readme-test`` markers,
and its links (which must work on PyPI, away from the repository)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from paths import ROOT

README = ROOT / "README.md"
REPO_URL = "https://github.com/trio-agent/trio-agent"


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    setup: str | None  # the first word of its readme-test marker
    argument: str  # the marker's second word, if any
    code: str


FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\S*)")


MARKER = re.compile(r"^<!-- readme-test: (\S+)(?: (\S+))?[^>]*-->$")


PYTHONISH = {"py", "py3", "python3", "pycon", "pyi", "ipython"}


class ReadmeError(AssertionError):
    pass


def python_blocks(text: str) -> list[Block]:
    """The README's ```python blocks and their markers; ReadmeError for a block
    that could escape the tests (fenced as ```py, indented, never closed) or a
    marker that is not just above a Python block."""
    lines = text.splitlines()
    blocks: list[Block] = []
    markers_used: set[int] = set()
    index = 0
    while index < len(lines):
        line = lines[index]
        if re.match(r"^\s+(`{3}|~{3})", line):
            raise ReadmeError(f"line {index + 1}: an indented fence (write fences at column 0)")
        opened = FENCE.match(line)
        if not opened:
            index += 1
            continue
        fence, info = opened.groups()
        end = index + 1
        while end < len(lines) and not lines[end].startswith(fence):
            end += 1
        if end == len(lines):
            raise ReadmeError(f"line {index + 1}: a code block that is never closed")
        if info.lower() in PYTHONISH:
            raise ReadmeError(f"line {index + 1}: fence Python as ```python, not ```{info}")
        if info == "python":
            setup, argument = None, ""
            above = index - 1
            marker = MARKER.match(lines[above]) if above >= 0 else None
            if marker:
                setup, argument = marker.group(1), marker.group(2) or ""
                markers_used.add(above)
            code = "\n".join(lines[index + 1 : end]) + "\n"
            blocks.append(Block(index + 1, setup, argument, code))
        index = end + 1
    for number, line in enumerate(lines):
        if "readme-test" in line and number not in markers_used:
            raise ReadmeError(f"line {number + 1}: a readme-test marker not just above ```python")
    return blocks


def without_code(text: str) -> str:
    """The README's prose: fenced blocks and inline code spans removed."""
    text = re.sub(r"(?ms)^(`{3,}|~{3,}).*?^\1", "", text)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


REFERENCE = re.compile(r"(?m)^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")


HTML_LINK = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)


AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^\s>]+)>", re.I)


def link_targets(text: str) -> list[str]:
    prose = without_code(text)
    return [
        match.group(1)
        for pattern in (LINK, REFERENCE, HTML_LINK, AUTOLINK)
        for match in pattern.finditer(prose)
    ]


def repo_path(url: str) -> str | None:
    """The path in this repository a URL names (``blob/main/X`` or ``tree/main/X``)."""
    found = re.match(re.escape(REPO_URL) + r"/(?:blob|tree|raw)/main/([^#?]+)", url)
    return found.group(1).rstrip("/") if found else None


def dead_links(text: str, root: Path) -> list[str]:
    """Every reason a link in ``text`` would not work on PyPI."""
    problems = []
    if "../" in text:
        problems.append("'../' points outside the repository")
    for target in link_targets(text):
        if not target.startswith(("https://", "mailto:")):
            problems.append(f"{target}: relative or plain http (PyPI has no repository beside it)")
            continue
        path = repo_path(target)
        if path is not None and not (root / path).exists():
            problems.append(f"{target}: no {path} in the repository")
    return problems


def readme_repo_paths() -> list[str]:
    """Every file of this repository the README links to (test_packaging: in the sdist)."""
    paths = {repo_path(target) for target in link_targets(README.read_text())}
    return sorted(path for path in paths if path is not None)
