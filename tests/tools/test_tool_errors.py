"""Recoverable tool errors reach the next request; FatalToolError fails the run (DESIGN 6, 7)."""

from __future__ import annotations

from helpers import add, assert_stream_shape, call, settle, start

from trio_agent import Failed, FatalToolError, ToolError, ToolRegistry, tool
from trio_agent.testing import scripted_response


@tool
async def refuses(path: str) -> str:
    """Always refuses."""
    raise ToolError(f"permission denied: {path}")


@tool
async def crashes() -> str:
    """Always crashes."""
    raise ValueError("bad state")


async def test_every_recoverable_error_reaches_the_next_request():
    calls = [
        call("refuses", "c1", {"path": "/etc/shadow"}),
        call("crashes", "c2"),
        call("missing_tool", "c3", {"x": 1}),
        call("add", "c4", {"left": "one", "right": 2}),
        call("add", "c5", {"left": 1, "right": 2}),
    ]
    run, model = start(
        [scripted_response("r1", calls), scripted_response("r2", "recovered")],
        tools=ToolRegistry([add, refuses, crashes]),
    )
    events, result = await settle(run)
    assert result.status == "completed" and result.final_text == "recovered"
    results = model.requests[1].messages[2:]
    assert [(r.tool_call_id, r.is_error) for r in results] == [
        ("c1", True),
        ("c2", True),
        ("c3", True),
        ("c4", True),
        ("c5", False),
    ]
    assert results[0].content == 'Tool "refuses" failed: permission denied: /etc/shadow'
    assert results[1].content == 'Tool "crashes" raised ValueError: bad state'
    assert results[2].content.startswith('Unknown tool "missing_tool"')
    assert results[3].content == (
        'Invalid arguments for tool "add": Expected `int`, got `str` - at `$.left`'
    )
    assert results[4].content == '{"sum":3}'
    assert [e.type for e in events].count("tool.finished") == 5
    assert_stream_shape(events, result)


async def test_fatal_tool_error_fails_the_run_without_a_result_for_that_call():
    executed = []

    @tool
    async def fatal() -> str:
        raise FatalToolError("credentials revoked")

    @tool
    async def after() -> str:
        executed.append("after")
        return "ran"

    run, model = start(
        [
            scripted_response(
                "r1",
                [
                    call("add", "c1", {"left": 1, "right": 1}),
                    call("fatal", "c2"),
                    call("after", "c3"),
                ],
            ),
            scripted_response("r2", "unreachable"),
        ],
        tools=ToolRegistry([add, fatal, after]),
    )
    events, result = await settle(run)
    assert isinstance(result, Failed)
    assert result.code == "TOOL_FATAL"
    assert "fatal" in result.detail and "credentials revoked" in result.detail
    assert model.call_count == 1 and executed == []
    assert [m.id for m in result.messages] == ["user-001", "message-r1", "tool-result-c1"]
    assert [e.type for e in events] == [
        "message.accepted",
        "model.chunk",
        "model.chunk",
        "model.chunk",
        "tool.started",
        "tool.finished",
        "tool.started",
        "run.finished",
    ]
    assert_stream_shape(events, result)
