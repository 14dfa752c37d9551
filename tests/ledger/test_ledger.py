"""The session ledger (``Ledger``): records, ordering, durability policies, loading and
resume (issue 4), in every store; a clean close told from a crash, event numbers
across a resume, KeyboardInterrupt (issue 12); the run configuration it records
(issue 14); and its regressions, each named after the behaviour it pins."""

from __future__ import annotations

import os
import shutil
import threading

import msgspec
import pytest
import trio
import trio.testing
from helpers import add, call
from ledger_scenario import agent_on, ok_model, records_of, script, sums

from trio_agent import (
    TOOL_NOT_STARTED,
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    FatalToolError,
    JsonlStore,
    LedgerCorruptError,
    LedgerError,
    TextBlock,
    ToolRegistry,
    TurnCancelled,
    TurnCompleted,
    TurnInterrupted,
    Usage,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.ledger import (
    SEQUENCE_BLOCK,
    TOOL_FATAL,
    Ledger,
    MessageRecord,
    SessionStartRecord,
    StepStartRecord,
    ToolCallRecord,
    ToolResultRecord,
    TurnEndRecord,
    TurnStartRecord,
    derive,
    model_label,
    record_decoder,
)
from trio_agent.stores import parse_jsonl
from trio_agent.testing import ScriptedModel, explore_cancellation, scripted_response


def two_step_script(prefix: str = "r"):
    return [
        scripted_response(
            f"{prefix}1",
            [
                call("add", f"{prefix}c1", {"left": 1, "right": 2}),
                call("add", f"{prefix}c2", {"left": 3, "right": 4}),
            ],
        ),
        scripted_response(f"{prefix}2", "3 and 7"),
    ]


def recording_agent(store, fsync: str = "step") -> Agent:
    """An agent recording session ``s1`` of the two-step script in ``store``."""
    return Agent(
        model=ScriptedModel(two_step_script()),
        tools=ToolRegistry([add]),
        store=store,
        session_id="s1",
        fsync=fsync,
    )


def lines(store: JsonlStore, session_id: str) -> list:
    data = store.path(session_id).read_bytes()
    return [record_decoder.decode(line) for line in data.splitlines()]


async def test_a_session_is_recorded_in_order_and_derives_the_same_transcript(store):
    agent = recording_agent(store)
    result = await agent.prompt(UserMessage("u1", "sums"))
    await agent.aclose()
    loaded = await store.load("s1")
    kinds = [type(r).kind for r in loaded.records]
    assert kinds == [
        "session/start",
        "turn/start",
        "message",
        "events/reserved",  # before turn.started, the first event: numbers 0 to 1023
        "step/start",
        "message",
        "tool/call",
        "tool/result",
        "tool/call",
        "tool/result",
        "step/end",
        "step/start",
        "message",
        "step/end",
        "turn/end",
        "session/closed",
    ]
    assert [r.seq for r in loaded.records] == list(range(len(kinds)))
    derived = derive(loaded.records)
    assert tuple(derived.messages) == result.messages
    assert derived.turns == 1 and derived.requests == 2 and derived.open_turn is None
    end = loaded.records[-2]
    assert isinstance(end, TurnEndRecord) and end.end == TurnCompleted()
    assert derived.closed and derived.sequence == loaded.records[-1].sequence == end.sequence
    # each message is stored exactly once
    stored = [r for r in loaded.records if isinstance(r, MessageRecord | ToolResultRecord)]
    assert len(stored) == len(result.messages)


async def test_every_record_is_written_before_its_event_is_observed(tmp_path):
    store = JsonlStore(tmp_path)
    agent = recording_agent(store)
    checked = 0
    async with agent.turn(UserMessage("u1", "sums")) as run:
        async for event in run:
            records = lines(store, "s1")
            if event.type == "turn.started":
                assert isinstance(records[-1], TurnStartRecord) or any(
                    isinstance(r, TurnStartRecord) for r in records
                )
            elif event.type == "message.accepted":
                assert any(
                    isinstance(r, MessageRecord) and r.message == event.message for r in records
                )
            elif event.type == "tool.started":
                assert any(
                    isinstance(r, ToolCallRecord) and r.call_id == event.call.id for r in records
                )
            elif event.type == "tool.finished":
                assert any(
                    isinstance(r, ToolResultRecord) and r.result == event.result for r in records
                )
            elif event.type == "turn.finished":
                assert isinstance(records[-1], TurnEndRecord)
            checked += 1
    assert checked >= 8
    await agent.aclose()


@pytest.mark.parametrize(
    ("policy", "low", "high"), [("always", 8, 14), ("step", 2, 4), ("never", 0, 0)]
)
async def test_fsync_policies_and_fsyncs_never_on_the_trio_thread(
    tmp_path, monkeypatch, policy, low, high
):
    threads = []
    real_fsync = os.fsync

    def spy(fd):
        threads.append(threading.current_thread())
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    agent = recording_agent(JsonlStore(tmp_path), fsync=policy)
    await agent.prompt(UserMessage("u1", "sums"))
    during = len(threads)
    await agent.aclose()
    assert low <= during <= high, during
    assert all(t is not threading.main_thread() for t in threads)


async def test_group_commit_covers_many_records_with_one_fsync(tmp_path, monkeypatch):
    calls = []
    real_fsync = os.fsync

    def slow_fsync(fd):
        calls.append(fd)
        import time

        time.sleep(0.02)  # in the fsync thread: a slow disk
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    store = JsonlStore(tmp_path)
    writer = store.create("s1")
    from trio_agent import Ledger

    ledger = Ledger(writer, 0, "always")
    ledger.session_started("s1", 0.0, "")

    async def writer_task(i):
        ledger.step_started(f"request-{i:03d}")
        await ledger.barrier("event")

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(writer_task, i)
    await ledger.aclose()
    assert len(lines(store, "s1")) == 51
    assert len(calls) < 10  # 51 records, a handful of fsyncs


async def test_finished_tool_results_are_recorded_before_a_failure_propagates(store):
    @tool
    async def fatal() -> str:
        raise FatalToolError("boom")

    model = ScriptedModel(
        [scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1}), call("fatal", "c2")])]
    )
    agent = Agent(model=model, tools=ToolRegistry([add, fatal]), store=store, session_id="s1")
    result = await agent.prompt(UserMessage("u1", "x"))
    assert result.end.code == "TOOL_FATAL"
    await agent.aclose()
    records = (await store.load("s1")).records
    results = [r.result.tool_call_id for r in records if isinstance(r, ToolResultRecord)]
    assert results == ["c1"]
    assert [r.call_id for r in records if isinstance(r, ToolCallRecord)] == ["c1", "c2"]


