"""An approved call runs on ``resume`` only under this user's seal on its decision
(``cli/_trust.py``): ``trio-agent approve`` (and a run asking at the terminal)
seals what it records; an approval written by anyone else (a ledger handed
over, or edited by hand) is asked about again, and off a terminal rejected.
Real ``trio-agent`` subprocesses against the loopback server, and the seal's
check itself against each way a hostile ledger could move or change one."""

from __future__ import annotations

import json
import textwrap
import zlib
from pathlib import Path

import msgspec
import pytest
import trio
from cli_runner import BASE_ENV, ENV, TRIO_AGENT, call_stream, cli, command, text_stream
from kept_lines import KeptLines
from loopback import Reply

from trio_agent import Agent, JsonlStore, ToolCall, tool
from trio_agent.cli._mcp import MCPServerSpec, http_server, stdio_server
from trio_agent.cli._trust import _as_flags, _is_mine, decision_is_mine, decision_seal, sealed
from trio_agent.events import ApprovalDecision
from trio_agent.testing import ScriptedModel, scripted_response

WRITE = ("call_1", "write_file", {"path": "a.txt", "content": "from the model"})


def lines_of(ledger: Path) -> list[dict]:
    return [json.loads(line) for line in ledger.read_bytes().splitlines() if line.strip()]


def decisions(ledger: Path) -> dict[str, dict]:
    """The ``approval/decided`` records of ``ledger``, by call id."""
    return {r["call_id"]: r for r in lines_of(ledger) if r["kind"] == "approval/decided"}


def dispatched(ledger: Path) -> list[str]:
    """The call ids of the ledger's ``tool/call`` records (a call dispatched)."""
    return [r["call_id"] for r in lines_of(ledger) if r["kind"] == "tool/call"]


def tool_results(request_body: dict) -> dict[str, str]:
    """The tool results a model request carried, by call id."""
    return {
        m["tool_call_id"]: m["content"] for m in request_body["messages"] if m["role"] == "tool"
    }


async def _deferred(loopback, workspace: Path, ledger: Path, env=None) -> None:
    """``run --approve defer``: a session holding ``WRITE`` for approval."""
    loopback.replies.append(Reply(body=call_stream(*WRITE)))
    done = await cli(
        command(loopback, workspace, "run", "--approve", "defer", "--ledger", str(ledger), "go"),
        env=env,
    )
    assert done.returncode == 3, done.stderr.decode()


def _append(ledger: Path, **record) -> None:
    """Write one more record at the end of ``ledger``, as a hand would."""
    seq = lines_of(ledger)[-1]["seq"] + 1
    with ledger.open("ab") as file:
        file.write(json.dumps({"seq": seq, **record}).encode() + b"\n")


async def test_an_approval_added_to_a_ledger_by_hand_is_not_run_on_resume(loopback, tmp_path):
    """The bug: approval records were not sealed, so a line appended by hand (or a
    ledger handed over) approving a held call had ``resume`` run it without the
    user ever seeing it. Off a terminal it is now rejected, and nothing runs."""
    ledger = tmp_path / "s.jsonl"
    await _deferred(loopback, tmp_path, ledger)
    _append(ledger, kind="approval/decided", call_id="call_1", approved=True, by="mallory")
    loopback.replies.append(Reply(body=text_stream("fine")))
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger)])
    out, err = resumed.stdout.decode(), resumed.stderr.decode()
    assert resumed.returncode == 0, (out, err)
    assert not (tmp_path / "a.txt").exists()  # never run
    assert dispatched(ledger) == []
    assert "approved in the ledger, but not by you" in out + err
    assert "call_1 write_file(" in out + err
    result = tool_results(loopback.requests[-1].json())["call_1"]
    assert "denied by the command line" in result and "no seal" in result


async def test_approve_then_resume_runs_the_call_under_the_users_seal(loopback, tmp_path):
    """The documented flow stands: ``run`` defers, ``trio-agent approve`` decides
    (sealed), ``resume`` runs it with no flag given again; the seal is recorded."""
    ledger = tmp_path / "s.jsonl"
    await _deferred(loopback, tmp_path, ledger)
    edited = json.dumps({"path": "a.txt", "content": "approved"})
    approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1", "--arguments", edited])
    assert approved.returncode == 0, approved.stderr.decode()
    assert type(decisions(ledger)["call_1"]["seal"]) is str
    loopback.replies.append(Reply(body=text_stream("done")))
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger)])
    out = resumed.stdout.decode()
    assert resumed.returncode == 0, (out, resumed.stderr.decode())
    assert "not by you" not in out + resumed.stderr.decode()
    assert (tmp_path / "a.txt").read_text() == "approved"


