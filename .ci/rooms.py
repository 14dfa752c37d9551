"""Room and house checks for trio_agent/: no function over 100 lines, no module over 650 (but
for a concept listed in ``WHOLE``, with the reason it stays whole), no underscore
name imported from another module (a helper two modules share gets a public name
in a private module), and no module reading another object's underscore
attribute (``obj._x`` where ``obj`` is not ``self`` or ``cls``: hand it an
explicit state object instead). The house: no import cycle at run time (imports
under ``if TYPE_CHECKING:`` are for type checkers only), at most ``MAX_ROOT``
modules flat in trio_agent/, and every module named in ARCHITECTURE.md.
Exits 1, listing every breach."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 650
WHOLE: dict[str, str] = {
    "session/_agent.py": "the Agent's public face: each option spelled out once per typed "
    "signature (the overloads that make Agent(output_type=T, deps_type=D) an Agent[T, D] "
    "for type checkers, of __init__, resume, turn and prompt), its behaviour in the modules "
    "it is a shell over",
}
"""Modules allowed past ``MAX_MODULE_LINES``, each with why cutting it would be
arbitrary (a path relative to trio_agent/, and the reason)."""
OWN = frozenset({"self", "cls"})
MAX_ROOT = 16


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def breaches(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES and path.relative_to(root).as_posix() not in WHOLE:
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
                    if _private(alias.name):
                        found.append(f"{path}: imports private {alias.name} from {node.module}")
            if isinstance(node, ast.Attribute) and _private(node.attr):
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in OWN):
                    found.append(
                        f"{path}:{node.lineno} reads {ast.unparse(node)}: another object's "
                        "private attribute (pass it an explicit state object)"
                    )
    return found


def _modules(root: Path) -> dict[str, Path]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _run_time_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import but those under ``if TYPE_CHECKING:``, in functions too (a
    call upwards is a tie as well)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped
    ]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports at run time (a package's
    ``__init__`` importing its own modules is its page, not a tie)."""
    modules = _modules(root)
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _run_time_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = name.split(".") if name in packages else name.split(".")[:-1]
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                    for alias in node.names
                ]
            for target in targets:
                own_page = name in packages and target.startswith(name + ".")
                if target in modules and target != name and not own_page:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def house(root: Path, architecture: str) -> list[str]:
    """The house's breaches: import cycles, too many root modules, modules
    ARCHITECTURE.md does not name (by their path in the package, or by file
    name on a line that names their folder, as a table row does)."""
    found = [f"import cycle: {' -> '.join(group)}" for group in cycles(import_graph(root))]
    flat = [
        p.name for p in sorted(root.glob("*.py")) if p.name not in ("__init__.py", "__main__.py")
    ]
    if len(flat) > MAX_ROOT:
        found.append(f"{len(flat)} modules flat in {root.name}/ (at most {MAX_ROOT}): {flat}")
    lines = architecture.splitlines()
    for path in _modules(root).values():
        if path.name == "__init__.py":
            continue
        inside = path.relative_to(root)
        folder = f"{inside.parent.as_posix()}/"
        word = re.compile(rf"(?<![\w/]){re.escape(path.name)}(?![\w])")
        named = inside.as_posix() in architecture or any(
            word.search(line) and (folder == "./" or folder in line) for line in lines
        )
        if not named:
            found.append(
                f"{path.relative_to(root.parent).as_posix()} is not named in ARCHITECTURE.md"
            )
    return found


if __name__ == "__main__":
    top = Path(__file__).resolve().parent.parent
    architecture = (top / "ARCHITECTURE.md").read_text()
    problems = breaches(top / "trio_agent") + house(top / "trio_agent", architecture)
    print(
        "\n".join(problems)
        or "rooms: every module, function, import and attribute is in bounds; no import "
        "cycle; the root and ARCHITECTURE.md hold every module"
    )
    sys.exit(1 if problems else 0)