async def test_finished_results_are_recorded_when_a_turn_is_cancelled_mid_batch(store):
    release = trio.Event()

    @tool
    async def hang() -> str:
        await release.wait()
        return "never"

    model = ScriptedModel(
        [scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1}), call("hang", "c2")])]
    )
    agent = Agent(model=model, tools=ToolRegistry([add, hang]), store=store, session_id="s1")
    async with agent.turn(UserMessage("u1", "x")) as run:
        async for event in run:
            if event.type == "tool.started" and event.call.id == "c2":
                run.cancel()
    await agent.aclose()
    records = (await store.load("s1")).records
    assert [r.result.tool_call_id for r in records if isinstance(r, ToolResultRecord)] == ["c1"]
    assert records[-2].end.reason == "cancelled" and records[-1].kind == "session/closed"
    # the interrupted call is recorded as cancelled, not left to look like a crash
    assert [r.call_id for r in records if r.kind == "tool/cancelled"] == ["c2"]


async def crashed_session(store, cut_after: str):
    """A session recorded up to (and including) the first record of kind ``cut_after``
    whose call is ``c2``, as if the process died there."""
    agent = recording_agent(store)
    await agent.prompt(UserMessage("u1", "sums"))
    await agent.aclose()
    records = list((await store.load("s1")).records)
    for index, record in enumerate(records):
        if type(record).kind == cut_after and (cut_after != "tool/call" or record.call_id == "rc2"):
            return records[: index + 1]
    raise AssertionError(cut_after)


def write_records(tmp_path, records, session_id="s1"):
    store = JsonlStore(tmp_path / "crashed")
    store.directory.mkdir()
    store.path(session_id).write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    return store