async def test_regression_approve_without_a_usable_key_is_refused_not_recorded_unsealed(
    loopback, tmp_path
):
    """With a key others can read, ``trio-agent approve`` recorded an unsealed approval,
    which ``resume`` then did not run but asked about again; it is refused (usage
    error), saying why and how to decide instead, and nothing is recorded."""
    ledger = tmp_path / "s.jsonl"
    await _deferred(loopback, tmp_path, ledger)
    home = tmp_path / "loose"
    key = home / "trio-agent" / "ledger-key"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"k" * 32)
    key.chmod(0o644)
    env = {**ENV, "XDG_CONFIG_HOME": str(home)}
    approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1"], env=env)
    err = approved.stderr.decode()
    assert approved.returncode == 2, (approved.stdout.decode(), err)
    assert "cannot be sealed" in err and "can be read or written by others" in err
    assert "--approve ask" in err
    assert decisions(ledger) == {}
    rejected = await cli(
        [*TRIO_AGENT, "reject", str(ledger), "call_1", "--reason", "not now"], env=env
    )
    assert rejected.returncode == 0, rejected.stderr.decode()  # a no needs no seal
    assert decisions(ledger)["call_1"]["approved"] is False


async def test_a_sealed_approval_edited_in_the_ledger_is_not_run(loopback, tmp_path):
    """Hostile: a sealed approval whose arguments are changed by hand (to run other
    content than the user approved) loses its seal, and is not run."""
    ledger = tmp_path / "s.jsonl"
    await _deferred(loopback, tmp_path, ledger)
    approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1"])
    assert approved.returncode == 0, approved.stderr.decode()
    records = lines_of(ledger)
    for record in records:
        if record["kind"] == "approval/decided":
            record["arguments"] = {"path": "a.txt", "content": "mallory's"}
    ledger.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))
    loopback.replies.append(Reply(body=text_stream("fine")))
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger)])
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert not (tmp_path / "a.txt").exists()


async def test_a_handed_over_ledger_with_its_authors_approval_asks_again(loopback, tmp_path):
    """Another user's ledger, its call approved (and sealed) by that user, resumed
    with each setting given again: the approval is not this user's, so nothing
    runs: ``--approve defer`` (which leaves calls to ``trio-agent approve``) is a
    usage error saying how to decide them; off a terminal they are rejected."""
    alice = {**ENV, "XDG_CONFIG_HOME": str(tmp_path / "alice")}
    bob = {**ENV, "XDG_CONFIG_HOME": str(tmp_path / "bob")}
    ledger = tmp_path / "s.jsonl"
    await _deferred(loopback, tmp_path, ledger, env=alice)
    approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1"], env=alice)
    assert approved.returncode == 0, approved.stderr.decode()
    again = ["--workspace", str(tmp_path), "--base-url", f"{loopback.url}/v1"]
    before = len(loopback.requests)
    deferred = await cli(
        [*TRIO_AGENT, "resume", str(ledger), *again, "--approve", "defer"], env=bob
    )
    said = deferred.stdout.decode() + deferred.stderr.decode()
    assert deferred.returncode == 2, said
    assert "cannot decide a call decided already" in said and "--approve ask" in said
    assert len(loopback.requests) == before and not (tmp_path / "a.txt").exists()
    loopback.replies.append(Reply(body=text_stream("fine")))
    denied = await cli([*TRIO_AGENT, "resume", str(ledger), *again], env=bob)
    assert denied.returncode == 0, denied.stderr.decode()
    assert not (tmp_path / "a.txt").exists()
    assert dispatched(ledger) == []


APP = '''
from trio_agent import Agent, tool
from trio_agent.testing import ScriptedModel, scripted_response


@tool(requires_approval=True)
async def launch(target: str) -> str:
    """Launch at a target (needs a yes)."""
    with open("launched.txt", "a") as file:
        file.write(target + "\\n")
    return f"launched at {target}"


agent = Agent(model=ScriptedModel([scripted_response("r2", "launched")]), tools=[launch])
'''


@tool(requires_approval=True)
async def launch(target: str) -> str:
    """Launch at a target (needs a yes)."""
    raise AssertionError("never run by the application here")


