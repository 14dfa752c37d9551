"""A 200 answered with one whole JSON message instead of a stream (DESIGN 11.3:
the LiteLLM proxy does so for mocked models on /v1/messages; some servers
ignore ``stream``) is taken as the response: its text one delta, its thinking
one delta per block, calls whole, stop reasons and usage as for a stream.

The documents are recorded non-streamed responses from pydantic-ai's VCR
cassettes (tests/models/cassettes/..., named at each), long strings cut short
and fields we do not read kept; the refusal and cut-call ones are those
recordings with the field changed, in the shapes of the SDKs' types
(openai-python ``ChatCompletionMessage.refusal``, ``ResponseOutputRefusal``,
``IncompleteDetails``; anthropic-sdk-python ``StopReason``).
"""

from __future__ import annotations

import copy
import json
import re
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import Reply

from trio_agent import (
    REJECTED_ARGUMENTS,
    Completed,
    ModelRequest,
    ModelResponseError,
    RedactedThinkingBlock,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolRegistry,
    Usage,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from trio_agent.providers.http._errors import without_lone_escapes

KEY = "sk-test-SECRET-0123456789"
REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())
JSON = {"content-type": "application/json"}


def openai(loopback: Any) -> OpenAIChatModel:
    return OpenAIChatModel("m", api_key=KEY, base_url=f"{loopback.url}/v1")


def anthropic(loopback: Any) -> AnthropicModel:
    return AnthropicModel("m", api_key=KEY, base_url=loopback.url)


