"""Reading the README's links, which must work on PyPI, away from the repository
(its code blocks are read with the site's pages: docs_blocks.py)."""

from __future__ import annotations

import re
from pathlib import Path

from paths import ROOT

README = ROOT / "README.md"
REPO_URL = "https://github.com/trio-agent/trio-agent"


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