@pytest.mark.parametrize(
    ("cut_after", "codes"),
    [
        ("tool/call", {"rc1": None, "rc2": TOOL_OUTCOME_UNKNOWN}),
        ("message", {}),  # only the user message: no call yet
    ],
)
async def test_resume_closes_open_calls_explicitly_and_runs_nothing(tmp_path, cut_after, codes):
    source = JsonlStore(tmp_path)
    records = await crashed_session(source, cut_after)
    store = write_records(tmp_path, records)
    ran = []

    @tool
    async def add(left: int, right: int) -> dict:
        ran.append((left, right))
        return {"sum": left + right}

    model = ScriptedModel([scripted_response("n1", "resumed")])
    agent = await Agent.resume(store, "s1", model=model, tools=ToolRegistry([add]))
    assert ran == []
    closed = {r.tool_call_id: code for r, code in agent.closed_on_resume}
    assert closed == {k: v for k, v in codes.items() if v}
    validate_transcript(agent.messages)
    await agent.aclose()
    after = (await store.load("s1")).records
    assert after[-1].kind == "session/closed"
    assert isinstance(after[-2], TurnEndRecord) and after[-2].end == TurnInterrupted()
    written = [(r.result.tool_call_id, r.code) for r in after if isinstance(r, ToolResultRecord)]
    assert [w for w in written if w[1]] == [(k, v) for k, v in codes.items() if v]


async def test_resume_tells_not_started_from_outcome_unknown(tmp_path):
    source = JsonlStore(tmp_path)
    records = await crashed_session(source, "tool/result")  # c1 answered, c2 never dispatched
    store = write_records(tmp_path, records)
    agent = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    [(result, code)] = agent.closed_on_resume
    assert (result.tool_call_id, code) == ("rc2", TOOL_NOT_STARTED)
    assert result.is_error and result.content.startswith("TOOL_NOT_STARTED:")
    await agent.aclose()


async def test_a_resumed_session_goes_on_with_its_counters(store):
    agent = Agent(
        model=ScriptedModel(two_step_script()),
        tools=ToolRegistry([add]),
        store=store,
        session_id="s1",
        system="be exact",
    )
    first = await agent.prompt(UserMessage("u1", "sums"))
    await agent.aclose()
    model = ScriptedModel([scripted_response("n1", "more")])
    resumed = await Agent.resume(store, "s1", model=model, tools=ToolRegistry([add]))
    events = []
    async with resumed.turn(UserMessage("u2", "more")) as run:
        async for event in run:
            events.append(event)
    assert run.result.turn == 2 and model.requests[0].id == "request-003"
    assert model.requests[0].system == "be exact"
    assert model.requests[0].messages[:-1] == first.messages
    assert events[0].sequence > 0
    await resumed.aclose()
    derived = derive((await store.load("s1")).records)
    assert tuple(derived.messages) == run.result.messages


async def test_a_resume_that_does_nothing_writes_nothing(store):
    """Each resume that took no turn appended another ``session/closed`` (three
    resumes, three records; issue 32): closing a resumed session whose last record
    already says it closed, with nothing written since, leaves the ledger as it was.
    A resume that takes a turn still ends with one ``session/closed``."""
    agent = recording_agent(store)
    await agent.prompt(UserMessage("u1", "sums"))
    await agent.aclose()
    before = (await store.load("s1")).records
    for _ in range(3):
        async with await Agent.resume(store, "s1", model=ScriptedModel([])):
            pass
    assert (await store.load("s1")).records == before
    model = ScriptedModel([scripted_response("n1", "more")])
    async with await Agent.resume(store, "s1", model=model) as resumed:
        await resumed.prompt(UserMessage("u2", "more"))
    after = [record.kind for record in (await store.load("s1")).records]
    assert after.count("session/closed") == 2 and after[-1] == "session/closed"
    assert after[-2] == "turn/end"


async def test_a_resume_of_a_session_that_did_not_close_records_its_close(tmp_path):
    """The other side of the rule above: a session whose writer died after its
    last turn, before ``session/closed``, is closed by the resume that takes it
    over, even one that does nothing."""
    records = await crashed_session(JsonlStore(tmp_path), "turn/end")
    store = write_records(tmp_path, records)
    async with await Agent.resume(store, "s1", model=ScriptedModel([])):
        pass
    after = (await store.load("s1")).records
    assert after[:-1] == tuple(records) and after[-1].kind == "session/closed"