def responses(loopback: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("m", api_key=KEY, base_url=f"{loopback.url}/v1")


def document(body: dict[str, Any]) -> Reply:
    return Reply(body=json.dumps(body).encode(), headers=JSON, chunked=True)


async def read(model: Any, request: ModelRequest = REQUEST) -> tuple[list[Any], Any]:
    async with model.stream(request) as stream:
        chunks = [c async for c in stream]
        return chunks, await stream.response()


# test_openai/test_openai_tool_output.yaml, first response
CHAT_CALL: dict[str, Any] = {
    "choices": [
        {
            "finish_reason": "tool_calls",
            "index": 0,
            "logprobs": None,
            "message": {
                "annotations": [],
                "content": None,
                "refusal": None,
                "role": "assistant",
                "tool_calls": [
                    {
                        "function": {"arguments": "{}", "name": "get_user_country"},
                        "id": "call_iXFttys57ap0o16JSlC8yhYo",
                        "type": "function",
                    }
                ],
            },
        }
    ],
    "created": 1746142584,
    "id": "chatcmpl-BSXk0dWkG4hfPt0lph4oFO35iT73I",
    "model": "gpt-4o-2024-08-06",
    "object": "chat.completion",
    "service_tier": "default",
    "system_fingerprint": "fp_f5bdcc3276",
    "usage": {
        "completion_tokens": 12,
        "completion_tokens_details": {"reasoning_tokens": 0},
        "prompt_tokens": 68,
        "prompt_tokens_details": {"audio_tokens": 0, "cached_tokens": 0},
        "total_tokens": 80,
    },
}

# test_openai/test_openai_model_thinking_part.yaml, second response (text cut short)
CHAT_TEXT: dict[str, Any] = {
    "choices": [
        {
            "finish_reason": "stop",
            "index": 0,
            "message": {
                "annotations": [],
                "content": "When it comes to crossing a river safely, the process is quite "
                "different from crossing a street.",
                "refusal": None,
                "role": "assistant",
            },
        }
    ],
    "created": 1743075630,
    "id": "chatcmpl-BFf6N2HvO4lGEP9Y8sCZ6tdTXHeQw",
    "model": "o3-mini-2025-01-31",
    "object": "chat.completion",
    "usage": {
        "completion_tokens": 1789,
        "prompt_tokens": 822,
        "prompt_tokens_details": {"audio_tokens": 0, "cached_tokens": 512},
        "total_tokens": 2611,
    },
}

# test_anthropic/test_anthropic_tool_with_thinking.yaml, first response
SIGNATURE = (
    "EqEECkYICxgCKkAo3UA4WwDbB8ihhpykVCsPx6iMzwNTNP8dePIgYjNpu2EWrt5JbApWWONEZaf5w46939Vu1SDU1//"
    "mDyr2/Vw+EgzsGM/71Y3P0MXKjXUaDHkHCRdukfBjp1m8TSIwzpBcCTBuNvX8NFjVMEou+UuHA4AtNJpahNT/iGfsTwwon4"
)
THOUGHT = (
    'The user is asking about the largest city in "the user country". To answer this question, '
    "I first need to determine what country the user is from."
)
MESSAGE_CALL: dict[str, Any] = {
    "content": [
        {"signature": SIGNATURE, "thinking": THOUGHT, "type": "thinking"},
        {
            "text": "I'll help you find the largest city in your country. First, let me "
            "determine which country you're from.",
            "type": "text",
        },
        {
            "id": "toolu_01YGzqpRE16Vricda3Aqcejo",
            "input": {},
            "name": "get_user_country",
            "type": "tool_use",
        },
    ],
    "id": "msg_01WvueFjZVbHcj4H4zUzeGv2",
    "model": "claude-sonnet-4-20250514",
    "role": "assistant",
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "type": "message",
    "usage": {
        "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "input_tokens": 398,
        "output_tokens": 155,
        "service_tier": "standard",
    },
}

# test_anthropic/test_anthropic_tool_with_thinking.yaml, second response (cut short)
MESSAGE_TEXT: dict[str, Any] = {
    "content": [
        {
            "text": "Based on the information that you're from Mexico, the largest city in "
            "your country is **Mexico City** (Ciudad de México).",
            "type": "text",
        }
    ],
    "id": "msg_01SZ8KP8HhB1TxP6Ybbv6iKz",
    "model": "claude-sonnet-4-20250514",
    "role": "assistant",
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "type": "message",
    "usage": {"input_tokens": 569, "output_tokens": 127, "cache_read_input_tokens": 0},
}

# test_openai/test_openai_model_thinking_part.yaml, first response (a Responses
# API response; texts and encrypted_content cut short)
SUMMARY_1 = "**Emphasizing pedestrian safety**\n\nI want to stress how important it is to look"
SUMMARY_2 = '**Clarifying street crossing guidance**\n\nI see that the question "How do I cross'
REASONING = {
    "encrypted_content": "gAAAAABowfofynE_bcBtlQwnphMqkyKvkV8Sr35i",
    "id": "rs_68c1fa166e9c81979ff56b16882744f1093f57e27128848a",
    "summary": [
        {"text": SUMMARY_1, "type": "summary_text"},
        {"text": SUMMARY_2, "type": "summary_text"},
    ],
    "type": "reasoning",
}
ANSWER = "I'm happy to help. When crossing the street, safety is the top priority."
RESPONSE_TEXT: dict[str, Any] = {
    "background": False,
    "created_at": 1757542917,
    "error": None,
    "id": "resp_68c1fa0523248197888681b898567bde093f57e27128848a",
    "incomplete_details": None,
    "model": "o3-mini-2025-01-31",
    "object": "response",
    "output": [
        REASONING,
        {
            "content": [{"annotations": [], "logprobs": [], "text": ANSWER, "type": "output_text"}],
            "id": "msg_68c1fa1ec9448197b5c8f78a90999360093f57e27128848a",
            "role": "assistant",
            "status": "completed",
            "type": "message",
        },
    ],
    "parallel_tool_calls": True,
    "status": "completed",
    "store": True,
    "usage": {
        "input_tokens": 13,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 1915,
        "output_tokens_details": {"reasoning_tokens": 1600},
        "total_tokens": 1928,
    },
}

# test_openai_responses/test_openai_responses_thinking_with_tool_calls.yaml, first
# response (reasoning summary dropped, arguments cut short, still JSON)
RESPONSE_CALL: dict[str, Any] = {
    "error": None,
    "id": "resp_68c42d28772c819684459966ee2201ed0e8bc41441c948f6",
    "incomplete_details": None,
    "model": "gpt-5-2025-08-07",
    "object": "response",
    "output": [
        {
            "encrypted_content": "gAAAAABoxC0_aDtrISw_zls0dyams-nhm23et1xe",
            "id": "rs_68c42d29124881968e24c1ca8c1fc7860e8bc41441c948f6",
            "summary": [],
            "type": "reasoning",
        },
        {
            "arguments": '{"plan":"Plan:\\n1) Determine required first-letter acrostics."}',
            "call_id": "call_gL7JE6GDeGGsFubqO2XGytyO",
            "id": "fc_68c42d3e9e4881968b15fbb8253f58540e8bc41441c948f6",
            "name": "update_plan",
            "status": "completed",
            "type": "function_call",
        },
    ],
    "status": "completed",
    "usage": {
        "input_tokens": 124,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 1926,
        "output_tokens_details": {"reasoning_tokens": 1792},
        "total_tokens": 2050,
    },
}


def reasoning_block(item: dict[str, Any]) -> RedactedThinkingBlock:
    """The block a reasoning item becomes, as the streamed path builds it."""
    keys = ("type", "id", "summary", "encrypted_content")
    return RedactedThinkingBlock(json.dumps({k: item[k] for k in keys}, separators=(",", ":")))


async def test_openai_chat_completion_text_is_one_delta(loopback):
    loopback.replies.append(document(CHAT_TEXT))
    chunks, response = await read(openai(loopback))
    text = CHAT_TEXT["choices"][0]["message"]["content"]
    assert chunks == [TextDelta(text)]
    assert response.content == (TextBlock(text),)
    assert response.stop_reason == "stop"
    assert response.id == "request-001.chatcmpl-BFf6N2HvO4lGEP9Y8sCZ6tdTXHeQw"
    assert response.usage == Usage(input_tokens=822, output_tokens=1789, cache_read_tokens=512)


async def test_openai_chat_completion_tool_call(loopback):
    loopback.replies.append(document(CHAT_CALL))
    chunks, response = await read(openai(loopback))
    call = ToolCall("call_iXFttys57ap0o16JSlC8yhYo", "get_user_country", {})
    assert chunks == [call]
    assert response.content == (call,) and response.stop_reason == "tool_call"
    assert response.usage == Usage(input_tokens=68, output_tokens=12)


async def test_openai_chat_completion_reasoning_content_goes_first(loopback):
    body = copy.deepcopy(CHAT_TEXT)
    body["choices"][0]["message"]["reasoning_content"] = "Think of rivers."  # DeepSeek's field
    loopback.replies.append(document(body))
    chunks, response = await read(openai(loopback))
    text = body["choices"][0]["message"]["content"]
    assert chunks == [ThinkingDelta("Think of rivers."), TextDelta(text)]
    assert response.content == (ThinkingBlock("Think of rivers."), TextBlock(text))


async def test_openai_chat_completion_refusal(loopback):
    body = copy.deepcopy(CHAT_TEXT)
    body["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
    loopback.replies.append(document(body))
    chunks, response = await read(openai(loopback))
    assert chunks == [TextDelta("I can't help with that.")]
    assert response.content == (TextBlock("I can't help with that."),)
    assert response.stop_reason == "refusal"


async def test_openai_chat_completion_cut_by_length_drops_its_call(loopback):
    body = copy.deepcopy(CHAT_CALL)
    body["choices"][0]["finish_reason"] = "length"
    body["choices"][0]["message"]["content"] = "Let me look."
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": "Mex'
    loopback.replies.append(document(body))
    chunks, response = await read(openai(loopback))
    assert chunks == [TextDelta("Let me look.")]
    assert response.content == (TextBlock("Let me look."),)
    assert response.stop_reason == "length"


async def test_openai_chat_completion_with_bad_arguments_is_a_refused_call(loopback):
    # issue 16: as in a stream, the call goes on with the reason as its arguments
    body = copy.deepcopy(CHAT_CALL)
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": "Mex'
    loopback.replies.append(document(body))
    chunks, response = await read(openai(loopback))
    (call,) = chunks
    assert list(call.arguments) == [REJECTED_ARGUMENTS]
    assert call.arguments[REJECTED_ARGUMENTS].startswith("the arguments are not JSON: ")
    assert response.content == (call,) and response.stop_reason == "tool_call"


async def test_anthropic_message_thinking_text_and_tool_use(loopback):
    loopback.replies.append(document(MESSAGE_CALL))
    chunks, response = await read(anthropic(loopback))
    text = MESSAGE_CALL["content"][1]["text"]
    call = ToolCall("toolu_01YGzqpRE16Vricda3Aqcejo", "get_user_country", {})
    assert chunks == [ThinkingDelta(THOUGHT, SIGNATURE), TextDelta(text), call]
    assert response.content == (ThinkingBlock(THOUGHT, SIGNATURE), TextBlock(text), call)
    assert response.stop_reason == "tool_call"
    assert response.id == "request-001.msg_01WvueFjZVbHcj4H4zUzeGv2"
    assert response.usage == Usage(input_tokens=398, output_tokens=155)


async def test_anthropic_message_tool_input_is_taken_as_sent(loopback):
    body = copy.deepcopy(MESSAGE_CALL)
    body["content"][2]["input"] = {"city": "Mexico City", "n": 1.0, "deep": {"a": [1, True]}}
    loopback.replies.append(document(body))
    chunks, _ = await read(anthropic(loopback))
    assert chunks[-1].arguments == {"city": "Mexico City", "n": 1.0, "deep": {"a": [1, True]}}
    assert type(chunks[-1].arguments["n"]) is float


async def test_anthropic_message_redacted_thinking_is_one_chunk(loopback):
    # test_anthropic/test_anthropic_model_thinking_part_redacted.yaml's blocks (cut short)
    body = copy.deepcopy(MESSAGE_TEXT)
    body["content"].insert(0, {"data": "EroBCkYIBxgCIkDrTQxi", "type": "redacted_thinking"})
    loopback.replies.append(document(body))
    chunks, response = await read(anthropic(loopback))
    text = MESSAGE_TEXT["content"][0]["text"]
    assert chunks == [RedactedThinkingBlock("EroBCkYIBxgCIkDrTQxi"), TextDelta(text)]
    assert response.content == (RedactedThinkingBlock("EroBCkYIBxgCIkDrTQxi"), TextBlock(text))


@pytest.mark.parametrize(("stop", "expected"), [("max_tokens", "length"), ("refusal", "refusal")])
async def test_anthropic_message_cut_or_refused_drops_its_call(loopback, stop, expected):
    body = copy.deepcopy(MESSAGE_CALL)
    body["stop_reason"] = stop
    loopback.replies.append(document(body))
    chunks, response = await read(anthropic(loopback))
    text = MESSAGE_CALL["content"][1]["text"]
    assert chunks == [ThinkingDelta(THOUGHT, SIGNATURE), TextDelta(text)]
    assert response.content == (ThinkingBlock(THOUGHT, SIGNATURE), TextBlock(text))
    assert response.stop_reason == expected


async def test_responses_reasoning_item_and_text(loopback):
    loopback.replies.append(document(RESPONSE_TEXT))
    chunks, response = await read(responses(loopback))
    thinking = f"{SUMMARY_1}\n\n{SUMMARY_2}"
    assert chunks == [ThinkingDelta(thinking), reasoning_block(REASONING), TextDelta(ANSWER)]
    assert response.content == (
        ThinkingBlock(thinking),
        reasoning_block(REASONING),
        TextBlock(ANSWER),
    )
    assert response.stop_reason == "stop"
    assert response.usage == Usage(input_tokens=13, output_tokens=1915)


async def test_responses_function_call(loopback):
    loopback.replies.append(document(RESPONSE_CALL))
    chunks, response = await read(responses(loopback))
    call = ToolCall(
        "call_gL7JE6GDeGGsFubqO2XGytyO",
        "update_plan",
        {"plan": "Plan:\n1) Determine required first-letter acrostics."},
    )
    reasoning = reasoning_block(RESPONSE_CALL["output"][0])
    assert chunks == [reasoning, call]
    assert response.content == (reasoning, call) and response.stop_reason == "tool_call"


async def test_responses_refusal(loopback):
    body = copy.deepcopy(RESPONSE_TEXT)
    body["output"][1]["content"] = [{"refusal": "I can't help with that.", "type": "refusal"}]
    loopback.replies.append(document(body))
    chunks, response = await read(responses(loopback))
    assert chunks[-1] == TextDelta("I can't help with that.")
    assert response.content[-1] == TextBlock("I can't help with that.")
    assert response.stop_reason == "refusal"


async def test_responses_incomplete_drops_its_cut_call(loopback):
    body = copy.deepcopy(RESPONSE_CALL)
    body.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    body["output"][1].update(status="incomplete", arguments='{"plan":"Pla')
    loopback.replies.append(document(body))
    chunks, response = await read(responses(loopback))
    reasoning = reasoning_block(RESPONSE_CALL["output"][0])
    assert chunks == [reasoning]
    assert response.content == (reasoning,) and response.stop_reason == "length"


@pytest.mark.parametrize(
    ("make", "body", "expected"),
    [
        (openai, MESSAGE_TEXT, "not a chat completion"),
        (anthropic, CHAT_TEXT, "not a message"),
        (responses, CHAT_TEXT, "not a response"),
        (anthropic, {"type": "completion", "content": []}, "type 'completion'"),
        (responses, dict(RESPONSE_TEXT, status="in_progress"), "status 'in_progress'"),
        (openai, {"choices": []}, "no first choice with a finish_reason"),
    ],
    ids=["openai", "anthropic", "responses", "anthropic-type", "responses-status", "no-choice"],
)
async def test_a_document_not_in_the_providers_shape_is_a_response_error(
    loopback, make, body, expected
):
    loopback.replies += [document(body)] * 2
    with pytest.raises(ModelResponseError, match=expected) as caught:
        await read(make(loopback))
    assert "one JSON document" in str(caught.value)


@tool
async def get_user_country() -> str:
    """The user's country."""
    return "Mexico"


@tool
async def update_plan(plan: str) -> str:
    """Update the plan."""
    return "ok"


@pytest.mark.parametrize(
    ("make", "first", "second"),
    [
        (openai, CHAT_CALL, CHAT_TEXT),
        (anthropic, MESSAGE_CALL, MESSAGE_TEXT),
        (responses, RESPONSE_CALL, RESPONSE_TEXT),
    ],
    ids=["openai", "anthropic", "responses"],
)
async def test_a_run_takes_documents_for_a_tool_step_and_the_answer(loopback, make, first, second):
    loopback.replies += [document(first), document(second)]
    run = run_agent_loop(
        messages=[UserMessage("u1", "What is the largest city in my country?")],
        model=make(loopback),
        tools=ToolRegistry([get_user_country, update_plan]),
        max_steps=3,
    )
    result = await run.wait()
    assert type(result) is Completed and result.stop_reason == "stop", result
    assert result.steps == 2 and len(loopback.requests) == 2
    sent = json.dumps(loopback.requests[1].json())
    assert "Mexico" in sent or '"ok"' in sent  # the tool's result went back
    assert result.final_text == "".join(
        b.text for b in result.messages[-1].content if type(b) is TextBlock
    )
    assert result.final_text


@pytest.mark.parametrize(
    ("make", "body", "said"),
    [
        (openai, CHAT_CALL, ("chatcmpl-BSXk0dWkG4hfPt0lph4oFO35iT73I", "tool_calls", "gpt-4o")),
        (anthropic, MESSAGE_TEXT, (MESSAGE_TEXT["id"], "end_turn", "claude-sonnet-4")),
        (responses, RESPONSE_TEXT, (RESPONSE_TEXT["id"], "completed", "o3-mini")),
    ],
    ids=["openai", "anthropic", "responses"],
)
async def test_a_documents_provider_facts_are_its_own_words(loopback, make, body, said):
    """issue 32: a whole document gives telemetry the provider's id, finish
    reason and model as a stream does (``provider_facts``), not our words."""
    loopback.replies.append(document(body))
    async with make(loopback).stream(REQUEST) as stream:
        await stream.response()
    facts = stream.provider_facts
    assert (facts.response_id, facts.finish_reason) == said[:2]
    assert facts.response_model == body["model"] and body["model"].startswith(said[2])


async def test_an_escaped_lone_surrogate_in_a_document_is_read_as_u_fffd(loopback: Any) -> None:
    """A whole JSON answer with an escaped lone surrogate in its text was refused as not the
    provider's shape; it reads as U+FFFD, as in a stream."""
    body = copy.deepcopy(CHAT_CALL)
    body["choices"][0]["message"]["content"] = "half \ud83d an emoji"
    loopback.replies.append(document(body))
    _, response = await read(openai(loopback))
    assert response.content[0] == TextBlock("half \ufffd an emoji")


def _python_calls(work: Any) -> int:
    """Python functions ``work()`` calls (C ones not counted): its work, counted."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        work()
    finally:
        sys.setprofile(None)
    return calls


def test_a_document_of_many_escapes_is_repaired_in_c_not_an_escape_at_a_time():
    """The lone surrogates of a whole answer msgspec refused were replaced by a Python call
    per escape of the document: seconds of CPU on the trio thread for a 16 MiB answer of
    ``\\n`` escapes and one lone surrogate. The repair is a few C passes, whatever the escapes,
    and reads the same: a pair and an escaped backslash before ``u`` stay as they are."""
    body = b'{"a": "' + b"\\n\\\\ud800\\ud83d\\ude00" * 20_000 + b'\\ud800"}'
    repaired = b'{"a": "' + b"\\n\\\\ud800\\ud83d\\ude00" * 20_000 + b'\\ufffd"}'
    assert without_lone_escapes(body) == repaired
    assert _python_calls(lambda: without_lone_escapes(body)) < 20  # was one an escape: 60,001
    assert without_lone_escapes(b'"\\\\\\ud800x\\ude00\\ud800"') == b'"\\\\\\ufffdx\\ufffd\\ufffd"'
    assert without_lone_escapes(b'"\\ud83d\\ud83d\\ude00x"') == b'"\\ufffd\\ud83d\\ude00x"'
    assert without_lone_escapes(b'"\\uD83D\\uDE00\\u005cud800"') == b'"\\uD83D\\uDE00\\u005cud800"'


_ESCAPE = re.compile(  # the reference: JSON escapes read left to right, one at a time
    rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[dD][89a-fA-F][0-9a-fA-F]{2}|.)",
    re.DOTALL,
)
_ATOMS = [b"\\", b"u", b"ud83d", b"uDE00", b"udbff", b"udc00", b"u0041", b"ue000", b"x", b'"']


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_ATOMS), max_size=16))
def test_the_repair_in_c_reads_escapes_as_json_does_left_to_right(atoms):
    data = b"".join(atoms)
    expected = _ESCAPE.sub(lambda m: b"\\ufffd" if len(m[0]) == 6 else m[0], data)
    assert without_lone_escapes(data) == expected
