"""The workloads on the OpenAI Agents SDK (see run.py): a custom Model, tracing off."""

from __future__ import annotations

import asyncio
import json
import time

from _common import (
    TURN_REQUESTS,
    W3_REQUESTS,
    Plan,
    emit,
    event_rate,
    prompt_start,
    serve,
    turn_plan,
    turn_prompt,
)
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


def _next_call(items, plan: Plan) -> int | None:
    """The index of the call to make next, or None for the turn's final text, read
    off the last input item alone (call ids count up; a turn's user message says
    where it starts), so the scripted model costs the same at every step and W5
    measures the framework."""
    if isinstance(items, str):
        return plan.at_turn_start(prompt_start(items))
    last = items[-1]
    if last.get("type") == "function_call_output":
        return plan.after_result(int(last["call_id"][1:]))
    if last.get("role") == "user":
        return plan.at_turn_start(prompt_start(last["content"]))
    raise AssertionError(f"unexpected last input item {last!r}")


class ScriptedModel(Model):
    """The turns of ``turn_plan(requests)``: tool steps calling ``tool`` (add by
    default), then a final text."""

    def __init__(self, requests: int, tool: str = "add") -> None:
        self.plan = Plan(requests)
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
        index = _next_call(input, self.plan)
        if index is not None:
            item = ResponseFunctionToolCall(
                arguments=json.dumps({"left": index, "right": 1} if self.tool == "add" else {}),
                call_id=f"c{index}",
                name=self.tool,
                type="function_call",
                id=f"fc{index}",
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
        index = _next_call(input, self.plan)
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
        if index is not None:
            output.append(
                ResponseFunctionToolCall(
                    arguments=json.dumps({"left": index, "right": 1}),
                    call_id=f"c{index}",
                    name=self.tool,
                    type="function_call",
                    id=f"fc{index}",
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


async def run(requests: int) -> None:
    agent = _AGENTS.setdefault(
        requests,
        Agent(name="peer", instructions="add", model=ScriptedModel(requests), tools=[add]),
    )
    items: str | list = "add them"  # a later turn goes on with the whole conversation so far
    for start, steps in turn_plan(requests):
        if start:
            items = [*items, {"role": "user", "content": turn_prompt(start)}]
        result = await Runner.run(
            agent, items, max_turns=steps + 5, run_config=RunConfig(tracing_disabled=True)
        )
        assert result.final_output == "done", result.final_output
        items = result.to_input_list()


async def concurrently(runs: int) -> None:
    await asyncio.gather(*(run(W3_REQUESTS) for _ in range(runs)))


async def w2(rounds: int) -> None:
    """Every event of ``Runner.run_streamed`` consumed; events per second."""
    agent = Agent(name="w2", instructions="add", model=ScriptedModel(TURN_REQUESTS), tools=[add])

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
    agent = Agent(name="w4", instructions="wait", model=ScriptedModel(2, "slow"), tools=[slow])
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
