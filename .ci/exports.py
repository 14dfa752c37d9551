"""The package's public names come from one table, ``_EXPORTS`` in
``trio_agent/__init__.py`` (each name and the public module that defines it).
This writes what follows from it: ``__all__`` and the imports type checkers
read (``if TYPE_CHECKING:``). ``--check`` exits 1 when the file is not what
the table gives (the test suite and CI run it); without it, it rewrites them.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

INIT = Path(__file__).resolve().parent.parent / "trio_agent" / "__init__.py"
_CHECKERS = re.compile(r"(?ms)^if TYPE_CHECKING:.*?(?=^\S)")
_ALL = re.compile(r"(?ms)^__all__ = \[.*?^\]\n")


def table(text: str) -> dict[str, str]:
    for node in ast.parse(text).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_EXPORTS":
            return ast.literal_eval(node.value)  # type: ignore[arg-type]
    raise SystemExit("trio_agent/__init__.py has no _EXPORTS table")


def generated(text: str) -> str:
    exports = table(text)
    imports = "".join(
        f"    from .{module} import {name} as {name}\n"
        for name, module in sorted(exports.items(), key=lambda item: (item[1], item[0]))
    )
    checkers = (
        "if TYPE_CHECKING:  # what type checkers and editors see; at run time, __getattr__\n"
        + imports
        + "\n"
    )
    names = "".join(f'    "{name}",\n' for name in sorted(exports))
    text = _CHECKERS.sub(lambda _: checkers, text, count=1)
    return _ALL.sub(lambda _: f"__all__ = [\n{names}]\n", text, count=1)


if __name__ == "__main__":
    current = INIT.read_text()
    wanted = generated(current)
    if "--check" in sys.argv[1:]:
        if wanted != current:
            print("trio_agent/__init__.py is not what _EXPORTS gives: run python .ci/exports.py")
            sys.exit(1)
        print("exports: __all__ and the checker imports follow the table")
    elif wanted != current:
        INIT.write_text(wanted)
        print("trio_agent/__init__.py rewritten from _EXPORTS")