async def test_a_torn_last_line_is_ignored_said_and_cut_before_appending(tmp_path):
    store = JsonlStore(tmp_path)
    agent = recording_agent(store)
    await agent.prompt(UserMessage("u1", "sums"))
    await agent.aclose()
    path = store.path("s1")
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"kind":"message","mess')
    loaded = await store.load("s1")
    assert len(loaded.records) == len(whole.splitlines())
    assert loaded.warnings and "torn" in loaded.warnings[0]
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    assert resumed.resume_warnings == loaded.warnings
    await resumed.aclose()
    again = await store.load("s1")
    # the torn tail is cut when the session is reopened; the resume did nothing,
    # so nothing is appended (no second session/closed)
    assert again.warnings == () and again.records == loaded.records
    assert path.read_bytes() == whole


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda ls: [ls[0], b"{not json", *ls[1:]], "line 2 is corrupt"),
        (lambda ls: [ls[0], *ls[2:]], "seq 2 where 1 was expected"),
        (lambda ls: [ls[0], ls[1], ls[1], *ls[2:]], "seq 1 where 2 was expected"),
        (
            lambda ls: [msgspec.json.encode(TurnStartRecord(seq=0, turn=1, sequence=0)), *ls[1:]],
            "does not begin with session/start",
        ),
    ],
)
async def test_a_damaged_middle_or_a_seq_gap_is_refused(tmp_path, damage, message):
    store = JsonlStore(tmp_path)
    agent = recording_agent(store)
    await agent.prompt(UserMessage("u1", "sums"))
    await agent.aclose()
    path = store.path("s1")
    path.write_bytes(b"\n".join(damage(path.read_bytes().splitlines())) + b"\n")
    with pytest.raises(LedgerCorruptError, match=message):
        derive((await store.load("s1")).records)


async def test_an_unknown_format_version_is_refused():
    data = (
        msgspec.json.encode(SessionStartRecord(seq=0, format=99, session_id="s", created=0.0))
        + b"\n"
    )
    with pytest.raises(LedgerCorruptError, match="format 99"):
        derive(parse_jsonl("s", data).records)


async def test_missing_and_existing_sessions(tmp_path, store):
    with pytest.raises(LedgerError, match="no session"):
        await store.load("nope")
    if isinstance(store, JsonlStore):
        async with Agent(model=ScriptedModel([]), store=store, session_id="dup"):
            pass
        second = Agent(model=ScriptedModel([]), store=store, session_id="dup")  # creates nothing
        with pytest.raises(LedgerError, match="already exists"):  # on first use (issue 14)
            async with second:
                pass


@pytest.mark.parametrize("bad", ["", "../x", ".hidden", "a/b", "x" * 129, 3])
def test_session_ids_are_checked(tmp_path, bad):
    with pytest.raises(ValueError, match="session id"):
        JsonlStore(tmp_path).path(bad)


def test_fsync_and_session_id_need_a_store():
    with pytest.raises(ValueError, match="need a store"):
        Agent(model=ScriptedModel([]), fsync="always")


async def test_initial_messages_are_recorded(store):
    history = [UserMessage("h1", "earlier")]
    async with Agent(model=ScriptedModel([]), messages=history, store=store, session_id="s1"):
        pass  # the ledger is created on first use: here, `async with`
    derived = derive((await store.load("s1")).records)
    assert derived.messages == history
    assert isinstance((await store.load("s1")).records[1], MessageRecord)


async def test_step_start_records_count_requests(store):
    agent = recording_agent(store)
    await agent.prompt(UserMessage("u1", "x"))
    await agent.aclose()
    records = (await store.load("s1")).records
    assert [r.request_id for r in records if isinstance(r, StepStartRecord)] == [
        "request-001",
        "request-002",
    ]


async def test_a_tool_call_is_stored_before_the_tool_runs_in_every_store(store):
    # the ledger's rule, whatever the store batches (PostgreSQL stores per step):
    # a crash while a tool runs leaves its tool/call record, so a resume never
    # dispatches it again unknowingly
    seen: list[str] = []

    @tool
    async def probe(call_id: str) -> str:
        """Looks at the ledger from inside the call (told its own id)."""
        session = seen[0]
        records = (await store.load(session)).records
        stored = [r.call_id for r in records if type(r).kind == "tool/call"]
        return "stored" if call_id in stored else f"missing from {stored}"

    for execution in ("sequential", "parallel"):
        seen[:] = [f"s-{execution}"]
        script = [
            scripted_response(
                "r1",
                [call("probe", "p1", {"call_id": "p1"}), call("probe", "p2", {"call_id": "p2"})],
            ),
            scripted_response("r2", "done"),
        ]
        agent = Agent(
            model=ScriptedModel(script),
            tools=ToolRegistry([probe]),
            store=store,
            session_id=seen[0],
            tool_execution=execution,
        )
        result = await agent.prompt("look")
        await agent.aclose()
        results = [m.content for m in result.messages if m.role == "tool_result"]
        assert results == ["stored", "stored"], execution


