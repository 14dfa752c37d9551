"""The session ledger: records, ordering, durability policies, loading and resume (issue 4)."""

from __future__ import annotations

import os
import threading

import msgspec
import pytest
import trio
from helpers import add, call

from trio_agent import (
    TOOL_NOT_STARTED,
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    FatalToolError,
    JsonlStore,
    LedgerCorruptError,
    LedgerError,
    ToolRegistry,
    TurnCompleted,
    TurnInterrupted,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.ledger import (
    MessageRecord,
    SessionStartRecord,
    StepStartRecord,
    ToolCallRecord,
    ToolResultRecord,
    TurnEndRecord,
    TurnStartRecord,
    derive,
    record_decoder,
)
from trio_agent.stores import parse_jsonl
from trio_agent.testing import ScriptedModel, scripted_response


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


@pytest.fixture
def store(ledger_store):
    return ledger_store


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


# -------------------------------------------------------------------- resume


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


# --------------------------------------------------------------------- loading


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
