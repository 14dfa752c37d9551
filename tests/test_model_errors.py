"""An exception from the model's stream or response ends the run as MODEL_ERROR (DESIGN 7)."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
from helpers import assert_stream_shape, call, settle, start, user

from trio_agent import Failed, ModelChunk, TextDelta, ToolRegistry, UserMessage, run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response


async def assert_model_error(run, match: str, *, chunks: int = 0, steps: int = 1):
    events, result = await settle(run)
    assert isinstance(result, Failed), result
    assert result.code == "MODEL_ERROR"
    assert match in result.detail, result.detail
    assert result.messages == (user(),), "a partial assistant message was appended"
    assert result.steps == steps
    assert sum(isinstance(e, ModelChunk) for e in events) == chunks
    assert_stream_shape(events, result)
    return result


async def test_exception_opening_the_stream():
    run, _ = start([ConnectionError("connection refused")])
    await assert_model_error(run, "ConnectionError: connection refused")


@pytest.mark.parametrize(("raise_at", "chunks"), [(0, 0), (2, 2), (4, 4)])
async def test_exception_while_streaming_or_in_response(raise_at, chunks):
    run, _ = start(
        [
            scripted_response(
                "r1", "abcd", text_chunks=4, raise_at=raise_at, error=OSError("stream dropped")
            )
        ]
    )
    await assert_model_error(run, "OSError: stream dropped", chunks=chunks)


async def test_script_exhausted_is_a_model_error_on_the_second_step():
    run, _ = start([scripted_response("r1", [call("add", "c1", {"left": 1, "right": 1})])])
    events, result = await settle(run)
    assert result.code == "MODEL_ERROR" and "ScriptExhaustedError" in result.detail
    assert [m.id for m in result.messages] == ["user-001", "message-r1", "tool-result-c1"]
    assert result.steps == 2


class BrokenModels:
    """Models that break the boundary in ways a provider adapter might."""

    @staticmethod
    def not_a_context_manager():
        class M:
            def stream(self, request):
                return object()

        return M()

    @staticmethod
    def fails_on_exit():
        class M:
            def stream(self, request):
                inner = ScriptedModel([scripted_response("r1", "hi")])

                @asynccontextmanager
                async def cm():
                    async with inner.stream(request) as s:
                        yield s
                    raise RuntimeError("close failed")

                return cm()

        return M()

    @staticmethod
    def raises_a_group():
        class M:
            def stream(self, request):
                raise ExceptionGroup("several", [ValueError("a"), KeyError("b")])

        return M()


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (BrokenModels.not_a_context_manager, "TypeError"),
        (BrokenModels.fails_on_exit, "RuntimeError: close failed"),
        (BrokenModels.raises_a_group, "ExceptionGroup (ValueError: a; KeyError: 'b')"),
    ],
)
async def test_broken_model_boundaries_are_model_errors(factory, match):
    run = run_agent_loop(messages=[user()], model=factory(), tools=ToolRegistry(), max_steps=1)
    events, result = await settle(run)
    assert result.code == "MODEL_ERROR" and match in result.detail
    assert result.messages == (user(),)


async def test_a_model_that_swallows_errors_on_exit_still_gives_a_protocol_error():
    class Swallowing:
        def stream(self, request):
            inner = ScriptedModel([scripted_response("r1", "hi", chunks=["not a chunk"])])
            context = inner.stream(request)

            class CM:
                async def __aenter__(self):
                    return await context.__aenter__()

                async def __aexit__(self, *exc):
                    return True  # swallows anything

            return CM()

    run = run_agent_loop(messages=[user()], model=Swallowing(), tools=ToolRegistry(), max_steps=1)
    result = await run.wait()
    assert result.code == "MODEL_PROTOCOL_ERROR"


async def test_chunks_before_the_error_were_emitted_but_not_kept():
    run, _ = start(
        [
            scripted_response(
                "r1",
                "partial answer",
                chunks=[TextDelta("partial ")],
                raise_at=1,
                error=TimeoutError("read timeout"),
            )
        ],
        messages=[user()],
    )
    result = await assert_model_error(run, "TimeoutError: read timeout", chunks=1)
    assert not any(isinstance(m, UserMessage) and m.id != "user-001" for m in result.messages)