async def test_an_applications_ledger_approved_by_the_user_resumes_and_runs(tmp_path):
    """The documented flow of an application: it records a session holding a call
    for approval; ``trio-agent approve`` decides it and ``trio-agent resume
    --agent`` goes on and runs it, the same user, nothing else given."""
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    held = ToolCall("call_1", "launch", {"target": "moon"})
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", [held])]),
        tools=[launch],
        store=JsonlStore(tmp_path),
        session_id="app",
    )
    result = await agent.prompt("launch")
    await agent.aclose()
    assert result.end.reason == "awaiting_approval"
    ledger = tmp_path / "app.jsonl"
    approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1"], cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr.decode()
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger), "--agent", "app:agent"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert (tmp_path / "launched.txt").read_text() == "moon\n"


# -- the seal itself, against a hostile ledger


@pytest.fixture
def key_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


CALL = ToolCall("call_1", "run", {"command": "ls"})


def _sealed(**given) -> ApprovalDecision:
    arguments = given.get("arguments")
    seal = decision_seal("s", CALL, True, arguments=arguments, by="ann")
    return ApprovalDecision(
        call_id="call_1", approved=True, by="ann", arguments=arguments, seal=seal
    )


def test_a_seal_fits_only_its_own_session_call_and_decision(key_home):
    """Hostile: a sealed approval copied onto another call, another session, a
    call whose tool or arguments were changed, or changed itself (its arguments,
    its approver, a rejection turned into an approval) no longer verifies."""
    decision = _sealed()
    assert decision_is_mine("s", CALL, decision)
    other = msgspec.structs.replace
    assert not decision_is_mine("t", CALL, decision)  # another session
    assert not decision_is_mine("s", ToolCall("call_2", "run", {"command": "ls"}), decision)
    moved = other(decision, call_id="call_2")  # the record moved to another call
    assert not decision_is_mine("s", ToolCall("call_2", "run", {"command": "ls"}), moved)
    assert not decision_is_mine("s", ToolCall("call_1", "write_file", {"command": "ls"}), decision)
    assert not decision_is_mine("s", ToolCall("call_1", "run", {"command": "rm -rf ~"}), decision)
    assert not decision_is_mine("s", CALL, other(decision, arguments={"command": "rm -rf ~"}))
    assert not decision_is_mine("s", CALL, other(decision, by="root"))
    rejected = decision_seal("s", CALL, False, by="ann", reason="no")
    flipped = ApprovalDecision(
        call_id="call_1", approved=True, by="ann", reason="no", seal=rejected
    )
    assert not decision_is_mine("s", CALL, flipped)
    edited = _sealed(arguments={"command": "pwd"})
    assert decision_is_mine("s", CALL, edited)
    assert not decision_is_mine("s", CALL, other(edited, arguments=None))


def test_a_seal_of_a_configuration_is_no_seal_of_a_decision_nor_the_reverse(key_home):
    """Hostile: one key seals both; a configuration's seal cannot pass as a
    decision's (nor the reverse), nor can an unsealed one, or a seal that is not
    text."""
    config = sealed({"cli": 1})
    as_decision = ApprovalDecision(call_id="call_1", approved=True, seal=config["seal"])
    assert not decision_is_mine("s", CALL, as_decision)
    assert not decision_is_mine("s", CALL, ApprovalDecision(call_id="call_1", approved=True))
    assert not _is_mine({"cli": 1, "seal": _sealed().seal})


def test_a_seal_that_is_not_ascii_is_refused_not_a_crash(key_home):
    """Hostile: ``hmac.compare_digest`` raises TypeError on text that is not ASCII,
    so a ledger whose seal held some crashed ``resume`` instead of refusing it."""
    sealed({"cli": 1})  # the key is made: the seals are compared
    odd = ApprovalDecision(call_id="call_1", approved=True, seal="é" * 64)
    assert not decision_is_mine("s", CALL, odd)
    assert not decision_is_mine("s", CALL, msgspec.structs.replace(odd, seal="\ud800"))
    assert not _is_mine({"cli": 1, "seal": "é" * 64})


def test_an_old_ledgers_decision_loads_unsealed():
    """Old ledgers (no ``seal`` field) load as before: unsealed."""
    from trio_agent.ledger._records import ApprovalDecidedRecord, record_decoder

    line = b'{"seq":3,"kind":"approval/decided","call_id":"c","approved":true}'
    record = record_decoder.decode(line)
    assert type(record) is ApprovalDecidedRecord and record.decision.seal is None


# -- show --json and the MCP flags


