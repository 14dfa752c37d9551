"""Snapshots damaged by hand or by the disk: a snapshot is a cache, so one that
cannot be trusted costs a full replay (with a warning), never the session."""

from __future__ import annotations

import json
import zlib

import msgspec
import pytest

from trio_agent import Agent, JsonlStore, ToolResultMessage
from trio_agent.ledger import derive
from trio_agent.stores import SnapshotPolicy
from trio_agent.testing import CallableModel, scripted_response


def _answer(request):
    return scripted_response(f"r-{request.id}", f"answer to {request.messages[-1].id}")


async def _session(tmp_path) -> JsonlStore:
    store = JsonlStore(tmp_path, snapshots=SnapshotPolicy(every_turns=1))
    agent = Agent(model=CallableModel(_answer), store=store, session_id="s", fsync="never")
    for turn in range(3):
        await agent.prompt(f"turn {turn}")
    await agent.aclose()
    return store


def _edit_last_snapshot(store: JsonlStore, edit) -> None:
    """Edit the last snapshot's record and give it the checksum of its new state,
    as a snapshot spliced in whole from elsewhere would have."""
    path = store.path("s")
    data = path.read_bytes()
    start = data.rindex(b'\n{"kind":"snapshot"') + 1
    end = data.index(b"\n", start)
    record = json.loads(data[start:end])
    edit(record)
    if "crc32" in record:
        state = json.dumps(record["state"], separators=(",", ":")).encode()
        record["crc32"] = zlib.crc32(state)
    line = json.dumps(record, separators=(",", ":")).encode()
    path.write_bytes(data[:start] + line + data[end:])


async def test_a_snapshot_that_names_another_session_is_not_restored(tmp_path):
    """Bug: ``restore`` never compares the snapshot's ``session_id`` with the
    session's, so a snapshot spliced in from another session is restored: the
    resume raises no warning, and ``derive`` of the tail names the other session
    while ``derive`` of the whole ledger names this one."""
    store = await _session(tmp_path)
    _edit_last_snapshot(store, lambda record: record["state"].update(session_id="other"))
    whole = derive((await store.load("s")).records)
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    await agent.aclose()
    tail = derive((await store.load_tail("s")).records)
    assert whole.session_id == "s"
    assert tail.session_id == "s" or any(
        "the whole ledger was replayed" in warning for warning in agent.resume_warnings
    ), (tail.session_id, agent.resume_warnings)


async def test_a_snapshot_with_a_wrong_seq_is_passed_over_like_any_damaged_one(tmp_path):
    """Bug: a snapshot line whose ``seq`` is damaged (but that still decodes) makes
    the whole ledger unloadable (``LedgerCorruptError``: a gap in ``seq``), so the
    session can no longer be resumed, shown or forked, although the snapshot is
    only a cache and a snapshot line that is not JSON is passed over with a
    warning."""
    store = await _session(tmp_path)
    before = derive((await store.load("s")).records)
    _edit_last_snapshot(store, lambda record: record.update(seq=record["seq"] + 7))
    loaded = await store.load("s")
    assert any("snapshot" in warning for warning in loaded.warnings)
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    assert list(agent.messages) == before.messages and agent.turns == before.turns
    await agent.aclose()


async def test_a_snapshot_changed_where_it_still_decodes_fails_its_checksum(tmp_path):
    """A byte changed inside a message's text leaves valid JSON and a state that
    holds together: without a checksum the resume took the wrong text for the
    session's. It fails the checksum, and the whole ledger is replayed instead."""
    store = await _session(tmp_path)
    whole = derive((await store.load("s")).records)
    path = store.path("s")
    data = path.read_bytes()
    start = data.rindex(b'\n{"kind":"snapshot"') + 1
    end = data.index(b"\n", start)
    damaged = data[start:end].replace(b'"turn 1"', b'"turn 7"', 1)
    assert damaged != data[start:end]
    path.write_bytes(data[:start] + damaged + data[end:])
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    await agent.aclose()
    assert any("does not match its checksum" in w for w in agent.resume_warnings)
    assert list(agent.messages) == whole.messages


async def test_a_snapshot_without_a_checksum_has_each_message_checked(tmp_path):
    """An older ledger's snapshot has no checksum: it is restored, each message
    checked as a replay checks it (a text no provider accepts is refused there)."""
    store = await _session(tmp_path)
    whole = derive((await store.load("s")).records)
    _edit_last_snapshot(store, lambda record: record.pop("crc32"))  # the key is there
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    await agent.aclose()
    assert agent.resume_warnings == () and list(agent.messages) == whole.messages

    def lone_surrogate(record):
        assert "crc32" not in record
        record["state"]["messages"][0]["content"] = "\ud800"

    _edit_last_snapshot(store, lone_surrogate)
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    await agent.aclose()
    assert any("the whole ledger was replayed" in w for w in agent.resume_warnings)
    assert list(agent.messages) == whole.messages


@pytest.mark.parametrize("break_links", ["duplicate id", "result answering no call"])
async def test_a_snapshot_that_matches_its_checksum_still_has_its_links_checked(
    tmp_path, break_links
):
    """A checksum is no signature: anyone can compute it again. A snapshot edited
    with a matching ``crc32`` had its whole transcript trusted, links included;
    its ids and links are checked, and a transcript they break is passed over
    for the whole ledger, with a warning."""
    store = await _session(tmp_path)
    whole = derive((await store.load("s")).records)
    orphan = msgspec.to_builtins(ToolResultMessage("tool-result-x", "x", "add", "1", False))

    def edit(record):
        messages = record["state"]["messages"]
        messages.append(messages[0] if break_links == "duplicate id" else orphan)

    _edit_last_snapshot(store, edit)
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    await agent.aclose()
    assert any("the whole ledger was replayed" in w for w in agent.resume_warnings)
    assert list(agent.messages) == whole.messages


async def test_a_snapshot_nested_past_the_decoders_depth_is_passed_over(tmp_path):
    """Bug: a snapshot line nesting deeper than the decoder goes raised a bare
    ``RecursionError`` out of the resume, where a snapshot that does not decode is
    a cache passed over: the whole ledger is replayed, with a warning."""
    store = await _session(tmp_path)
    whole = derive((await store.load("s")).records)
    path = store.path("s")
    data = path.read_bytes()
    start = data.rindex(b'\n{"kind":"snapshot"') + 1
    deep = b'{"kind":"snapshot","state":{"metadata":' + b"[" * 5000 + b"]" * 5000 + b"}}"
    path.write_bytes(data[:start] + deep + data[data.index(b"\n", start) :])
    loaded = await store.load("s")
    assert any("damaged" in warning for warning in loaded.warnings), loaded.warnings
    agent = await Agent.resume(store, "s", model=CallableModel(_answer))
    await agent.aclose()
    assert any("the whole ledger was replayed" in w for w in agent.resume_warnings)
    assert list(agent.messages) == whole.messages
