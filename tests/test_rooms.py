"""The room and house checks of .ci/rooms.py and the exports table of
.ci/exports.py, also as tests: no function over 100 lines, no module over 650,
no underscore name or attribute crossing a module, no import cycle, at most 16
root modules, every module named in ARCHITECTURE.md."""

from __future__ import annotations

import runpy

from paths import ROOT


def test_every_module_function_and_import_is_in_bounds():
    rooms = runpy.run_path(str(ROOT / ".ci" / "rooms.py"))
    assert rooms["breaches"](ROOT / "trio_agent") == []


def test_the_room_check_finds_a_breach(tmp_path):
    rooms = runpy.run_path(str(ROOT / ".ci" / "rooms.py"))
    (tmp_path / "a.py").write_text("from ._b import _hidden\n" + "x = 1\n" * 700)
    found = rooms["breaches"](tmp_path)
    assert any("(at most 650)" in f for f in found) and any("_hidden" in f for f in found)


def test_the_house_has_no_import_cycle_few_root_modules_and_every_module_named():
    """Issue 33: 52 modules flat in the root, 4 import cycles, 24 modules
    ARCHITECTURE.md left out. The house check holds the new layout."""
    rooms = runpy.run_path(str(ROOT / ".ci" / "rooms.py"))
    architecture = (ROOT / "ARCHITECTURE.md").read_text()
    assert rooms["house"](ROOT / "trio_agent", architecture) == []


def test_the_house_check_finds_a_cycle_a_crowded_root_and_an_unnamed_module(tmp_path):
    rooms = runpy.run_path(str(ROOT / ".ci" / "rooms.py"))
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "_a.py").write_text("from ._b import x\n")
    (package / "sub" / "_b.py").write_text("from ._a import y\nx = 1\n")
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub._a import y\n"
    (package / "sub" / "_c.py").write_text(typed)  # for type checkers only: no tie
    for n in range(17):
        (package / f"m{n}.py").write_text("")
    named = "sub/_c.py; and " + " ".join(f"m{n}.py" for n in range(17)) + "; sub/: _a.py"
    found = rooms["house"](package, named)
    assert "import cycle: pkg.sub._a -> pkg.sub._b" in found
    assert any("17 modules flat in pkg/" in f for f in found)
    assert found[-1] == "pkg/sub/_b.py is not named in ARCHITECTURE.md" and len(found) == 3


def test_the_room_check_finds_another_objects_private_attribute(tmp_path):
    """Issue 33: ``TurnRun`` read 22 private attributes of ``Agent``."""
    rooms = runpy.run_path(str(ROOT / ".ci" / "rooms.py"))
    (tmp_path / "a.py").write_text(
        "class A:\n"
        "    def f(self, agent):\n"
        "        self._x = 1\n"
        "        return agent._inbox\n"
        "    @classmethod\n"
        "    def g(cls):\n"
        "        return cls._y\n"
    )
    found = rooms["breaches"](tmp_path)
    assert len(found) == 1 and "reads agent._inbox" in found[0]


def test_the_public_names_follow_their_one_table():
    """Issue 33: ``__all__`` and the imports type checkers read are written from the
    ``_EXPORTS`` table (``python .ci/exports.py``); this fails when they drift."""
    exports = runpy.run_path(str(ROOT / ".ci" / "exports.py"))
    current = (ROOT / "trio_agent" / "__init__.py").read_text()
    assert exports["generated"](current) == current
    drifted = current.replace(
        '    "Agent": "session",\n', '    "Agent": "session",\n    "Agnet": "session",\n'
    )
    generated = exports["generated"](drifted)
    assert '    "Agnet",\n' in generated.split("\n__all__ = [", 1)[1]
    assert "    from .session import Agnet as Agnet\n" in generated