async def test_show_json_carries_the_warnings_the_text_form_shows(loopback, tmp_path):
    """The bug: ``show --json`` left out the warning of a last line a crash cut off
    (the text form says it): it is now the first line, ``warnings``."""
    ledger = tmp_path / "s.jsonl"
    await _deferred(loopback, tmp_path, ledger)
    with ledger.open("ab") as file:
        file.write(b'{"seq": 99, "kind": "approval/dec')
    text = await cli([*TRIO_AGENT, "show", str(ledger)], env=BASE_ENV)
    warning = next(
        line for line in text.stdout.decode().splitlines() if line.startswith("warning: ")
    )
    shown = await cli([*TRIO_AGENT, "show", "--json", str(ledger)], env=BASE_ENV)
    assert shown.returncode == 0, shown.stderr.decode()
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert lines[0] == {"schema": 1, "warnings": [warning.removeprefix("warning: ")]}
    assert all(set(line) == {"schema", "record"} for line in lines[1:])


def test_an_mcp_server_is_one_flag_for_the_resume_error_and_the_prefix_error():
    """``MCPServerSpec.as_flag`` gives what ``_trust._mcp_flag`` (shell-quoted, with
    its prefix) and ``describe`` (repr-quoted, without) gave."""
    stdio = stdio_server("docs=npx -y 'my server'")
    http = http_server("web=https://example.com/mcp?a=1&b=2")
    assert _as_flags("mcp", [stdio, http]) == (
        "--mcp 'docs=npx -y '\"'\"'my server'\"'\"'' "
        "--mcp-http 'web=https://example.com/mcp?a=1&b=2'"
    )
    assert stdio.as_flag(named=False, quote=repr) == "--mcp \"npx -y 'my server'\""
    assert http.as_flag(named=False, quote=repr) == "--mcp-http 'https://example.com/mcp?a=1&b=2'"
    bare = MCPServerSpec(kind="stdio", command=["srv"])
    assert bare.as_flag() == "--mcp srv"


async def test_overrule_answers_an_approved_call_as_rejected_and_the_ledger_stays_valid(tmp_path):
    """What ``resume`` does with an approval without the user's seal: the agent
    keeps the seal it was given, and ``overrule`` answers the call as rejected,
    once, without a second decision in the ledger (which replays as before)."""
    from trio_agent.ledger import derive
    from trio_agent.stores import parse_jsonl

    held = ToolCall("call_1", "launch", {"target": "moon"})
    store = JsonlStore(tmp_path)
    replies = [scripted_response("r1", [held]), scripted_response("r2", "not launched")]
    agent = Agent(model=ScriptedModel(replies), tools=[launch], store=store, session_id="s")
    await agent.prompt("launch")
    with pytest.raises(ValueError, match="no decided call"):
        agent.overrule("call_1", "untrusted")
    await agent.approve("call_1", by="mallory", seal="forged")
    assert agent.approval_decisions["call_1"].seal == "forged"
    agent.overrule("call_1", "untrusted", by="me")
    result = await agent.prompt()
    await agent.aclose()
    assert result.end.reason == "completed"
    answer = [m for m in agent.messages if m.role == "tool_result"][-1]
    assert "rejected by me: untrusted" in str(answer)
    ledger = (tmp_path / "s.jsonl").read_bytes()
    records = parse_jsonl("s", ledger).records
    assert [r.kind for r in records].count("approval/decided") == 1
    assert not derive(records).pending_approvals  # answered, and the ledger replays


async def _resume_asking(ledger: Path, answers: bytes):
    """``resume --approve ask``, its answers read from stdin."""
    return await trio.run_process(
        [*TRIO_AGENT, "resume", str(ledger), "--approve", "ask"],
        stdin=answers,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=ENV,
    )


async def test_ask_asks_again_about_an_approval_without_the_users_seal(loopback, tmp_path):
    """With someone to ask, an approval added by hand is shown ("approved, but not
    by you") and asked about: stdin ending runs nothing; ``n`` rejects it with
    the reason given; ``y`` runs it."""
    for name in ("no", "yes"):
        (tmp_path / name).mkdir()
        await _deferred(loopback, tmp_path / name, tmp_path / name / "s.jsonl")
        _append(
            tmp_path / name / "s.jsonl", kind="approval/decided", call_id="call_1", approved=True
        )
    ledger = tmp_path / "no" / "s.jsonl"
    ended = await _resume_asking(ledger, b"")
    assert ended.returncode == 3, ended.stderr.decode()
    assert "approved, but not by you: write_file [call_1]" in ended.stdout.decode()
    assert "stdin ended: nothing was run" in ended.stdout.decode()
    loopback.replies.append(Reply(body=text_stream("fine")))
    refused = await _resume_asking(ledger, b"n\nnot mine\n")
    assert refused.returncode == 0, refused.stderr.decode()
    assert not (tmp_path / "no" / "a.txt").exists() and dispatched(ledger) == []
    assert "not mine" in tool_results(loopback.requests[-1].json())["call_1"]
    loopback.replies.append(Reply(body=text_stream("done")))
    ran = await _resume_asking(tmp_path / "yes" / "s.jsonl", b"y\n")
    assert ran.returncode == 0, ran.stderr.decode()
    assert (tmp_path / "yes" / "a.txt").read_text() == "from the model"


