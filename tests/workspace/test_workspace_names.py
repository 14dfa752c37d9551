"""Names that are not UTF-8 in the workspace (issue 12, item 15): direct results and
tool results carry U+FFFD, never a lone surrogate."""

from __future__ import annotations

import os

import pytest
from helpers import call, user

from trio_agent import ToolResultMessage, run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.workspace import Workspace

pytestmark = pytest.mark.usefixtures("sandbox_mode")  # each test in both modes


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root, run_seconds=10, grace_seconds=0.5)


def make_non_utf8_names(workspace) -> None:
    root = os.fsencode(workspace.root)
    for name in (b"caf\xe9", b"sub/na\xefve.txt"):
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_WRONLY)
        os.write(fd, b"needle here\n")
        os.close(fd)


async def test_regression_direct_workspace_results_have_no_lone_surrogates(workspace):
    """Issue 12 item 15: ``list_dir`` returned a name that is not UTF-8 with a lone surrogate, text
    that cannot be encoded (only the tool path cleaned it); a regex grep failed to encode its
    request to the child."""
    make_non_utf8_names(workspace)
    results = {
        "list_dir": await workspace.list_dir("."),
        "list_dir sub": await workspace.list_dir("sub"),
        "glob": await workspace.glob("**"),
        "grep": await workspace.grep("needle"),
        "regex grep": await workspace.grep("need+le", regex=True),
        "write": await workspace.write_file("caf\udce9.md", "x"),
        "edit": await workspace.edit_file("caf\udce9.md", "x", "y"),
    }
    for name, text in results.items():
        text.encode("utf-8")  # raises on a lone surrogate
        assert "\ufffd" in text, name
    assert results["list_dir"] == "caf\ufffd\nsub/"
    assert results["grep"] == "caf\ufffd:1: needle here\nsub/na\ufffdve.txt:1: needle here"
    assert results["regex grep"] == results["grep"]


async def test_regression_tool_results_for_names_not_utf8_encode(workspace):
    """Issue 12 item 15: the tools' results for names that are not UTF-8 encode, with U+FFFD where
    the bytes were."""
    make_non_utf8_names(workspace)
    calls = [
        call("list_dir", "c1", {"path": "."}),
        call("glob", "c2", {"pattern": "**"}),
        call("grep", "c3", {"pattern": "needle"}),
        call("grep", "c4", {"pattern": "need+le", "regex": True}),
    ]
    model = ScriptedModel([scripted_response("r1", calls), scripted_response("r2", "done")])
    result = await run_agent_loop(
        messages=[user()], model=model, tools=workspace.tools(), max_steps=4
    ).wait()
    assert result.status == "completed"
    answers = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [a.is_error for a in answers] == [False] * 4, [a.content for a in answers]
    for answer in answers:
        answer.content.encode("utf-8")
        assert "caf\ufffd" in answer.content


async def test_a_name_with_a_newline_is_listed_as_one_name_not_two(workspace):
    """A file named ``notes\\nsecret.txt`` was listed by ``list_dir``, ``glob`` and ``grep``
    as two lines, ``notes`` and ``secret.txt``: names that do not exist, and none that does.
    A name with a control character or line separator (or a leading quote) is shown as a
    JSON string, whose value reads the file."""
    import json

    for name in ("notes\nsecret.txt", "tab\there", '"quoted"', "sep\u2028x"):
        (workspace.root / name).write_text("needle\n")
    listed = (await workspace.list_dir(".")).split("\n")
    assert listed == ['"\\"quoted\\""', '"notes\\nsecret.txt"', '"sep\\u2028x"', '"tab\\there"']
    assert (await workspace.glob("*")).split("\n") == listed
    found = (await workspace.grep("needle")).split("\n")
    assert found == [f"{name}:1: needle" for name in listed]
    for shown in listed:
        assert await workspace.read_file(json.loads(shown)) == "needle\n"
