"""Room checks for trio_agent/: no function over 100 lines, no module over 650, no
underscore name imported from another module (a helper two modules share gets a
public name in a private module). Exits 1, listing every breach."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 650


def breaches(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            found.append(f"{path}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if size > MAX_FUNCTION_LINES:
                    found.append(f"{path}:{node.lineno} {node.name} is {size} lines")
            if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("trio_agent")
            ):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path}: imports private {alias.name} from {node.module}")
    return found


if __name__ == "__main__":
    problems = breaches(Path(__file__).resolve().parent.parent / "trio_agent")
    print("\n".join(problems) or "rooms: every module, function and import is in bounds")
    sys.exit(1 if problems else 0)