async def _approved_then_rejected(tmp_path: Path) -> Agent:
    """A session with two held calls: ``call_1`` approved, ``call_2`` rejected."""
    calls = [ToolCall("call_1", "launch", {"target": "moon"})]
    calls.append(ToolCall("call_2", "launch", {"target": "mars"}))
    replies = [scripted_response("r1", calls), scripted_response("r2", "done")]
    agent = Agent(model=ScriptedModel(replies), tools=[launch], store=JsonlStore(tmp_path))
    await agent.prompt("launch")
    await agent.approve("call_1")
    await agent.reject("call_2", "not mars, ever", by="ann", seal="ann's")
    return agent


async def test_overrule_of_a_rejected_call_replaced_the_reason_the_model_reads(tmp_path):
    """The bug: ``overrule`` took a call already rejected and put its own reason in
    place of the recorded one, so the model read a reason the ledger's decision
    never gave (the approver's was lost). Only an approval is overruled now."""
    agent = await _approved_then_rejected(tmp_path)
    with pytest.raises(ValueError, match="rejected already"):
        agent.overrule("call_2", "something else")
    assert agent.approval_decisions["call_2"].reason == "not mars, ever"
    agent.overrule("call_1", "untrusted")
    await agent.prompt()
    await agent.aclose()
    answers = {m.tool_call_id: str(m.content) for m in agent.messages if m.role == "tool_result"}
    assert "rejected by ann: not mars, ever" in answers["call_2"]
    assert "untrusted" in answers["call_1"]


async def test_overrule_took_a_reason_that_is_no_text(tmp_path):
    """The bug: ``reject`` refuses a reason or name that is no valid text, but
    ``overrule`` kept any object, which the next turn put in an event and the
    model's error result. Refused as ``reject`` refuses it, the call still approved."""
    agent = await _approved_then_rejected(tmp_path)
    for reason, by in ((42, ""), ("bad \ud800", ""), ("why", None)):
        with pytest.raises(TypeError):
            agent.overrule("call_1", reason, by=by)  # type: ignore[arg-type]
    assert agent.approval_decisions["call_1"].approved
    await agent.aclose()


RERUN_APP = '''
from trio_agent import Agent, tool
from trio_agent.testing import ScriptedModel, scripted_response


@tool(requires_approval=True, effect="idempotent")
async def launch(target: str) -> str:
    """Launch at a target (needs a yes; launching twice is once)."""
    with open("launched.txt", "a") as file:
        file.write(target + "\\n")
    return f"launched at {target}"


agent = Agent(model=ScriptedModel([scripted_response("r9", "done")]), tools=[launch])
'''


@tool(name="launch", requires_approval=True, effect="idempotent")
async def launch_again(target: str) -> str:
    """As the application's ``launch``, in this process (writes nothing)."""
    return f"launched at {target}"


async def _cut_off_in_its_run(tmp_path: Path, approve) -> Path:
    """An application's session whose held call was approved (by ``approve``), then
    dispatched, its process dying before the result: the ledger cut after its
    ``tool/call``, so a resume runs the call again (its tool is idempotent)."""
    (tmp_path / "app.py").write_text(textwrap.dedent(RERUN_APP))
    held = ToolCall("call_1", "launch", {"target": "moon"})
    store = JsonlStore(tmp_path)
    replies = [scripted_response("r1", [held]), scripted_response("r2", "ok")]
    agent = Agent(model=ScriptedModel(replies), tools=[launch_again], store=store, session_id="app")
    await agent.prompt("launch")
    await agent.aclose()
    ledger = tmp_path / "app.jsonl"
    await approve(store, ledger)
    agent = await Agent.resume(store, "app", model=ScriptedModel(replies[1:]), tools=[launch_again])
    await agent.prompt()
    await agent.aclose()
    lines = ledger.read_bytes().splitlines(keepends=True)
    cut = [json.loads(line)["kind"] for line in lines].index("tool/call") + 1
    ledger.write_bytes(b"".join(lines[:cut]))
    return ledger


