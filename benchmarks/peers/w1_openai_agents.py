"""W1 on the OpenAI Agents SDK: a custom Model, tracing disabled, max_turns high enough."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

STEPS = 64


class ScriptedModel(Model):
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
        outputs = sum(
            1
            for item in input
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        )
        if outputs < STEPS:
            item = ResponseFunctionToolCall(
                arguments=json.dumps({"left": outputs, "right": 1}),
                call_id=f"c{outputs}",
                name="add",
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

    def stream_response(self, *args, **kwargs):  # pragma: no cover - not used by W1
        raise NotImplementedError


@function_tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


agent = Agent(name="w1", instructions="add", model=ScriptedModel(), tools=[add])


async def once() -> float:
    start = time.perf_counter()
    result = await Runner.run(
        agent, "add them", max_turns=STEPS + 5, run_config=RunConfig(tracing_disabled=True)
    )
    elapsed = time.perf_counter() - start
    assert result.final_output == "done", result.final_output
    return elapsed / (STEPS + 1)


async def main(rounds: int) -> None:
    times = [await once() for _ in range(rounds)]
    print(json.dumps({"framework": "openai-agents", "us_per_step": statistics.median(times) * 1e6}))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
