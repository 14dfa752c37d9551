"""``Transcript``: a frozen view that behaves as a tuple of messages does."""

from __future__ import annotations

import copy
import pickle

import msgspec
import pytest

from trio_agent import (
    AssistantMessage,
    Message,
    TextBlock,
    Transcript,
    TurnCompleted,
    TurnResult,
    Usage,
    UserMessage,
)
from trio_agent.messages._view import Window

U1 = UserMessage("u1", "hi")
A1 = AssistantMessage("a1", (TextBlock("hello"),))
U2 = UserMessage("u2", "again")
MESSAGES: tuple[Message, ...] = (U1, A1, U2)


def test_a_transcript_reads_as_the_tuple_of_its_messages():
    view = Transcript(Window([*MESSAGES, UserMessage("later", "not in the view")], 3))
    assert len(view) == 3 and list(view) == list(MESSAGES)
    assert view[0] is U1 and view[-1] is U2 and view[-3] is U1
    for bad in (3, -4):
        with pytest.raises(IndexError):
            view[bad]
    assert view[1:] == (A1, U2) and type(view[1:]) is tuple and view[::-1] == MESSAGES[::-1]
    assert list(reversed(view)) == [U2, A1, U1]
    assert view == MESSAGES and MESSAGES == view and not view != MESSAGES
    assert view != MESSAGES[:2] and view != list(MESSAGES)
    assert hash(view) == hash(MESSAGES) and {view: 1}[MESSAGES] == 1
    assert view == Transcript(MESSAGES) and view < (*MESSAGES, U1) and (U1,) < view
    assert view + (U1,) == (*MESSAGES, U1) and (U1,) + view == (U1, *MESSAGES)  # noqa: RUF005
    assert view * 2 == MESSAGES * 2 and 2 * view == MESSAGES * 2
    assert A1 in view and UserMessage("later", "not in the view") not in view
    assert view.index(A1) == 1 and view.count(U1) == 1
    assert repr(view) == f"Transcript({MESSAGES!r})"
    assert pickle.loads(pickle.dumps(view)) == view
    assert copy.copy(view) is view and copy.deepcopy(view) is view


def test_a_transcript_encodes_with_enc_hook_tuple_and_decodes_equal():
    """A result holding a Transcript encodes as the tuple would (and is read back
    as a tuple, equal to it)."""
    result = TurnResult(
        turn=1,
        end=TurnCompleted(),
        steps=1,
        final_text="hello",
        usage=Usage(),
        messages=Transcript(Window(list(MESSAGES), 2)),
    )
    data = msgspec.json.encode(result, enc_hook=tuple)
    assert data == msgspec.json.encode(msgspec.structs.replace(result, messages=(U1, A1)))
    back = msgspec.json.decode(data, type=TurnResult)
    assert back == result and type(back.messages) is tuple


def test_a_transcript_is_made_of_messages_only():
    for bad in ("abc", [U1, "not a message"], 3):
        with pytest.raises(TypeError, match="Transcript takes"):
            Transcript(bad)  # type: ignore[arg-type]
    assert Transcript() == () and Transcript([U1]) == (U1,)
