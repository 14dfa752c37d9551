"""A new user's mistakes and a hostile terminal, each a real ``trio-agent``
subprocess: a clear one-line error and the documented exit code, never a
traceback, and the recorded session kept."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cli_runner import ENV, cli

SCRIPT = [str(Path(sys.executable).parent / "trio-agent")]


async def test_an_agent_module_with_a_syntax_error_is_named_at_its_own_file_and_line(tmp_path):
    """A module given to ``--agent`` that does not compile is named at its own file
    and line (the bug: the error said it was raised in the command line's own
    ``_app.py``, the innermost frame of the import)."""
    (tmp_path / "typo.py").write_text("x = 1\n\ndef f(:\n    pass\n")
    done = await cli([*SCRIPT, "run", "--agent", "typo:agent", "x"], cwd=tmp_path)
    error = done.stderr.decode().splitlines()[-1]
    assert done.returncode == 2
    assert error.startswith("trio-agent run: error: --agent typo:agent: importing typo raised ")
    assert error.endswith(f"(at {tmp_path / 'typo.py'}:3)"), error
    assert "_app.py" not in error and "Traceback" not in done.stderr.decode()


UNICODE_APP = """
from trio_agent import Agent, ModelRequest
from trio_agent.testing import CallableModel, scripted_response


def answer(request: ModelRequest):
    return scripted_response(request.id, "caf\\u00e9 \\u2713 \\U0001f389")


agent = Agent(model=CallableModel(answer), system="s")
"""


async def test_a_terminal_that_cannot_encode_the_text_gets_it_escaped_and_json_stays_json(
    tmp_path,
):
    """On a terminal whose encoding cannot show the text (ASCII, Latin-1), ``run``,
    ``show`` and their ``--json`` lines print it escaped as ``\\uXXXX`` (still
    valid JSON, decoding to the text), and the command ends as its turn did (the
    bug: the first such character ended the command with exit 2 and the codec's
    error, as if the user had misused it)."""
    import json

    (tmp_path / "uni.py").write_text(UNICODE_APP)
    env = {**ENV, "PYTHONIOENCODING": "ascii"}
    ran = await cli(
        [*SCRIPT, "run", "--agent", "uni:agent", "--ledger", "u.jsonl", "na\u00efve?"],
        env=env,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    out = ran.stdout.decode("ascii")
    assert "user: na\\u00efve?" in out
    assert "caf\\u00e9 \\u2713 \\ud83c\\udf89" in out
    shown = await cli([*SCRIPT, "show", "u.jsonl"], env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "assistant: caf\\u00e9 \\u2713 \\ud83c\\udf89" in shown.stdout.decode("ascii")
    for args in (["show", "--json", "u.jsonl"], ["run", "--agent", "uni:agent", "--json", "x"]):
        done = await cli([*SCRIPT, *args], env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.decode("ascii").splitlines()]
        assert "caf\u00e9 \u2713 \U0001f389" in json.dumps(lines, ensure_ascii=False)


HOLDING_APP = '''
from trio_agent import Agent, ModelRequest, ToolCall, tool
from trio_agent.testing import CallableModel, scripted_response


@tool(requires_approval=True)
async def refund(amount: int) -> str:
    """Refund an amount (needs a yes)."""
    return f"refunded {amount}"


def answer(request: ModelRequest):
    if request.messages[-1].role == "user":
        return scripted_response(request.id, [ToolCall("c1", "refund", {"amount": 5})])
    return scripted_response(request.id, "done")


agent = Agent(model=CallableModel(answer), tools=[refund], system="s")
'''


def _into_a_closed_pipe(args: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run ``trio-agent ARGS`` with stdout a pipe whose reader has gone (``| head``
    once it has read its line): the exit code and stderr."""
    import subprocess

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [*SCRIPT, *args], stdout=write, stderr=subprocess.PIPE, cwd=cwd, env=ENV, check=False
        )
    finally:
        os.close(write)
    return done.returncode, done.stderr


async def test_a_reader_that_went_away_stops_the_printing_quietly_and_the_work_stands(tmp_path):
    """``show``, ``schema``, ``fork`` and ``approve`` into a pipe whose reader went
    away (``| head -1``) stop printing quietly and exit 0, the fork made and the
    decision recorded (the bug: each said "[Errno 32] Broken pipe" and exited 2,
    bad usage, though ``approve`` had recorded its decision and ``fork`` made its
    session)."""
    from trio_agent.ledger import derive
    from trio_agent.stores import parse_jsonl

    (tmp_path / "hold.py").write_text(HOLDING_APP)
    ran = await cli(
        [*SCRIPT, "run", "--agent", "hold:agent", "--ledger", "h.jsonl", "--approve", "defer", "x"],
        cwd=tmp_path,
    )
    assert ran.returncode == 3, ran.stderr
    for args in (
        ["show", "h.jsonl"],
        ["show", "--json", "h.jsonl"],
        ["schema"],
        ["fork", "h.jsonl", "--at-turn", "0", "--new-id", "f1"],
        ["approve", "h.jsonl", "c1", "--by", "ann"],
    ):
        code, stderr = _into_a_closed_pipe(args, tmp_path)
        assert (code, stderr) == (0, b""), args
    assert (tmp_path / "f1.jsonl").exists()
    derived = derive(parse_jsonl("h", (tmp_path / "h.jsonl").read_bytes()).records)
    assert derived.decisions["c1"].approved and derived.decisions["c1"].by == "ann"