async def test_a_turn_cancelled_at_any_checkpoint_leaves_a_ledger_that_derives_and_resumes(
    store,
):
    """SQLite once dropped a batch whose flush was cancelled before the worker ran it,
    leaving a seq gap; every cancel point must leave a loadable, faithful ledger."""
    state = {"n": 0}

    def scenario():
        state["n"] += 1
        state["id"] = f"k{state['n']}"
        state["agent"] = Agent(
            model=ScriptedModel(script()),
            tools=ToolRegistry([add]),
            store=store,
            session_id=state["id"],
        )
        return state["agent"].turn(UserMessage("u1", "go"))

    async def check(events, result):
        agent, session_id = state["agent"], state["id"]
        await agent.aclose()
        derived = derive((await store.load(session_id)).records)
        assert tuple(derived.messages) == agent.messages
        resumed = await Agent.resume(
            store, session_id, model=ScriptedModel(script()[2:]), tools=ToolRegistry([add])
        )
        validate_transcript(resumed.messages)
        await resumed.aclose()

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 10 and report.outcomes[-1] == "completed"


async def test_a_result_is_kept_when_cancellation_lands_in_after_tool_call(store):
    """A result was lost (and the call later called outcome unknown) when cancellation landed in
    ``after_tool_call``; the tool ran, so its result is kept and recorded."""
    sent = []

    @tool
    async def send_email(to: str) -> str:
        sent.append(to)
        return "sent"

    entered = trio.Event()

    async def slow_audit(call, result):
        entered.set()
        await trio.sleep_forever()

    agent = Agent(
        model=ScriptedModel([scripted_response("r1", [call("send_email", "c1", {"to": "a@b"})])]),
        tools=ToolRegistry([send_email]),
        after_tool_call=slow_audit,
        store=store,
        session_id="s1",
    )
    events = []
    async with agent.turn(UserMessage("u1", "mail")) as run:
        async for event in run:
            events.append(event)
            if event.type == "tool.started":
                await entered.wait()
                run.cancel()
    assert sent == ["a@b"] and run.result.end == TurnCancelled()
    assert agent.messages[-1].content == "sent"
    assert [e.type for e in events][-2:] == ["tool.finished", "turn.finished"]
    await agent.aclose()
    records = (await store.load("s1")).records
    assert [r.result.content for r in records if isinstance(r, ToolResultRecord)] == ["sent"]


async def test_a_call_blocked_by_a_failing_hook_is_not_recorded_as_dispatched(store):
    """A call a failing ``before_tool_call`` blocked was recorded as dispatched; it is not
    started."""

    async def broken(call):
        raise ValueError("policy service down")

    agent = Agent(
        model=ScriptedModel(script()),
        tools=ToolRegistry([add]),
        before_tool_call=broken,
        store=store,
        session_id="s1",
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == "HOOK_ERROR"
    await agent.aclose()
    records = (await store.load("s1")).records
    assert not any(isinstance(r, ToolCallRecord) for r in records)
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    assert {code for _, code in resumed.closed_on_resume} == {TOOL_NOT_STARTED}
    await resumed.aclose()


async def test_closing_the_ledger_while_a_turn_runs_is_refused(tmp_path):
    """Closing the agent (and its ledger) while a turn ran was taken, cutting the turn's records."""
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "x", hang_at=0)]),
        store=JsonlStore(tmp_path),
        session_id="s1",
    )
    async with agent.turn(UserMessage("u1", "go")) as run:
        await run.__anext__()
        with pytest.raises(RuntimeError, match="cannot close the agent while a turn of it runs"):
            await agent.aclose()
        run.cancel()
    await agent.aclose()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"fsync": "sometimes"}, ValueError, "fsync"),
        ({"session_id": ""}, ValueError, "session id"),
        ({"session_id": "../escape"}, ValueError, "session id"),
    ],
)
def test_bad_ledger_options_are_refused_before_anything_is_created(tmp_path, options, error, match):
    """Bad ledger options (fsync, session id) were refused only after the session's file was
    created."""
    with pytest.raises(error, match=match):
        Agent(model=ScriptedModel([]), store=JsonlStore(tmp_path), **options)
    assert list(tmp_path.iterdir()) == []