async def test_a_call_run_again_after_a_crash_ran_under_an_unsealed_approval(tmp_path):
    """The bug: a call approved without the user's seal and cut off in its run (a
    ``tool/call`` with no result) is run again by a resume, with the approval's
    arguments, and ``resume`` asked nothing: its check saw only calls still held,
    and a dispatched call is not. A hostile ledger got any approval run that way.
    Now it runs only with ``--approve auto``; otherwise nothing runs (exit 2)."""

    async def mallory(store: JsonlStore, ledger: Path) -> None:
        agent = await Agent.resume(store, "app", model=ScriptedModel([]), tools=[launch_again])
        await agent.approve("call_1", arguments={"target": "mars"}, by="mallory")
        await agent.aclose()

    ledger = await _cut_off_in_its_run(tmp_path, mallory)
    resume = ["resume", str(ledger), "--agent", "app:agent", "--message", "go on"]
    resumed = await cli([*TRIO_AGENT, *resume], cwd=tmp_path)
    err = resumed.stdout.decode() + resumed.stderr.decode()
    assert resumed.returncode == 2, err
    assert "not by you" in err and 'launch({"target":"mars"})' in err
    assert not (tmp_path / "launched.txt").exists()  # never run again
    assert dispatched(ledger) == ["call_1"]  # the ledger as it was
    resumed = await cli([*TRIO_AGENT, *resume, "--approve", "auto"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert (tmp_path / "launched.txt").read_text() == "mars\n"


async def test_a_call_the_user_approved_runs_again_after_a_crash_unasked(tmp_path):
    """What stands: the user's own approval (``trio-agent approve``, sealed) of a
    call cut off in its run has the resume run it again, with no question."""

    async def user(store: JsonlStore, ledger: Path) -> None:
        approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1"], cwd=tmp_path)
        assert approved.returncode == 0, approved.stderr.decode()

    ledger = await _cut_off_in_its_run(tmp_path, user)
    resume = ["resume", str(ledger), "--agent", "app:agent", "--message", "go on"]
    resumed = await cli([*TRIO_AGENT, *resume], cwd=tmp_path)
    out, err = resumed.stdout.decode(), resumed.stderr.decode()
    assert resumed.returncode == 0, (out, err)
    assert "not by you" not in out + err
    assert (tmp_path / "launched.txt").read_text() == "moon\n"


async def test_regression_a_call_owed_a_run_again_is_resumed_without_a_message(tmp_path):
    """A crashed session whose one open call is owed a run again (an idempotent
    tool's, cut off in its run) was refused by ``resume`` without ``--message``:
    "nothing to continue (the model owes no reply)", though the resume owes the
    call its run and the model its result."""

    async def user(store: JsonlStore, ledger: Path) -> None:
        approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1"], cwd=tmp_path)
        assert approved.returncode == 0, approved.stderr.decode()

    ledger = await _cut_off_in_its_run(tmp_path, user)
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger), "--agent", "app:agent"], cwd=tmp_path)
    out, err = resumed.stdout.decode(), resumed.stderr.decode()
    assert resumed.returncode == 0, (out, err)
    assert (tmp_path / "launched.txt").read_text() == "moon\n"


async def test_a_forged_dispatch_never_held_is_not_run_again_unasked(tmp_path):
    """The bug: a ledger handed over with a ``tool/call`` for a call of the
    application's ``launch`` (idempotent, and it needs a yes) that was never held
    for approval had ``resume`` run it again, unasked: only calls held once were
    checked. The rerun is held as a fresh call is; with no one to ask, it does not
    run."""
    from trio_agent import AssistantMessage, UserMessage
    from trio_agent.ledger import Ledger

    (tmp_path / "app.py").write_text(textwrap.dedent(RERUN_APP))
    forged = ToolCall("call_1", "launch", {"target": "mars"})
    lines: list[bytes] = []

    ledger = Ledger(KeptLines(lines), 0)
    ledger.session_started("app", 0.0, "")
    ledger.turn_started(1, 0)
    ledger.message(UserMessage("user-1", "hello"))
    ledger.step_started("request-001")
    ledger.message(AssistantMessage("message-r1", (forged,)))
    ledger.tool_call(forged, "idempotent")
    path = tmp_path / "app.jsonl"
    path.write_bytes(b"".join(lines))
    resume = ["resume", str(path), "--agent", "app:agent", "--message", "go on"]
    for mode in ("deny", "ask"):  # ask: stdin is no terminal, no one answers
        resumed = await cli([*TRIO_AGENT, *resume, "--approve", mode], cwd=tmp_path)
        out, err = resumed.stdout.decode(), resumed.stderr.decode()
        assert not (tmp_path / "launched.txt").exists(), (mode, out, err)
    assert dispatched(path) == ["call_1"]