async def test_approve_arguments_nested_too_deeply_are_a_usage_error_and_nothing_is_recorded(
    tmp_path,
):
    """``approve --arguments`` with JSON nested past the reader's bound is a usage
    error (exit 2) and the ledger is left as it was (the bug: the reader's
    RecursionError escaped as a traceback, exit 1)."""
    (tmp_path / "hold.py").write_text(HOLDING_APP)
    ran = await cli(
        [*SCRIPT, "run", "--agent", "hold:agent", "--ledger", "h.jsonl", "--approve", "defer", "x"],
        cwd=tmp_path,
    )
    assert ran.returncode == 3, ran.stderr
    before = (tmp_path / "h.jsonl").read_bytes()
    deep = '{"a": ' * 3000 + "1" + "}" * 3000
    done = await cli([*SCRIPT, "approve", "h.jsonl", "c1", "--arguments", deep], cwd=tmp_path)
    assert done.returncode == 2
    assert "argument --arguments: not JSON" in done.stderr.decode()
    assert b"Traceback" not in done.stderr
    assert (tmp_path / "h.jsonl").read_bytes() == before


async def test_an_agent_module_that_exits_as_it_is_imported_is_a_usage_error_naming_it(
    tmp_path,
):
    """A module given to ``--agent`` that calls ``sys.exit`` as it is imported (a
    script's ``sys.exit(main())`` left unguarded) is a usage error naming where
    (the bug: the command quietly exited with the module's code, 0 here, as if
    the task had run)."""
    (tmp_path / "script.py").write_text("import sys\n\nsys.exit(0)\n")
    done = await cli([*SCRIPT, "run", "--agent", "script:agent", "x"], cwd=tmp_path)
    error = done.stderr.decode().splitlines()[-1]
    assert done.returncode == 2
    assert error == (
        "trio-agent run: error: --agent script:agent: importing script raised SystemExit: 0 "
        f"(at {tmp_path / 'script.py'}:3)"
    )


async def test_a_session_not_there_or_not_free_is_a_usage_error_for_every_command(tmp_path):
    """Review of issue 38: the exit code for one mistake depended on the command:
    an unknown session was 2 for ``show`` and 1 for ``fork``, a session another
    process writes 2 for ``approve`` and 1 for ``resume``. Both are usage errors
    (2), each naming the session, for every command."""
    from trio_agent import Agent, JsonlStore
    from trio_agent.testing import CallableModel

    (tmp_path / "uni.py").write_text(UNICODE_APP)
    ran = await cli(
        [*SCRIPT, "run", "--agent", "uni:agent", "--ledger", "ledgers/s.jsonl", "hi"],
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    for command in (["fork", "--at-turn", "1"], ["show"]):
        done = await cli([*SCRIPT, *command, "--store", "ledgers", "nosuch"], cwd=tmp_path)
        said = done.stderr.decode()
        assert done.returncode == 2 and "no session 'nosuch'" in said, (command, said)
        assert "Traceback" not in said
    held = await Agent.resume(JsonlStore(tmp_path / "ledgers"), "s", model=CallableModel(print))
    try:  # this process writes the session now
        done = await cli(
            [*SCRIPT, "resume", "--agent", "uni:agent", "--message", "again", "ledgers/s.jsonl"],
            cwd=tmp_path,
        )
    finally:
        await held.aclose()
    said = done.stderr.decode()
    assert done.returncode == 2 and "session 's' already has a writer" in said, said
    assert "Traceback" not in said


async def test_regression_a_lease_shorter_than_its_renewals_is_a_usage_error_naming_the_flag(
    tmp_path,
):
    """``worker --lease-seconds 0.5`` got past the command line and failed in the store
    naming its ``lease_seconds`` parameter, which a user of the command never typed:
    it is a usage error naming ``--lease-seconds`` and the bound, before any
    connection."""
    done = await cli(
        [*SCRIPT, "worker", "--lease-seconds", "0.5", "--dsn", "postgresql:///none"],
        cwd=tmp_path,
    )
    error = done.stderr.decode().splitlines()[-1]
    assert done.returncode == 2
    assert "argument --lease-seconds: at least 1 second is needed" in error, error