def test_a_store_that_is_not_a_store_is_refused():
    """A store that is not a ``SessionStore`` (a path) was taken, and failed at first use."""
    with pytest.raises(TypeError, match="SessionStore"):
        Agent(model=ScriptedModel([]), store="sessions/")


async def test_a_clean_close_can_be_told_from_a_crash(tmp_path):
    """Issue 12: a clean close could not be told from a crash; session/closed tells them apart."""
    store = JsonlStore(tmp_path)
    agent = agent_on(store, sums())
    await agent.prompt(UserMessage("u1", "go"))
    crashed = JsonlStore(tmp_path / "crashed")
    crashed.directory.mkdir()
    shutil.copy(store.path("s1"), crashed.path("s1"))  # the file as a kill -9 leaves it
    await agent.aclose()
    assert (await records_of(store))[-1].kind == "session/closed"
    clean = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    assert clean.resume_warnings == ()
    died = await Agent.resume(crashed, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    assert any("did not close the session" in w for w in died.resume_warnings)
    await clean.aclose()
    await died.aclose()


async def test_event_numbers_never_repeat_after_a_crash_resume(tmp_path):
    """Issue 12: event numbers repeated after a crash and resume; the writer reserves blocks ahead,
    so none repeats and the gap is bounded."""
    store = JsonlStore(tmp_path)
    crashed = JsonlStore(tmp_path / "crashed")
    crashed.directory.mkdir()
    chunks = 800  # three steps of 800 chunks: the writer renews its reservation twice
    script = [
        scripted_response(
            f"r{i}",
            [TextBlock("x" * chunks), call("add", f"c{i}", {"left": i, "right": 1})],
            text_chunks=chunks,
        )
        for i in range(3)
    ]
    script.append(scripted_response("r3", "the end", hang_at=0))
    agent = agent_on(store, script)
    seen = []
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            seen.append(event.sequence)
            if event.type == "tool.finished" and event.call.id == "c2":
                await trio.testing.wait_all_tasks_blocked()  # the last stream hangs: it "dies" now
                shutil.copy(store.path("s1"), crashed.path("s1"))
                run.cancel()
    await agent.aclose()
    assert max(seen) > 2 * SEQUENCE_BLOCK
    resumed = await Agent.resume(
        crashed,
        "s1",
        model=ScriptedModel([scripted_response("n", "on")]),
        tools=ToolRegistry([add]),
    )
    later = []
    async with resumed.turn(UserMessage("u2", "again")) as run:
        async for event in run:
            later.append(event.sequence)
    await resumed.aclose()
    assert min(later) > max(seen)  # a consumer of both processes sees no number twice
    assert min(later) <= max(seen) + SEQUENCE_BLOCK + 1  # and the gap is bounded
    assert later == list(range(later[0], later[0] + len(later)))


async def test_event_numbers_continue_exactly_after_a_clean_close(store):
    """Issue 12: after a clean close, event numbers continue exactly."""
    agent = agent_on(store, sums("a"))
    first = []
    async with agent.turn(UserMessage("u1", "go")) as run:
        first = [event.sequence async for event in run]
    await agent.aclose()
    resumed = await Agent.resume(
        store, "s1", model=ScriptedModel(sums("b")), tools=ToolRegistry([add])
    )
    async with resumed.turn(UserMessage("u2", "again")) as run:
        second = [event.sequence async for event in run]
    await resumed.aclose()
    assert second[0] == first[-1] + 1


async def test_a_turn_cut_short_by_keyboard_interrupt_still_closes_to_a_loadable_ledger(store):
    """Issue 12: KeyboardInterrupt is neither an Exception nor cancellation: the turn got no
    turn/end of its own, and session/closed inside an open turn would be damage."""

    class Interrupting(ScriptedModel):
        def stream(self, request):
            raise KeyboardInterrupt

    agent = Agent(model=Interrupting([]), store=store, session_id="s1")
    with pytest.raises(KeyboardInterrupt):
        await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    records = await records_of(store)
    assert [r.kind for r in records][-2:] == ["turn/end", "session/closed"]
    assert records[-2].end.reason == "interrupted"
    assert derive(records).closed


async def test_a_turn_after_a_caught_keyboard_interrupt_keeps_the_ledger_loadable(store):
    """Issue 12 (review): A REPL catches Ctrl-C and goes on: the cut turn had no turn/end, and the
    next turn/start inside it made the whole session unloadable."""

    class InterruptingOnce(ScriptedModel):
        calls = 0

        def stream(self, request):
            InterruptingOnce.calls += 1
            if InterruptingOnce.calls == 1:
                raise KeyboardInterrupt
            return super().stream(request)

    agent = Agent(
        model=InterruptingOnce([scripted_response("r1", "fine")]), store=store, session_id="s1"
    )
    with pytest.raises(KeyboardInterrupt):
        await agent.prompt(UserMessage("u1", "go"))
    assert (await agent.prompt(UserMessage("u2", "again"))).final_text == "fine"
    await agent.aclose()
    records = await records_of(store)
    ends = [r.end.reason for r in records if r.kind == "turn/end"]
    assert ends == ["interrupted", "completed"] and derive(records).closed


async def test_every_ledger_write_is_protected_from_keyboard_interrupt(tmp_path):
    """Issue 12 (review): trio delivers Ctrl-C at any bytecode of unprotected code: between a
    record's write and its seq being counted, the next record repeated the seq."""
    seen = []

    class Watching:
        def append(self, line):
            seen.append(trio.lowlevel.currently_ki_protected())

        def commit(self): ...
        async def flush(self, durable): ...
        async def aclose(self): ...

    ledger = Ledger(Watching(), 0)
    ledger.session_started("s", 0.0, "")
    ledger.turn_started(1, 0)
    ledger.message(UserMessage("u1", "hi"), usage=Usage(1, 1))
    ledger.step_started("request-001")
    await ledger.before_event(0)
    ledger.turn_ended(1, derive_end(), 2)
    ledger.session_closed(2)
    assert seen and all(seen), seen

    class Journal:
        def message(self, message, code=None, usage=None):
            seen.append(trio.lowlevel.currently_ki_protected())

    from trio_agent.engine import Conversation

    conversation = Conversation.from_messages(())
    conversation.journal = Journal()
    seen.clear()
    conversation.append(UserMessage("u2", "in the transcript and the journal, or neither"))
    assert seen == [True]


def derive_end():
    from trio_agent import TurnCompleted

    return TurnCompleted()


async def test_a_fatal_tool_error_naming_a_file_that_is_not_utf8_is_recorded(store):
    """Issue 12 (review): a fatal tool error naming a file that is not UTF-8 (a lone surrogate)
    could not be recorded."""

    @tool
    async def read(path: str) -> str:
        name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as os.listdir gives it
        raise FatalToolError(f"cannot read {name}: disk gone")

    agent = agent_on(
        store,
        [scripted_response("r1", [call("read", "c1", {"path": "x"})])],
        tools=ToolRegistry([read]),
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    assert result.end.code == TOOL_FATAL and "caf\ufffd.txt" in result.end.detail
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([read]))
    assert [code for _, code in resumed.closed_on_resume] == [TOOL_FATAL]
    await resumed.aclose()


async def test_results_kept_after_a_fatal_call_survive_a_cancel_in_after_tool_call(store):
    """Issue 12 (review): results kept after a fatal call were lost, and called outcome unknown,
    when a cancel landed in ``after_tool_call``."""

    # the order is made by events, not by 10 ms against 20 ms: both quick calls run
    # (shielded) when boom fails, and finish only after its failure was reported
    running, failed = [], trio.Event()
    both_running = trio.Event()

    @tool
    async def boom() -> str:
        await both_running.wait()
        failed.set()
        raise FatalToolError("boom")

    @tool
    async def quick(n: int) -> str:
        with trio.CancelScope(shield=True):
            running.append(n)
            if len(running) == 2:
                both_running.set()
            await failed.wait()
        return f"quick {n}"

    in_hook = trio.Event()

    async def audit(c, result):
        in_hook.set()
        await trio.sleep_forever()

    calls = [call("boom", "c1"), call("quick", "c2", {"n": 2}), call("quick", "c3", {"n": 3})]
    agent = agent_on(
        store,
        [scripted_response("r1", calls)],
        tools=ToolRegistry([boom, quick]),
        after_tool_call=audit,
        tool_execution="parallel",
        tool_grace_period=60.0,  # ends once both finish: a bound only a failing test reaches
    )
    async with agent.turn(UserMessage("u1", "go")) as run, trio.open_nursery() as nursery:

        async def cancel_in_hook():
            await in_hook.wait()
            run.cancel()

        nursery.start_soon(cancel_in_hook)
        async for _ in run:
            pass
    await agent.aclose()
    # c2 and c3 both ran to the end: both results are kept, none is "outcome unknown"
    assert {m.content for m in agent.messages if m.id.startswith("tool-result-")} == {
        "quick 2",
        "quick 3",
    }
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([boom]))
    assert [code for _, code in resumed.closed_on_resume] == [TOOL_FATAL]
    await resumed.aclose()


