"""Human approval on the command line (issue 19, item 6): ``run``/``resume
--approve ask|auto|deny|wait|defer`` for the workspace's write_file, edit_file and
run, and ``approve``/``reject`` from another shell. The CLI runs as a real
subprocess against the loopback OpenAI-compatible server; ``ask`` through a real
pseudo-terminal; ``wait`` in one process while ``approve`` comes from another."""

from __future__ import annotations

import getpass
import json
import os
import pty
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import trio
from cli_runner import ENV, TRIO_AGENT, cli, command, text_stream
from loopback import Reply
from make_fixtures import USAGE, openai_chunk

from trio_agent import Agent, JsonlStore
from trio_agent.testing import ScriptedModel

USER = getpass.getuser()
WAIT = 120  # seconds: only a failing test waits this long (each CLI process takes seconds, loaded)
PROMPT = b"approve? [y]es, [n]o, [e]dit the arguments: "


def calls_stream(*calls: tuple[str, str, dict]) -> bytes:
    """An OpenAI chat stream whose assistant message makes ``calls`` (id, name, args)."""
    chunks = [openai_chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        start = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        chunks.append(openai_chunk({"tool_calls": [start]}))
        args = {"index": index, "function": {"arguments": json.dumps(arguments)}}
        chunks.append(openai_chunk({"tool_calls": [args]}))
    chunks += [openai_chunk({}, "tool_calls"), openai_chunk(usage=USAGE, choices=False)]
    return ("".join(chunks) + "data: [DONE]\n\n").encode()


def call(call_id: str, name: str, arguments: dict) -> Reply:
    return Reply(body=calls_stream((call_id, name, arguments)))


def lines_of(ledger: Path) -> list[dict]:
    return [json.loads(line) for line in ledger.read_bytes().splitlines() if line.strip()]


def decisions(ledger: Path) -> dict[str, dict]:
    """Each ``approval/decided`` record of the ledger, by call id (its fields)."""
    found = {}
    for record in lines_of(ledger):
        if record["kind"] == "approval/decided":
            fields = record.get("decision", record)
            found[fields["call_id"]] = fields
    return found


def dispatched(ledger: Path) -> list[str]:
    """The call ids of the ledger's ``tool/call`` records (a call dispatched)."""
    return [r["call_id"] for r in lines_of(ledger) if r["kind"] == "tool/call"]


def tool_results(request_body: dict) -> dict[str, str]:
    """The tool results a model request carried, by call id."""
    return {
        m["tool_call_id"]: m["content"] if isinstance(m["content"], str) else json.dumps(m)
        for m in request_body["messages"]
        if m["role"] == "tool"
    }


class Reader:
    """What a stream showed (``text``), read on demand until a pattern comes, each
    search starting where the last match ended."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.data = bytearray()
        self.at = 0

    async def _more(self) -> bytes:
        try:
            return await self.stream.receive_some(4096)
        except trio.BrokenResourceError:  # EIO: the child closed the terminal
            return b""

    async def expect(self, pattern: bytes) -> None:
        while (match := re.compile(pattern).search(bytes(self.data), self.at)) is None:
            data = await self._more()
            if not data:
                raise AssertionError(f"closed before {pattern!r}: {bytes(self.data)!r}")
            self.data += data
        self.at = match.end()

    async def rest(self) -> None:
        while data := await self._more():
            self.data += data

    @property
    def text(self) -> str:
        return bytes(self.data).replace(b"\r\n", b"\n").decode()


async def run_at_a_terminal(argv: list[str]) -> tuple[trio.Process, Any, Reader]:
    """Start the CLI with a pseudo-terminal as its stdin and stdout (a person at it)."""
    parent, child = pty.openpty()
    process = await trio.lowlevel.open_process(
        argv,
        stdin=child,
        stdout=child,
        stderr=subprocess.PIPE,
        env={**ENV, "TERM": "dumb"},
    )
    os.close(child)
    stream = trio.lowlevel.FdStream(parent)
    return process, stream, Reader(stream)


async def test_ask_at_a_terminal_approves_rejects_and_edits(loopback, tmp_path):
    """On a terminal (the default there), each held call is shown with its
    arguments and decided by y / n / e; bad JSON and arguments that do not fit
    the tool are refused and asked again; the decisions are in the ledger, by
    the OS user, and the session goes on to the end."""
    ws = tmp_path / "ws"
    ws.mkdir()
    ledger = tmp_path / "asked.jsonl"
    loopback.replies += [
        call("call_1", "write_file", {"path": "a.txt", "content": "A"}),
        call("call_2", "write_file", {"path": "b.txt", "content": "B"}),
        call("call_3", "run", {"command": "echo model >> c.txt"}),
        Reply(body=text_stream("all done")),
    ]
    process, stream, terminal = await run_at_a_terminal(
        command(loopback, ws, "run", "--ledger", str(ledger), "write things")
    )
    edit_prompt = rb"the arguments as one line of JSON \(Enter: the model's\): "

    async def answer(text: str) -> None:
        await stream.send_all(text.encode() + b"\n")

    with trio.fail_after(WAIT):
        # call_1: shown with its arguments, approved
        await terminal.expect(rb"approval needed: write_file \[call_1\]")
        await terminal.expect(re.escape(PROMPT))
        await answer("y")
        # call_2: something else first (asked again), then rejected, with a reason
        await terminal.expect(rb"approval needed: write_file \[call_2\]")
        await terminal.expect(re.escape(PROMPT))
        await answer("maybe")
        await terminal.expect(rb"please answer y, n or e")
        await terminal.expect(re.escape(PROMPT))
        await answer("n")
        await terminal.expect(rb"why \(sent to the model; Enter: no reason\): ")
        await answer("not b")
        # call_3: edited, through bad JSON and arguments the tool refuses, then approved
        await terminal.expect(rb"approval needed: run \[call_3\]")
        await terminal.expect(re.escape(PROMPT))
        await answer("e")
        await terminal.expect(edit_prompt)
        await answer("{oops")
        await terminal.expect(rb"not JSON \(")
        await terminal.expect(edit_prompt)
        await answer('{"cmd": "echo x"}')
        await terminal.expect(rb"Object missing required field `command`")
        await terminal.expect(edit_prompt)
        await answer('{"command": "echo edited >> c.txt"}')
        await terminal.expect(rb"run would run with:")
        await terminal.expect(re.escape(PROMPT))
        await answer("y")
        await terminal.rest()
        code = await process.wait()
    await stream.aclose()
    errors = await process.stderr.receive_some()
    await process.stderr.aclose()
    out = terminal.text
    assert code == 0, (out, errors)

    # what the terminal showed
    assert '  {\n    "path": "a.txt",\n    "content": "A"\n  }\n' in out
    assert f"[approved by {USER}] write_file [call_1]" in out
    assert f"[rejected by {USER}: not b] write_file [call_2]" in out
    assert f"[approved by {USER}] run [call_3]" in out
    assert '"command": "echo edited >> c.txt"' in out
    assert "all done" in out and "[turn 4 completed" in out

    # what ran: the approved calls once each, the edited one as edited
    assert (ws / "a.txt").read_text() == "A"
    assert not (ws / "b.txt").exists()
    assert (ws / "c.txt").read_text() == "edited\n"
    assert dispatched(ledger) == ["call_1", "call_3"]

    # who decided, and what, is in the ledger
    decided = decisions(ledger)
    assert {k: (d["approved"], d["by"]) for k, d in decided.items()} == {
        "call_1": (True, USER),
        "call_2": (False, USER),
        "call_3": (True, USER),
    }
    assert decided["call_2"]["reason"] == "not b"
    assert decided["call_3"]["arguments"] == {"command": "echo edited >> c.txt"}
    assert decided["call_1"].get("arguments") is None

    # and the model read the rejection
    results = tool_results(loopback.requests[2].json())
    assert f"rejected by {USER}: not b" in results["call_2"]


async def test_ask_when_stdin_ends_leaves_the_calls_held(loopback, tmp_path):
    ledger = tmp_path / "eof.jsonl"
    loopback.replies.append(call("call_1", "write_file", {"path": "a.txt", "content": "A"}))
    done = await trio.run_process(
        command(loopback, tmp_path, "run", "--approve", "ask", "--ledger", str(ledger), "x"),
        stdin=subprocess.DEVNULL,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=ENV,
    )
    out = done.stdout.decode()
    assert done.returncode == 3, (out, done.stderr)
    assert "stdin ended" in out and "1 call(s) wait for approval:" in out
    assert f"trio-agent approve {ledger} call_1" in out
    assert not (tmp_path / "a.txt").exists() and decisions(ledger) == {}


async def test_deny_is_the_default_off_a_terminal(loopback, tmp_path):
    """stdin is no terminal: every call that writes or runs is rejected, the model
    is told why, and the turn goes on; a call that only reads runs."""
    ledger = tmp_path / "denied.jsonl"
    loopback.replies += [
        Reply(
            body=calls_stream(
                ("call_1", "list_dir", {}),
                ("call_2", "write_file", {"path": "a.txt", "content": "A"}),
                ("call_3", "run", {"command": "touch ran"}),
            )
        ),
        Reply(body=text_stream("understood")),
    ]
    done = await cli(command(loopback, tmp_path, "run", "--ledger", str(ledger), "try"))
    out = done.stdout.decode()
    assert done.returncode == 0, (out, done.stderr)
    assert "-? write_file(" in out and "waits for approval [call_2]" in out
    assert f"[rejected by {USER}: denied by the command line] run [call_3]" in out
    assert "understood" in out
    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "ran").exists()
    assert dispatched(ledger) == ["call_1"]
    decided = decisions(ledger)
    assert {k: (d["approved"], d["reason"]) for k, d in decided.items()} == {
        "call_2": (False, "denied by the command line"),
        "call_3": (False, "denied by the command line"),
    }
    results = tool_results(loopback.requests[1].json())
    assert list(results) == ["call_1", "call_2", "call_3"]  # in call order
    assert "denied by the command line" in results["call_2"]


async def test_a_model_that_keeps_calling_a_denied_tool_stops_at_max_steps(loopback, tmp_path):
    ledger = tmp_path / "loop.jsonl"
    loopback.replies += [
        call(f"call_{n}", "write_file", {"path": "a.txt", "content": "A"}) for n in (1, 2, 3)
    ]
    flags = ["--approve", "deny", "--max-steps", "2", "--ledger", str(ledger)]
    done = await cli(command(loopback, tmp_path, "run", *flags, "x"))
    out = done.stdout.decode()
    assert done.returncode == 3, (out, done.stderr)
    assert "stopped: this command's turns made 2 model request(s) (--max-steps 2)" in out
    assert "call_2 write_file(" in out and len(loopback.requests) == 2
    assert list(decisions(ledger)) == ["call_1"]  # call_2 is left held, undecided


async def test_auto_asks_nobody(loopback, tmp_path):
    loopback.replies += [
        call("call_1", "write_file", {"path": "a.txt", "content": "A"}),
        Reply(body=text_stream("ok")),
    ]
    done = await cli(command(loopback, tmp_path, "run", "--approve", "auto", "x"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.txt").read_text() == "A"
    assert b"waits for approval" not in done.stdout


async def test_wait_and_defer_need_a_ledger(loopback, tmp_path):
    for mode in ("wait", "defer"):
        done = await cli(command(loopback, tmp_path, "run", "--approve", mode, "x"))
        assert done.returncode == 2
        assert f"--approve {mode} needs --ledger" in done.stderr.decode()
    assert loopback.requests == []


async def test_defer_then_approve_and_reject_from_the_shell_then_resume(loopback, tmp_path):
    ledger = tmp_path / "deferred.jsonl"
    loopback.replies.append(
        Reply(
            body=calls_stream(
                ("call_1", "write_file", {"path": "a.txt", "content": "model's"}),
                ("call_2", "write_file", {"path": "b.txt", "content": "B"}),
                ("call_3", "run", {"command": "touch ran"}),
            )
        )
    )
    done = await cli(
        command(loopback, tmp_path, "run", "--approve", "defer", "--ledger", str(ledger), "x")
    )
    out = done.stdout.decode()
    assert done.returncode == 3, (out, done.stderr)
    assert "3 call(s) wait for approval:" in out
    assert '  call_1 write_file({"path":"a.txt","content":"model\'s"})' in out
    for line in (
        f"  trio-agent approve {ledger} call_1",
        f"  trio-agent reject {ledger} call_2 --reason TEXT",
        f"  trio-agent resume {ledger}",
    ):
        assert line in out.splitlines()
    assert decisions(ledger) == {}

    async def decide(*args: str) -> subprocess.CompletedProcess:
        return await cli([*TRIO_AGENT, *args])

    # refusals, with exit code 2 and nothing written
    before = ledger.read_bytes()
    unknown = await decide("approve", str(ledger), "call_9")
    assert unknown.returncode == 2
    assert "session deferred has no call 'call_9'; waiting now: call_1, call_2, call_3" in (
        unknown.stderr.decode()
    )
    bad = await decide(
        "approve", str(ledger), "call_1", "--arguments", '{"path": 3, "content": "x"}'
    )
    assert bad.returncode == 2 and "--arguments: Expected `string`, got `integer`" in (
        bad.stderr.decode()
    )
    not_json = await decide("approve", str(ledger), "call_1", "--arguments", "{")
    assert not_json.returncode == 2 and "not JSON" in not_json.stderr.decode()
    # the session has a writer: said so
    store = JsonlStore(tmp_path)
    holder = await Agent.resume(store, "deferred", model=ScriptedModel([]))
    try:
        locked = await decide("approve", str(ledger), "call_1")
    finally:
        await holder.aclose()
    assert locked.returncode == 2
    assert "session deferred is being written by a running process" in locked.stderr.decode()
    assert decisions(ledger) == {}
    before = ledger.read_bytes()

    # approve call_1 with edited arguments, reject call_2; leave call_3 undecided
    edited = json.dumps({"path": "a.txt", "content": "edited"})
    approved = await decide("approve", str(ledger), "call_1", "--by", "ann", "--arguments", edited)
    assert approved.returncode == 0, approved.stderr
    text = approved.stdout.decode()
    assert "approved by ann: call_1 write_file(" in text
    assert "still waiting for approval: 2 call(s)" in text
    again = await decide("approve", str(ledger), "call_1")
    assert again.returncode == 2
    assert "call 'call_1' was already approved by ann at " in again.stderr.decode()
    rejected = await decide("reject", str(ledger), "call_2", "--reason", "no b", "--by", "bob")
    assert rejected.returncode == 0, rejected.stderr
    assert "rejected by bob (no b): call_2" in rejected.stdout.decode()
    assert ledger.read_bytes().startswith(before)  # appended to, nothing rewritten
    decided = decisions(ledger)
    assert decided["call_1"]["by"] == "ann" and decided["call_1"]["approved"] is True
    assert decided["call_1"]["arguments"] == {"path": "a.txt", "content": "edited"}
    assert decided["call_2"]["by"] == "bob" and decided["call_2"]["reason"] == "no b"
    assert not (tmp_path / "a.txt").exists()  # nothing runs before the session goes on

    # resume (no terminal: deny) runs call_1, answers call_2, denies call_3, goes on
    loopback.replies.append(Reply(body=text_stream("finished")))
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger), "--base-url", f"{loopback.url}/v1"])
    out = resumed.stdout.decode()
    assert resumed.returncode == 0, (out, resumed.stderr)
    assert "[approved by ann] write_file [call_1]" in out
    assert "[rejected by bob: no b] write_file [call_2]" in out
    assert f"[rejected by {USER}: denied by the command line] run [call_3]" in out
    assert "finished" in out
    assert (tmp_path / "a.txt").read_text() == "edited"
    assert not (tmp_path / "b.txt").exists() and not (tmp_path / "ran").exists()
    assert dispatched(ledger) == ["call_1"]
    results = tool_results(loopback.requests[1].json())
    assert list(results) == ["call_1", "call_2", "call_3"]
    assert "rejected by bob: no b" in results["call_2"]

    # nothing waits now
    late = await decide("reject", str(ledger), "call_3")
    assert late.returncode == 2
    assert "call 'call_3' of session deferred is not waiting for approval" in (late.stderr.decode())


async def test_wait_lets_the_session_go_and_goes_on_once_another_process_decides(
    loopback, tmp_path
):
    """``run --approve wait`` lets the session go while it waits, so ``approve``
    from a second process can record the decision; the first then takes the
    session up again and runs the call, once."""
    ledger = tmp_path / "waited.jsonl"
    loopback.replies += [
        call("call_1", "run", {"command": "echo ran >> log.txt"}),
        Reply(body=text_stream("logged")),
    ]
    process = await trio.lowlevel.open_process(
        command(loopback, tmp_path, "run", "--approve", "wait", "--ledger", str(ledger), "log"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    output = Reader(process.stdout)
    with trio.fail_after(WAIT):
        await output.expect(rb"waiting for the decisions")
        assert f"  trio-agent approve {ledger} call_1\n" in output.text
        await trio.sleep(0.3)  # it polls, undecided, meanwhile
        assert process.poll() is None and not (tmp_path / "log.txt").exists()
        approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1", "--by", "carol"])
        assert approved.returncode == 0, approved.stderr
        assert "goes on by itself" in approved.stdout.decode()
        await output.rest()
        code = await process.wait()
    errors = await process.stderr.receive_some()
    await process.stdout.aclose()
    await process.stderr.aclose()
    out = output.text
    assert code == 0, (out, errors)
    assert "decided: going on" in out
    assert "[approved by carol] run [call_1]" in out and "logged" in out
    assert (tmp_path / "log.txt").read_text() == "ran\n"  # ran exactly once
    assert dispatched(ledger) == ["call_1"]
    assert decisions(ledger)["call_1"]["by"] == "carol"
    kinds = [r["kind"] for r in lines_of(ledger)]
    assert kinds.count("session/closed") == 3  # run let it go, approve, run again
    assert kinds[-1] == "session/closed"


async def test_ctrl_c_at_the_question_leaves_the_call_held_and_the_session_closed(
    loopback, tmp_path
):
    ledger = tmp_path / "cut.jsonl"
    loopback.replies.append(call("call_1", "write_file", {"path": "a.txt", "content": "A"}))
    process, stream, terminal = await run_at_a_terminal(
        command(loopback, tmp_path, "run", "--ledger", str(ledger), "x")
    )
    with trio.fail_after(WAIT):
        await terminal.expect(re.escape(PROMPT))
        process.send_signal(signal.SIGINT)
        await terminal.rest()
        code = await process.wait()
    await stream.aclose()
    await process.stderr.aclose()
    assert code == 130
    assert "interrupted: 1 call(s) still wait for approval; the ledger is closed and valid" in (
        terminal.text
    )
    assert lines_of(ledger)[-1]["kind"] == "session/closed" and decisions(ledger) == {}
    # the session is free: another shell decides
    approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1", "--by", "dan"])
    assert approved.returncode == 0, approved.stderr
    assert decisions(ledger)["call_1"]["by"] == "dan"
    assert not (tmp_path / "a.txt").exists()
