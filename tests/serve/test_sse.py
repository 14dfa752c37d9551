"""The event stream: its framing, and what a client going away does to the turn."""

from __future__ import annotations

import serve_agents
import trio
from serving import client, running
from sse_client import finished, never, read_until
from waiting import wait_until

from trio_agent.serve._sse import frame

EVENTS = "/sessions/s/events"


def test_an_event_is_framed_with_its_sequence_as_id():
    assert frame(12, b'{"schema":1}') == b'id: 12\ndata: {"schema":1}\n\n'


async def test_a_client_going_away_detaches_by_default(tmp_path):
    """The reader disconnects mid-turn: the turn goes on and completes."""
    async with running(tmp_path) as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        await read_until(url, EVENTS, lambda e: e["type"] == "tool.started")
        await wait_until(lambda: server.hub.readers("s") == 0)
        assert server.hub.running_turn("s") == 1
        serve_agents.release("g")
        events = await read_until(url, EVENTS, finished(1))
        assert events[-1][1]["event"]["result"]["end"]["reason"] == "completed"


async def test_on_disconnect_cancel_cancels_the_turn_its_last_reader_left(tmp_path):
    """With ``on_disconnect="cancel"``: one of two readers leaving changes nothing;
    the last one leaving cancels the turn (recorded as cancelled)."""
    async with running(tmp_path, on_disconnect="cancel") as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: read_until(url, EVENTS, never))
            await read_until(url, EVENTS, lambda e: e["type"] == "tool.started")
            await wait_until(lambda: server.hub.readers("s") == 1)
            assert server.hub.running_turn("s") == 1  # one reader is left
            nursery.cancel_scope.cancel()  # the other goes away too
        await wait_until(lambda: server.hub.running_turn("s") is None)
        events = await read_until(url, EVENTS, finished(1))
        assert events[-1][1]["event"]["result"]["end"]["reason"] == "cancelled"


async def test_the_server_stopping_ends_the_streams_and_cancels_nothing(tmp_path):
    """A stream open when the server stops ends once it sent every event, and is
    not taken for a client that went away (no turn is cancelled for it)."""
    async with running(tmp_path, on_disconnect="cancel") as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold g"})
        seen: list = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: read_until(url, EVENTS, lambda e: False, got=seen))
            await wait_until(lambda: any(d["event"]["type"] == "tool.started" for _, d in seen))
            server.stop()
            serve_agents.release("g")
        assert seen[-1][1]["event"]["type"] == "turn.finished"
        assert seen[-1][1]["event"]["result"]["end"]["reason"] == "completed"


async def test_an_events_data_is_byte_for_byte_the_line_json_prints():
    """Section 12.5: ``data:`` is the event's JSON as ``--json`` prints it. Two
    encoders make the two (the event log's and the command line's): every event of
    a turn with thinking, a tool call of odd text and a typed output must come out
    of both alike."""
    import msgspec

    from trio_agent import Agent, tool
    from trio_agent.cli._output import Printer
    from trio_agent.messages import TextBlock, ThinkingBlock, ToolCall
    from trio_agent.serve._eventlog import encode_event
    from trio_agent.testing import ScriptedModel, scripted_response

    class Report(msgspec.Struct):
        title: str
        score: float

    @tool
    async def note(text: str) -> str:
        """Keep a note."""
        return f"kept {text}"

    odd = 'é😀\u2028"\\</script>\x1f'
    script = [
        scripted_response(
            "r1", [ThinkingBlock("hmm", "sig"), ToolCall("c1", "note", {"text": odd})]
        ),
        scripted_response("r2", [TextBlock(msgspec.json.encode(Report(odd, 0.5)).decode())]),
    ]
    agent = Agent(
        model=ScriptedModel(script), tools=[note], output_type=Report, output_mode="native"
    )

    class Out:
        is_terminal = False

        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

    out, lines = Out(), []
    printer = Printer(out, as_json=True)  # type: ignore[arg-type]
    async with agent.turn("go") as run:
        async for event in run:
            printer(event)
            lines.append(encode_event(event))
    assert lines and b'"output":{"title":' in lines[-1] and b"thinking" in lines[2]
    assert out.text.encode() == b"".join(line + b"\n" for line in lines)
