"""The types reach users: ``mypy --strict`` passes on the package, on the typed
example app under ``examples/`` and on ``tests/typing/``, whose ignores mark
mistakes the checker must catch (a tool's signature, a provider's keywords)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from paths import ROOT

import trio_agent as ta
from trio_agent import ToolCall


def test_mypy_strict_passes_on_the_package_the_example_and_the_type_checks():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "trio_agent", "examples", "tests/typing"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_the_package_ships_its_type_marker():
    assert (Path(ta.__file__).parent / "py.typed").is_file()


def _members(union: object) -> tuple[type, ...]:
    import typing

    return typing.get_args(union)


def _literal_of(cls: type, field: str) -> object:
    import typing

    hint = typing.get_type_hints(cls)[field]  # ClassVar[Literal["x"]]
    assert typing.get_origin(hint) is typing.ClassVar, (cls, hint)
    (literal,) = typing.get_args(hint)
    assert typing.get_origin(literal) is typing.Literal, (cls, hint)
    (value,) = typing.get_args(literal)
    return value


def test_every_tagged_struct_names_its_tag_as_a_literal_attribute():
    unions = [
        (ta.SessionEvent, "type"),
        (ta.Event, "type"),
        (ta.RunResult, "status"),
        (ta.events.TurnEnd, "reason"),
        (ta.Chunk, "type"),
        (ta.Block, "type"),
        (ta.Message, "role"),
    ]
    for union, field in unions:
        for cls in _members(union):
            tag = cls.__struct_config__.tag
            assert getattr(cls, field) == tag, (cls, field)
            assert _literal_of(cls, field) == tag


def test_a_text_delta_has_a_type_like_its_json():
    import msgspec

    delta = ta.TextDelta("hi")
    assert delta.type == "text_delta"
    assert msgspec.json.decode(msgspec.json.encode(delta))["type"] == delta.type
    assert ToolCall("c", "n", {}).type == "tool_call" and ta.UserMessage("u", "x").role == "user"


def test_the_example_app_runs_offline_and_records_its_session(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "notes_agent.py"), "--ledger-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "-> add_note({'text': 'Note that the demo works'})" in done.stdout
    assert "   ... counting 1 note(s)" in done.stdout  # progress from a plain def tool's thread
    assert "[turn 1: completed, 3 steps]" in done.stdout
    (ledger,) = tmp_path.glob("*.jsonl")
    assert b'"kind":"session/closed"' in ledger.read_bytes()
