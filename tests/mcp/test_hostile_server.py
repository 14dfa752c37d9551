"""MCP servers that attack the client (hardening): a tool's ``outputSchema`` or
``inputSchema`` built to hold the event loop, a tool list that never comes or
never ends, a flood of requests. Server: tests/mcp/hostile_server.py (bare
JSON-RPC, so it can send what no SDK server would)."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from waiting import wait_until

pytest.importorskip("mcp")

from mcp.shared import jsonrpc_dispatcher

from trio_agent.mcp import MCPServerError, MCPServerHTTP, MCPServerStdio
from trio_agent.mcp._listing import MAX_SERVER_REQUESTS
from trio_agent.tools import ToolArgumentsError, ToolError

WAIT = 120  # seconds: only a failing test waits this long
SERVER = str(Path(__file__).with_name("hostile_server.py"))
EVIL = "^(a+)+$"
OK_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def hostile(
    mode: str,
    tools: list[dict[str, Any]] | None = None,
    init_seconds: float = WAIT / 4,
    **env: Any,
) -> MCPServerStdio:
    """The hostile server in ``mode``, listing ``tools`` (else one tool, ``ok``)."""
    environment = {"MODE": mode, **{key: str(value) for key, value in env.items()}}
    if tools is not None:
        environment["TOOLS"] = json.dumps(tools)
    return MCPServerStdio(sys.executable, [SERVER], env=environment, init_seconds=init_seconds)


def listing_file(tmp_path: Path, tools: list[dict[str, Any]]) -> str:
    """A file holding ``tools`` for the server (too big for its environment)."""
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools))
    return str(path)


async def test_a_tools_output_schema_is_not_matched_on_the_event_loop(monkeypatch):
    """The SDK's ``call_tool`` checked ``structuredContent`` against the server's
    ``outputSchema`` with ``jsonschema`` (Python's ``re``) on the trio thread:
    ``^(a+)+$`` against 26 ``a``s and ``!`` held it 2.3 s, 40 for hours (and a
    ``$ref`` bomb as long). The result is the server's word either way, so it is
    not checked against the server's own schema: the call returns the result and
    ``re`` never sees the server's text."""
    output = {"type": "object", "properties": {"v": {"type": "string", "pattern": EVIL}}}
    tools = [{"name": "ok", "inputSchema": OK_SCHEMA, "outputSchema": output}]
    answer = {
        "content": [{"type": "text", "text": "the text"}],
        "structuredContent": {"v": "aaaa!"},  # quick to refuse here; 40 a's: hours
    }
    asked: list[object] = []
    search = re.search

    def watched(pattern: Any, string: Any, *rest: Any) -> Any:
        if string == "aaaa!":
            asked.append(pattern)
        return search(pattern, string, *rest)

    with trio.fail_after(WAIT):
        async with hostile("result", tools, RESULT=json.dumps(answer)) as server:
            [tool] = server.tools()
            monkeypatch.setattr(re, "search", watched)
            outcome = await tool.execute({})
            monkeypatch.undo()
    assert outcome == "the text"
    assert asked == []


def ref_bomb(levels: int) -> dict[str, Any]:
    """An inputSchema whose ``a`` applies each level's schema twice, to ``levels``:
    2**levels checks of one argument."""
    defs: dict[str, Any] = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "object"}
    return {"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}}


async def test_an_input_schema_that_refers_to_itself_exponentially_refuses_the_call():
    """A ``$ref`` bomb in an inputSchema: ``jsonschema`` checked the arguments on
    the trio thread, each level twice, 20 levels holding it some 25 s, 30 for
    hours (no deadline can end it: the loop is held). The check now stops past
    ``CHECK_STEPS`` keywords and refuses the call, saying why."""
    tools = [{"name": "bomb", "inputSchema": ref_bomb(20)}]
    with trio.fail_after(WAIT):
        async with hostile("tools", tools) as server:
            [tool] = server.tools()
            with pytest.raises(ToolArgumentsError, match=r"could not be checked .* steps"):
                await tool.execute({"a": {}})


async def test_an_input_schema_with_references_still_checks_arguments():
    """The step bound leaves sane ``$ref``s alone: a bomb of a few levels still
    checks (and here refuses an argument of the wrong type, at its path)."""
    tools = [{"name": "refs", "inputSchema": ref_bomb(4)}]
    with trio.fail_after(WAIT):
        async with hostile("tools", tools) as server:
            [tool] = server.tools()
            assert await tool.execute({"a": {}}) == "done"
            with pytest.raises(ToolArgumentsError, match=r"not of type 'object' - at `\$\.a`"):
                await tool.execute({"a": 1})


async def test_a_listing_never_answered_ends_refresh_within_init_seconds():
    """A server that answers the first ``tools/list`` and no other held
    ``refresh()`` for ever (and the listing after a ``list_changed``, so no later
    change was ever seen): only the first listing was bounded. Every listing
    now is, by ``init_seconds``; the list stays as it was."""
    with trio.fail_after(WAIT):
        async with hostile("hang_list", init_seconds=5) as server:
            before = server.tools()
            with pytest.raises(MCPServerError, match="tools/list was not answered within 5 s"):
                await server.refresh()
            assert server.tools() == before


def tasks_alive() -> int:
    """The tasks of this ``trio.run``, all of them."""
    count, nurseries = 0, list(trio.lowlevel.current_root_task().child_nurseries)
    while nurseries:
        for task in nurseries.pop().child_tasks:
            count += 1
            nurseries.extend(task.child_nurseries)
    return count


async def test_a_server_asking_without_reading_the_answers_holds_bounded_tasks():
    """The SDK runs a task per request the server sends, which waits until its
    answer is written: 100,000 pings from a server that never read the answers
    made a task for each (100,000 pings: 930 MB). The server's open requests are bounded
    (``MAX_SERVER_REQUESTS``); the rest are dropped, and the call still gets
    its answer."""
    with trio.fail_after(WAIT):
        async with hostile("flood", FLOOD="ping", COUNT=5000) as server:
            before = tasks_alive()
            [tool] = server.tools()
            assert await tool.execute({}) == "done"
            during = tasks_alive()  # the server has read none of our answers yet
    assert during - before <= MAX_SERVER_REQUESTS + 8  # observed before: 1,015 more


async def test_a_server_flooding_its_stdout_with_garbage_does_not_flood_the_log(caplog):
    """Review of issue 38: each stdout line that was no JSON-RPC message was a
    warning, so a server writing garbage in a loop filled the log. Ten are
    warnings (and a note that more go to DEBUG); the rest are DEBUG records."""
    caplog.set_level(logging.DEBUG, logger="trio_agent.mcp")
    with trio.fail_after(WAIT):
        async with hostile("flood", FLOOD="garbage", COUNT=500) as server:
            [tool] = server.tools()
            assert await tool.execute({}) == "done"
    ours = [r for r in caplog.records if r.name == "trio_agent.mcp"]
    warned = [r.getMessage() for r in ours if r.levelno == logging.WARNING]
    lines = [text for text in warned if "not a JSON-RPC message" in text]
    assert len(lines) == 10 and "this is not JSON 9" in lines[9], warned
    # each line is also handed to the session as an error: noted the same way
    assert sum("more of these are logged at DEBUG" in text for text in warned) == 2
    assert len(warned) == 22, warned
    noted = [r for r in ours if r.levelno == logging.DEBUG and "not a JSON-RPC" in r.getMessage()]
    assert len(noted) == 490


@pytest.mark.parametrize(
    ("count", "description"),
    [(1025, ""), (65, "d" * 256 * 1024)],
    ids=["1025 tools", "17 MB of tools"],
)
async def test_a_listing_too_big_to_take_is_refused_at_entry(tmp_path, count, description):
    """100,000 tools in one page took 10 s to take in, the event loop held 8.8 s
    of it, and 1 GB (100 pages of such: 100 times that). A listing is now held to
    ``MAX_TOOLS`` tools and ``MAX_LISTING_BYTES``, checked page by page: past
    either, the server cannot be used, and the error says why."""
    tools = [
        {"name": f"t{i}", "description": description, "inputSchema": OK_SCHEMA}
        for i in range(count)
    ]
    server = hostile("tools", TOOLS_FILE=listing_file(tmp_path, tools))
    with trio.fail_after(WAIT), pytest.raises(MCPServerError, match="more than 1024 tools"):
        async with server:
            pass


async def test_a_tool_whose_schema_is_too_big_is_left_out(tmp_path, caplog):
    """A single inputSchema of tens of MB was copied on the event loop (seconds
    held); one over 256 KiB now leaves its tool out, with a warning, as one nested
    too deeply does; the server's other tools stay."""
    big = {"type": "object", "properties": {"a": {"type": "string", "description": "d" * 2**18}}}
    tools = [{"name": "big", "inputSchema": big}, {"name": "ok", "inputSchema": OK_SCHEMA}]
    with trio.fail_after(WAIT):
        async with hostile("tools", TOOLS_FILE=listing_file(tmp_path, tools)) as server:
            assert [tool.name for tool in server.tools()] == ["ok"]
    assert "tool 'big' left out: its inputSchema is over 256 KiB" in caplog.text


async def test_a_second_entry_while_the_first_is_under_way_is_refused():
    """Two tasks entering one server at once both got past the "entered once"
    check (it looked at state set only once entry was done): each started a
    connection over the other's, and both failed with an unrelated error. The
    second entry is now a ``RuntimeError`` at once; the first is unharmed."""
    server = hostile("tools")
    errors: list[Exception] = []
    listed: list[str] = []

    async def enter() -> None:
        try:
            async with server:
                listed.extend(tool.name for tool in server.tools())
        except Exception as exc:
            errors.append(exc)

    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(enter)
            nursery.start_soon(enter)
    [error] = errors
    assert isinstance(error, RuntimeError) and "can be entered once" in str(error)
    assert listed == ["ok"]


async def test_cancelling_calls_to_a_server_that_stopped_reading_returns_at_once(
    tmp_path, monkeypatch
):
    """The SDK writes a cancelled call's ``notifications/cancelled`` shielded, for
    up to 5 s (60 here): with a server that stopped reading its stdin (the pipe
    full of our calls), cancelling a call held the canceller that long. The
    notification is now handed to a task of the connection, which writes it
    when it can: the cancelled calls return at once."""
    monkeypatch.setattr(jsonrpc_dispatcher, "_ABANDON_WRITE_TIMEOUT", 60.0)
    record = tmp_path / "record"
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    tools = [{"name": "ok", "inputSchema": schema}]
    with trio.fail_after(WAIT * 2):
        async with hostile("hang_call", tools, DEAF=1, RECORD=record) as server:
            [tool] = server.tools()
            with trio.CancelScope() as calls:
                async with trio.open_nursery() as nursery:
                    for _ in range(40):  # 160 KB: more than the pipe holds
                        nursery.start_soon(tool.execute, {"a": "x" * 4000})
                    await wait_until(lambda: record.exists() and "call" in record.read_text())
                    await trio.testing.wait_all_tasks_blocked()
                    cancelled_at = trio.current_time()
                    calls.cancel()
            held = trio.current_time() - cancelled_at
    assert held < 30  # observed before: 60, the SDK's bound


async def test_a_failed_calls_description_is_bounded_and_quick():
    """A server's answer that is no valid result was described with pydantic's
    own text: all its errors, 13 for each bad content block, each with the input
    quoted. 200 bad blocks (4 KB) gave the model an error result of 560 KB,
    formatted on the event loop (20,000: 56 MB and 1.5 s); a JSON-RPC error's
    message reached it whole. A description now counts the errors, names the
    first few only when there are few, and is cut to 2,000 characters."""
    bad = {"content": [{"type": "bogus"}] * 200}
    with trio.fail_after(WAIT):
        async with hostile("result", RESULT=json.dumps(bad)) as server:
            [tool] = server.tools()
            with pytest.raises(ToolError) as invalid:
                await tool.execute({})
        async with hostile("error", ERROR_CHARS=100_000) as server:
            [tool] = server.tools()
            with pytest.raises(ToolError) as refused:
                await tool.execute({})
    said = str(invalid.value)
    assert said == "ValidationError: 2600 validation errors for CallToolResult", said[:300]
    assert len(str(refused.value)) == 2000 and str(refused.value).endswith("x...")


async def test_an_invalid_listing_is_described_in_a_bounded_error():
    """Entering a server whose listing is no valid ``ListToolsResult`` gave an
    ``MCPServerError`` of pydantic's whole text, growing with the listing (1,000
    bad tools: 240 KB for the user to read). It names the first few errors now."""
    tools = [{"name": f"t{i}", "inputSchema": {"type": "string"}} for i in range(1000)]
    one_bad = [{"name": "ok", "inputSchema": OK_SCHEMA}, {"name": "s", "inputSchema": {"type": 1}}]
    with trio.fail_after(WAIT):
        with pytest.raises(MCPServerError) as many:
            async with hostile("tools", tools):
                pass
        with pytest.raises(MCPServerError) as one:
            async with hostile("tools", one_bad):
                pass
    assert str(many.value).endswith("ValidationError: 1000 validation errors for ListToolsResult")
    assert str(one.value).endswith(
        "ValidationError: 1 validation error for ListToolsResult: "
        "tools.1.inputSchema.type: Input should be 'object'"
    ), str(one.value)


async def serve_hostile_http(
    answer: bytes, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    """A bare streamable HTTP MCP server on loopback (one request a connection):
    it initializes, lists ``ok``, and answers each ``tools/call`` with ``answer``
    as one JSON body; ``task_status`` gets its URL."""

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        fields = dict(line.lower().split(": ", 1) for line in lines[1:])
        while len(body) < int(fields.get("content-length", 0)):
            body += await stream.receive_some(65536)
        status, reply = "405 Method Not Allowed", b""
        if lines[0].startswith("POST"):
            message = json.loads(body)
            status = "202 Accepted"
            if "id" in message:
                status = "200 OK"
                if message["method"] == "initialize":
                    result = {
                        "protocolVersion": message["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "hostile", "version": "0"},
                    }
                else:
                    result = {"tools": [{"name": "ok", "inputSchema": OK_SCHEMA}]}
                reply = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
                reply = reply.encode()
                if message["method"] == "tools/call":
                    reply = answer.replace(b'"ID"', json.dumps(message["id"]).encode())
        elif lines[0].startswith("DELETE"):
            status = "200 OK"
        try:
            await stream.send_all(
                f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
                f"mcp-session-id: s1\r\ncontent-length: {len(reply)}\r\n"
                "connection: close\r\n\r\n".encode()
                + reply
            )
        except trio.BrokenResourceError:
            pass  # the client stopped reading
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        task_status.started(f"http://127.0.0.1:{port}/mcp")


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
async def test_an_http_answer_past_the_bound_is_refused_not_read_whole(monkeypatch):
    """The SDK read an HTTP answer that is no event stream whole
    (``response.aread()``), without bound: a server streaming an endless JSON
    answer filled our memory (a stdio line is held to 64 MiB). Such an answer is
    now read to ``MAX_HTTP_BODY`` at most (1 MiB here), then refused: that call
    gets an error result, and the server goes on serving."""
    from trio_agent.mcp import _servers

    monkeypatch.setattr(_servers, "MAX_HTTP_BODY", 2**20)
    text = "x" * (3 * 2**20)
    answer = {"jsonrpc": "2.0", "id": "ID", "result": {"content": [{"type": "text", "text": text}]}}
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_hostile_http, json.dumps(answer).encode())
            async with MCPServerHTTP(url) as server:
                [tool] = server.tools()
                with pytest.raises(ToolError, match="the server's answer is over 1 MiB"):
                    await tool.execute({})  # observed before: the 3 MiB text, read whole
                assert await server.refresh() == server.tools()  # still serving
            nursery.cancel_scope.cancel()


def sizes_validated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the ``tools`` and ``content`` lists of each result the SDK
    validates (on the trio thread) from now on."""
    from mcp_types import methods

    seen: list[int] = []
    validate = methods.validate_server_result

    def spy(method: str, version: str, data: Any, **kwargs: Any) -> None:
        seen.extend(len(data.get(key) or ()) for key in ("tools", "content"))
        validate(method, version, data, **kwargs)

    monkeypatch.setattr(methods, "validate_server_result", spy)
    return seen


async def test_a_listing_of_too_many_tools_is_refused_before_the_sdk_validates_it(
    tmp_path, monkeypatch
):
    """``MAX_TOOLS`` was checked after the SDK had validated the page, twice, on
    the trio thread: 100,000 tools in one page still held the loop 8 s. A page
    of more is now refused as it is parsed (in a worker thread, for a long line):
    the SDK never sees it."""
    seen = sizes_validated(monkeypatch)
    tools = [{"name": f"t{i}", "inputSchema": OK_SCHEMA} for i in range(2000)]
    server = hostile("tools", TOOLS_FILE=listing_file(tmp_path, tools))
    with trio.fail_after(WAIT), pytest.raises(MCPServerError, match="more than 1024 tools"):
        async with server:
            pass
    assert max(seen, default=0) <= 1024, max(seen)  # observed before: 2000


async def test_a_result_of_many_content_blocks_is_joined_before_the_sdk_validates_it(
    monkeypatch,
):
    """A result of many content blocks was validated by the SDK block by block,
    twice, on the trio thread: 1,000,000 text blocks (30 MB) held the loop 25 s.
    Runs of text blocks are now joined as the line is parsed (the result's texts
    are joined anyway), and a result left with more blocks than a tool result may
    hold (``MAX_CONTENT_BLOCKS``) is refused there, saying so."""
    seen = sizes_validated(monkeypatch)
    png = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    texts = {"content": [{"type": "text", "text": f"{i}"} for i in range(3000)]}
    mixed = {"content": [*texts["content"][:300], png, {"type": "text", "text": "end"}]}
    images = {"content": [png] * 300}
    with trio.fail_after(WAIT):
        outcomes: list[Any] = []
        for answer in (texts, mixed, images):
            async with hostile("result", RESULT=json.dumps(answer)) as server:
                [tool] = server.tools()
                try:
                    outcomes.append(await tool.execute({}))
                except ToolError as exc:
                    outcomes.append(str(exc))
    joined, with_image, refused = outcomes
    assert joined == "\n".join(str(i) for i in range(3000))
    assert [type(block).__name__ for block in with_image.content] == [
        "TextBlock",
        "ImageBlock",
        "TextBlock",
    ]
    assert with_image.content[0].text == "\n".join(str(i) for i in range(300))
    assert "more than 256 content blocks" in refused, refused
    assert max(seen) <= 256, max(seen)  # observed before: 3000


async def test_a_request_we_refuse_is_refused_without_the_sdk_validating_it(tmp_path, monkeypatch):
    """A server's ``sampling/createMessage`` (or ``elicitation/create``) is
    refused whatever it holds, but the SDK validated it first, on the trio
    thread: 100,000 messages held the loop 10 s, 500,000 for 98 s. The SDK is
    handed stand-in params instead of the server's; the server gets the same
    refusals, and its call its answer."""
    from mcp_types import methods

    seen: list[int] = []
    parse = methods.parse_server_request

    def spy(method: str, version: str, params: Any, **kwargs: Any) -> Any:
        seen.append(len(json.dumps(params)))
        return parse(method, version, params, **kwargs)

    monkeypatch.setattr(methods, "parse_server_request", spy)
    record = tmp_path / "record"
    with trio.fail_after(WAIT):
        async with hostile("ask", MESSAGES=2000, RECORD=record) as server:
            [tool] = server.tools()
            assert await tool.execute({}) == "done"
    said = record.read_text()
    for refusal in ("Sampling not supported", "Elicitation not supported", "roots not supported"):
        assert refusal in said, said
    assert max(seen) < 200, seen  # observed before: 122,031 (the server's 2,000 messages)


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
async def test_an_http_result_of_many_content_blocks_is_joined_before_the_sdk_validates_it(
    monkeypatch,
):
    """Over HTTP too, a result of many content blocks was validated by the SDK
    block by block, twice, on the trio thread (the stdio transport joined the
    text runs of a long line, the HTTP one nothing): they are now joined as the
    session reads the answer, before the SDK validates it."""
    seen = sizes_validated(monkeypatch)
    blocks = [{"type": "text", "text": f"{i}"} for i in range(3000)]
    answer = {"jsonrpc": "2.0", "id": "ID", "result": {"content": blocks}}
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_hostile_http, json.dumps(answer).encode())
            async with MCPServerHTTP(url) as server:
                [tool] = server.tools()
                joined = await tool.execute({})
            nursery.cancel_scope.cancel()
    assert joined == "\n".join(str(i) for i in range(3000))
    assert max(seen) <= 256, max(seen)  # observed before: 3000