def _insert(ledger: Path, after_kind: str, **record) -> None:
    """Put one more record after the first of kind ``after_kind`` in ``ledger``,
    the records after it numbered on, as a hand would."""
    records = lines_of(ledger)
    at = [r["kind"] for r in records].index(after_kind) + 1
    records.insert(at, {"seq": at, **record})
    for seq, line in enumerate(records):
        line["seq"] = seq
    ledger.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))


async def test_an_unsealed_rerun_is_not_hidden_by_a_snapshot_no_resume_restores(tmp_path):
    """The bug: the seal check of the calls to run again read every snapshot's
    state, checksum or not, while a resume replays past a snapshot that does not
    restore (the whole ledger, from ``session/start``). A snapshot added after an
    unsealed approval, its state naming no held call and its checksum wrong, had
    the check find nothing held (\"the turn asks the approval rule\"), while the
    resume, from the records, found the call approved and ran it again unasked."""

    async def mallory(store: JsonlStore, ledger: Path) -> None:
        agent = await Agent.resume(store, "app", model=ScriptedModel([]), tools=[launch_again])
        await agent.approve("call_1", by="mallory")
        await agent.aclose()

    ledger = await _cut_off_in_its_run(tmp_path, mallory)
    state = {"format": 1, "session_id": "app"}  # nothing held, nothing decided
    _insert(ledger, "approval/decided", kind="snapshot", state=state, crc32=1)
    resume = ["resume", str(ledger), "--agent", "app:agent", "--message", "go on"]
    for mode in ("deny", "ask"):  # ask: stdin is no terminal, no one answers
        resumed = await cli([*TRIO_AGENT, *resume, "--approve", mode], cwd=tmp_path)
        out, err = resumed.stdout.decode(), resumed.stderr.decode()
        assert not (tmp_path / "launched.txt").exists(), (mode, out, err)
        assert resumed.returncode == 2 and "not by you" in out + err, (mode, out, err)
    assert dispatched(ledger) == ["call_1"]


