"""The workloads on the OpenAI Agents SDK (see run.py): a custom Model, tracing off."""

from __future__ import annotations

import asyncio
import json
import time

from _common import emit, event_rate, serve
from agents import (
    Agent,
    ModelResponse,
    RunConfig,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
)
from agents.models.interface import Model
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
)

_TEXT = "0123456789" * 4


def _steps_done(items) -> int:
    """Tool steps done so far, read off the last input item (call ids count up), so the
    scripted model costs the same at every step and W5 measures the framework."""
    last = items[-1] if isinstance(items, list) and items else None
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return int(last["call_id"][1:]) + 1
    return 0


class ScriptedModel(Model):
    """``steps`` tool steps calling ``tool`` (add by default), then a final text."""

    def __init__(self, steps: int, tool: str = "add") -> None:
        self.steps = steps
        self.tool = tool

    async def get_response(
        self,
        system_instructions,
        input,
        model_settings,
        tools,
        output_schema,
        handoffs,
        tracing,
        *,
        previous_response_id=None,
        conversation_id=None,
        prompt=None,
    ) -> ModelResponse:
        outputs = _steps_done(input)
        if outputs < self.steps:
            item = ResponseFunctionToolCall(
                arguments=json.dumps({"left": outputs, "right": 1} if self.tool == "add" else {}),
                call_id=f"c{outputs}",
                name=self.tool,
                type="function_call",
                id=f"fc{outputs}",
                status="completed",
            )
        else:
            item = ResponseOutputMessage(
                id="m",
                role="assistant",
                status="completed",
                type="message",
                content=[ResponseOutputText(text="done", type="output_text", annotations=[])],
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    async def stream_response(self, system_instructions, input, *args, **kwargs):
        """W2: the text in 10 deltas, then the whole response, as the Responses API streams."""
        outputs = _steps_done(input)
        for i in range(10):
            yield ResponseTextDeltaEvent(
                type="response.output_text.delta",
                item_id="m",
                output_index=0,
                content_index=0,
                delta=_TEXT[i * 4 : (i + 1) * 4],
                sequence_number=i,
                logprobs=[],
            )
        text = ResponseOutputText(text=_TEXT, type="output_text", annotations=[])
        output: list = [
            ResponseOutputMessage(
                id="m", role="assistant", status="completed", type="message", content=[text]
            )
        ]
        if outputs < self.steps:
            output.append(
                ResponseFunctionToolCall(
                    arguments=json.dumps({"left": outputs, "right": 1}),
                    call_id=f"c{outputs}",
                    name=self.tool,
                    type="function_call",
                    id=f"fc{outputs}",
                    status="completed",
                )
            )
        response = Response(
            id="r",
            created_at=0,
            model="scripted",
            object="response",
            output=output,
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=10
        )


@function_tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


@function_tool
async def slow() -> str:
    """Sleep ten seconds."""
    await asyncio.sleep(10)
    return "late"


_AGENTS: dict[int, Agent] = {}


async def run(steps: int) -> None:
    agent = _AGENTS.setdefault(
        steps, Agent(name="peer", instructions="add", model=ScriptedModel(steps), tools=[add])
    )
    result = await Runner.run(
        agent, "add them", max_turns=steps + 5, run_config=RunConfig(tracing_disabled=True)
    )
    assert result.final_output == "done", result.final_output


async def concurrently(runs: int) -> None:
    await asyncio.gather(*(run(4) for _ in range(runs)))


async def w2(rounds: int) -> None:
    """Every event of ``Runner.run_streamed`` consumed; events per second."""
    agent = Agent(name="w2", instructions="add", model=ScriptedModel(64), tools=[add])

    async def once() -> int:
        count = 0
        result = Runner.run_streamed(
            agent, "add them", max_turns=70, run_config=RunConfig(tracing_disabled=True)
        )
        async for _ in result.stream_events():
            count += 1
        assert result.final_output == _TEXT, result.final_output
        return count

    await event_rate("openai-agents", "w2", rounds, once)


async def _w4_once() -> tuple[float, list[str]]:
    agent = Agent(name="w4", instructions="wait", model=ScriptedModel(1, "slow"), tools=[slow])
    session = SQLiteSession("w4")  # in memory: what the SDK keeps of the run
    start = time.perf_counter()
    try:
        run = Runner.run(
            agent, "wait", session=session, run_config=RunConfig(tracing_disabled=True)
        )
        await asyncio.wait_for(run, 0.05)
    except TimeoutError:
        pass
    returned = time.perf_counter() - start
    return returned, [str(item.get("type", item.get("role"))) for item in await session.get_items()]


async def w4() -> None:
    """The session's history after a cancel with the tool in flight."""
    await _w4_once()  # warm-up: the first run pays for imports and SQLite set-up
    returned, history = await _w4_once()
    emit("openai-agents", "w4", seconds_to_return=returned, history=history)


async def main() -> None:
    await serve("openai-agents", run, concurrently, {"w2": w2, "w4": w4})


if __name__ == "__main__":
    asyncio.run(main())
