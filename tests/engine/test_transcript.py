"""The ``Conversation``'s snapshots: shared with its list (made in constant time),
and frozen from the holder's side whatever joins the transcript later."""

from __future__ import annotations

import tracemalloc

import trio

from tests.support.helpers import call
from trio_agent import (
    Agent,
    AssistantMessage,
    TextBlock,
    ToolResultMessage,
    Transcript,
    UserMessage,
)
from trio_agent.engine import Conversation
from trio_agent.testing import CallableModel, scripted_response


def _result(call_id: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(f"result-{call_id}", call_id, "add", text)


def _long(turns: int) -> Conversation:
    conversation = Conversation.from_messages(())
    for i in range(turns):
        conversation.append(UserMessage(f"u{i}", "hi"))
        conversation.append(AssistantMessage(f"a{i}", (TextBlock("ok"),)))
    return conversation


def test_a_snapshot_shares_the_transcript_instead_of_copying_it():
    """Bug: each snapshot was a tuple of the whole transcript (three a turn), so a
    turn of a long session cost in proportion to its history."""
    conversation = _long(5_000)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        views = [conversation.snapshot() for _ in range(100)]
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert all(len(v) == 10_000 for v in views)
    # 100 copies of 10,000 pointers would be 8 MB; 100 views are a few kB
    assert grown < 100 * 10_000 * 8 // 50


def test_a_snapshot_never_changes_when_messages_join_later():
    conversation = _long(2)
    first = conversation.snapshot()
    kept = tuple(first)
    conversation.append(UserMessage("u9", "more"))
    assert first == kept and len(first) == 4
    assert conversation.snapshot() == (*kept, UserMessage("u9", "more"))


def test_a_snapshot_taken_mid_batch_keeps_its_order_when_an_earlier_call_answers_late():
    """Bug (a shared list): a parallel batch's result is placed by its call's
    position, before results already there; a view holding those would see a
    message move. The conversation moves to a copy instead."""
    first, second = call("add", "c1"), call("add", "c2")
    conversation = Conversation.from_messages([UserMessage("u1", "go")])
    conversation.append(AssistantMessage("a1", (first, second)))
    conversation.append(_result("c2", "2"))  # the second call answers first
    held = conversation.snapshot()
    kept = tuple(held)
    conversation.append(_result("c1", "1"))  # placed before c2's result
    assert held == kept and [m.id for m in held][-1] == "result-c2"
    assert [m.id for m in conversation.snapshot()][-2:] == ["result-c1", "result-c2"]
    again = conversation.snapshot()
    conversation.append(UserMessage("u2", "next"))
    assert len(again) == 4 and again[-1].id == "result-c2"


def test_a_turn_result_taken_earlier_never_changes():
    """Every turn's result shares the session's transcript: an earlier one still
    holds the transcript as it was after its own turn, equal to the tuple of it."""
    counter = iter(range(100))

    def answer(request: object) -> object:
        return scripted_response(f"r{next(counter)}", "ok")

    async def main() -> None:
        agent = Agent(model=CallableModel(answer))
        first = await agent.prompt("one")
        kept = tuple(first.messages)
        second = await agent.prompt("two")
        assert type(first.messages) is Transcript and len(first.messages) == 2
        assert first.messages == kept and second.messages[:2] == kept
        assert len(second.messages) == 4 and agent.messages == second.messages
        # a new agent takes a transcript as it takes a tuple
        fork = Agent(model=CallableModel(answer), messages=second.messages)
        assert fork.messages == second.messages

    trio.run(main)