async def test_a_forged_dispatch_held_then_approved_by_the_user_runs_once_on_resume(tmp_path):
    """What stands: a rerun the ledger shows no approval for, held by ``resume
    --approve defer`` and approved with ``trio-agent approve`` (sealed), runs on
    the next ``resume`` unasked, once."""
    (tmp_path / "app.py").write_text(textwrap.dedent(RERUN_APP))
    forged = ToolCall("call_1", "launch", {"target": "mars"})
    store = JsonlStore(tmp_path)
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", [forged])]),
        tools=[launch_again],
        store=store,
        session_id="app",
    )
    assert (await agent.prompt("launch")).end.reason == "awaiting_approval"
    await agent.aclose()
    ledger = tmp_path / "app.jsonl"
    records = [r for r in lines_of(ledger) if r["kind"] != "approval/requested"]
    at = [r["kind"] for r in records].index("step/end")
    records.insert(at, {"kind": "tool/call", "call_id": "call_1", "effect": "idempotent"})
    for seq, record in enumerate(records):
        record["seq"] = seq
    ledger.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))  # never held
    resume = ["resume", str(ledger), "--agent", "app:agent"]
    held = await cli([*TRIO_AGENT, *resume, "--approve", "defer"], cwd=tmp_path)
    assert held.returncode == 3, held.stdout.decode() + held.stderr.decode()
    assert not (tmp_path / "launched.txt").exists()
    approved = await cli([*TRIO_AGENT, "approve", str(ledger), "call_1"], cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr.decode()
    resumed = await cli([*TRIO_AGENT, *resume, "--approve", "deny"], cwd=tmp_path)
    out, err = resumed.stdout.decode(), resumed.stderr.decode()
    assert resumed.returncode == 0 and "not by you" not in out + err, (out, err)
    assert (tmp_path / "launched.txt").read_text() == "mars\n"
    assert dispatched(ledger) == ["call_1", "call_1"]


async def test_an_unsealed_rerun_is_not_hidden_by_a_later_snapshot_no_resume_starts_from(
    tmp_path,
):
    """The bug: the seal check read the last snapshot record of the ledger as the
    one a resume starts from, but a resume starts from the last snapshot *line*
    (``{"kind":"snapshot",`` at its start): a snapshot that restores, its state
    naming the call held and approved by another, then after the crash a
    snapshot spelled otherwise, naming nothing held, had the check find nothing
    held, while the resume, from the first, ran the call again unasked."""
    from trio_agent import AssistantMessage, UserMessage
    from trio_agent.events import TurnAwaitingApproval, TurnInterrupted
    from trio_agent.ledger import Ledger, record_decoder
    from trio_agent.ledger._derive import replay_of
    from trio_agent.ledger._snapshot import SnapshotState

    (tmp_path / "app.py").write_text(textwrap.dedent(RERUN_APP))
    forged = ToolCall("call_1", "launch", {"target": "mars"})
    lines: list[bytes] = []

    ledger = Ledger(KeptLines(lines), 0)
    ledger.session_started("app", 0.0, "")
    ledger.turn_started(1, 0)
    ledger.message(UserMessage("user-1", "hello"))
    ledger.step_started("request-001")
    ledger.message(AssistantMessage("message-r1", (forged,)))
    ledger.step_ended("request-001", "tool_call")
    ledger.turn_ended(1, TurnAwaitingApproval(call_ids=("call_1",)), 5)
    # the snapshot a resume starts from: held, and approved by mallory (no seal)
    snapshot = replay_of(record_decoder.decode(line) for line in lines).take_snapshot()
    state = msgspec.json.decode(snapshot.state, type=SnapshotState)
    mallory = ApprovalDecision(call_id="call_1", approved=True, by="mallory")
    state = msgspec.structs.replace(state, held=("call_1",), decided=(mallory,))
    encoded = msgspec.json.encode(state)
    snapshot = msgspec.structs.replace(
        snapshot, state=msgspec.Raw(encoded), crc32=zlib.crc32(encoded)
    )
    lines.append(msgspec.json.encode(snapshot) + b"\n")
    assert lines[-1].startswith(b'{"kind":"snapshot",')
    ledger = Ledger(KeptLines(lines), len(lines))
    ledger.turn_started(2, 5)
    ledger.tool_call(forged, "idempotent")  # its run cut off
    ledger.turn_ended(2, TurnInterrupted(), 6)
    decoy = {"seq": len(lines), "kind": "snapshot", "state": {"format": 1, "session_id": "app"}}
    lines.append(json.dumps(decoy).encode() + b"\n")  # not at a line's start: never a tail's
    path = tmp_path / "app.jsonl"
    path.write_bytes(b"".join(lines))
    resume = ["resume", str(path), "--agent", "app:agent", "--message", "go on"]
    for mode in ("deny", "ask"):  # ask: stdin is no terminal, no one answers
        resumed = await cli([*TRIO_AGENT, *resume, "--approve", mode], cwd=tmp_path)
        out, err = resumed.stdout.decode(), resumed.stderr.decode()
        assert not (tmp_path / "launched.txt").exists(), (mode, out, err)
        assert resumed.returncode == 2 and "not by you" in out + err, (mode, out, err)
    assert dispatched(path) == ["call_1"]


def test_regression_unsealed_reruns_reads_a_ledger_of_many_snapshots_in_one_pass():
    """The check of a rerun's seal read the records after each snapshot again for
    that snapshot's view: a long session (a snapshot every 100 turns, a compaction
    a turn) took time in the square of its length. One pass now, the views that
    meet made one; each snapshot's messages are decoded only when it holds a
    wanted call."""
    import sys

    from trio_agent.cli import _trust
    from trio_agent.ledger._records import CompactedRecord, SnapshotRecord

    call = ToolCall("c1", "write_file", {"path": "a.txt"})
    state = msgspec.json.encode({"format": 1, "session_id": "s", "held": [], "decided": []})
    records: list = []
    for n in range(300):
        records.append(SnapshotRecord(seq=2 * n + 1, state=msgspec.Raw(state)))
        records.append(CompactedRecord(seq=2 * n + 2, messages=()))
    counted = [0]

    def lines(frame, event, arg):  # the lines the check runs, in its own module
        if frame.f_code.co_filename != _trust.__file__:
            return None
        if event == "line":
            counted[0] += 1
        return lines

    sys.settrace(lines)
    try:
        found = _trust.unsealed_reruns("s", records, [call])
    finally:
        sys.settrace(None)
    assert found == []  # never held in any view
    assert counted[0] < 100 * len(records), counted[0]  # tens a record (the old: 924)