class ProviderLike:
    """A model with str ``provider`` and ``model`` attributes, as the adapters have."""

    provider = "OpenAI"

    def __init__(self) -> None:
        self.model = "gpt-test"
        self.inner = ok_model("p1")

    def stream(self, request):
        return self.inner.stream(request)


def test_a_model_label_is_provider_and_model_or_the_class_name():
    """Issue 14: a model's label in the ledger is provider:model, or the class name."""
    assert model_label(ProviderLike()) == "OpenAI:gpt-test"
    assert model_label(ok_model()) == "ScriptedModel"
    odd = ProviderLike()
    odd.model = 3  # not a str: the class name
    assert model_label(odd) == "ProviderLike"


async def test_metadata_and_each_turns_model_are_recorded(tmp_path):
    """Issue 14: the metadata and each turn's model are recorded, and read back before resuming."""
    store = JsonlStore(tmp_path)
    config = {"provider": "openai", "model": "gpt-test", "max_steps": 8, "env": ["KEY_NAME"]}
    agent = Agent(model=ok_model("r1"), store=store, session_id="s1", metadata=config)
    config["model"] = "changed later"  # the agent keeps its own copy
    await agent.prompt("one")
    agent._state.model = ProviderLike()  # another model for the next turn
    await agent.prompt("two")
    await agent.aclose()
    records = (await store.load("s1")).records
    start = records[0]
    assert type(start) is SessionStartRecord
    assert start.metadata == {**config, "model": "gpt-test"}
    turns = [r for r in records if type(r) is TurnStartRecord]
    assert [t.model for t in turns] == ["ScriptedModel", "OpenAI:gpt-test"]
    # the public way to read it before resuming
    assert derive((await store.load("s1")).records).metadata == start.metadata
    resumed = await Agent.resume(store, "s1", model=ok_model())
    assert dict(resumed.metadata) == start.metadata
    await resumed.aclose()


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_a_call_a_fatal_call_kept_from_starting_is_answered_alike_live_and_resumed(
    store, execution
):
    """The bug: a call that never started because an earlier call of its batch was
    fatal was answered "interrupted" by the live session's next turn, but
    ``TOOL_NOT_STARTED`` ("the session stopped before this call was dispatched")
    by a resume of the same ledger: the transcript depended on whether the process
    was restarted. Both answer it as the live session does (Tools: the transcript
    is answered as interrupted at the next turn)."""

    @tool(exclusive=True)  # in a parallel batch too, the call after it waits for it
    async def fatal() -> str:
        raise FatalToolError("boom")

    def batch(prefix: str) -> list:
        calls = [call("fatal", f"{prefix}c1"), call("add", f"{prefix}c2", {"left": 1, "right": 2})]
        return [scripted_response(f"{prefix}r1", calls), scripted_response(f"{prefix}r2", "ok")]

    tools = ToolRegistry([add, fatal])
    live = Agent(model=ScriptedModel(batch("")), tools=tools, tool_execution=execution)
    assert (await live.prompt("go")).end.code == "TOOL_FATAL"
    await live.prompt("again")
    [live_answer] = [m for m in live.messages if getattr(m, "tool_call_id", "") == "c2"]
    recorded = Agent(
        model=ScriptedModel(batch("")),
        tools=tools,
        store=store,
        session_id="s1",
        tool_execution=execution,
    )
    assert (await recorded.prompt("go")).end.code == "TOOL_FATAL"
    await recorded.aclose()
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=tools)
    closed = {result.tool_call_id: (result, code) for result, code in resumed.closed_on_resume}
    await resumed.aclose()
    assert closed["c2"] == (live_answer, TOOL_NOT_STARTED)
    assert live_answer.is_error and live_answer.content == "interrupted: no result was recorded"
