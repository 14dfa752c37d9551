"""The room checks of .ci/rooms.py, also as a test: no function over 100 lines, no
module over 650, no underscore name imported across modules."""

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
