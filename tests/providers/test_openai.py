"""``OpenAIChatModel`` (Chat Completions) against a real loopback HTTP server: richer
content (issue 15): images and documents in the documented request forms, reasoning
from compatible servers, the refusal and content_filter stop reasons, with the
recorded streams in tests/support/fixtures/wire/ (see SOURCES.md there); and the
adapter's regressions, each named after the behaviour it pins."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from loopback import Reply, fixture
from paths import WIRE
from sse_bodies import DONE, SECRET_KEY, choice, openai_model, sse
from sse_bodies import read as read_stream

from trio_agent import (
    Agent,
    AssistantMessage,
    Completed,
    DocumentBlock,
    ImageBlock,
    JsonlStore,
    ModelAuthenticationError,
    ModelRequest,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    TransientModelError,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.providers import OpenAIChatModel

KEY = "sk-test-SECRET-0123456789"
PNG = b"\x89PNG\r\n\x1a\n"
PNG_URL = "data:image/png;base64,iVBORw0KGgo="  # base64 of PNG, worked out by hand
PDF = b"%PDF-1.4\n"
PDF_URL = "data:application/pdf;base64,JVBERi0xLjQK"


def wire(name: str) -> bytes:
    """A recorded stream of tests/support/fixtures/wire/, as the server sent it."""
    return (WIRE / name).read_bytes()


def events(body: bytes) -> list[bytes]:
    return [event for event in body.split(b"\n\n") if event.strip()]


def deltas(body: bytes) -> list[dict[str, Any]]:
    """The ``delta`` objects of a recorded stream's first choice, in order."""
    out = []
    for event in events(body):
        for line in event.split(b"\n"):
            if line.startswith(b"data: {"):
                for choice in json.loads(line[6:]).get("choices", []):
                    out.append(choice.get("delta") or {})
    return out


def joined(body: bytes, *fields: str) -> str:
    return "".join(next((d[f] for f in fields if d.get(f)), "") for d in deltas(body))


def openai(loopback: Any, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", api_key=KEY, base_url=f"{loopback.url}/v1", **options)


def request(*messages: Any) -> ModelRequest:
    return ModelRequest(id="request-001", messages=messages, tools=())


async def read(model: OpenAIChatModel, req: ModelRequest | None = None) -> tuple[list[Any], Any]:
    async with model.stream(req or request(UserMessage("u1", "Hello"))) as stream:
        chunks = [chunk async for chunk in stream]
        return chunks, await stream.response()


def sent(loopback: Any, index: int = 0) -> list[dict[str, Any]]:
    return loopback.requests[index].json()["messages"]


async def test_a_refusal_stops_with_refusal_and_keeps_its_text(loopback):
    body = wire("openai_chat_refusal.sse")
    loopback.replies.append(Reply(body=body, piece=200))
    chunks, response = await read(openai(loopback))
    refusal = "I'm sorry, I can't assist with that request."
    assert joined(body, "refusal") == refusal  # the recording's finish_reason is "stop"
    assert "".join(c.text for c in chunks) == refusal and all(type(c) is TextDelta for c in chunks)
    assert response.content == (TextBlock(refusal),)
    assert response.stop_reason == "refusal"


async def test_a_refusal_ends_a_run_as_completed_with_refusal(loopback):
    loopback.replies.append(Reply(body=wire("openai_chat_refusal.sse")))
    run = run_agent_loop(
        messages=[UserMessage("u1", "Hello")],
        model=openai(loopback),
        tools=ToolRegistry([]),
        max_steps=2,
    )
    result = await run.wait()
    assert type(result) is Completed and result.stop_reason == "refusal"


def content_filtered(name: str, finish: bytes) -> bytes:
    # No recorded content_filter stream exists (SOURCES.md): this is the recording
    # with its finish_reason changed to "content_filter", the shape FORMATS.md expects.
    body = wire(name)
    assert body.count(b'"finish_reason":"' + finish + b'"') == 1
    return body.replace(b'"finish_reason":"' + finish + b'"', b'"finish_reason":"content_filter"')


async def test_content_filter_keeps_the_cut_text(loopback):
    body = content_filtered("openai_chat_text.sse", b"stop")
    loopback.replies.append(Reply(body=body, piece=300))
    chunks, response = await read(openai(loopback))
    text = joined(body, "content")
    assert text.startswith("I'm unable to provide real-time weather")
    assert "".join(c.text for c in chunks) == text
    assert response.content == (TextBlock(text),) and response.stop_reason == "content_filter"


async def test_content_filter_drops_tool_calls(loopback):
    body = content_filtered("openai_chat_tool_calls.sse", b"tool_calls")
    loopback.replies.append(Reply(body=body))
    chunks, response = await read(openai(loopback))
    assert chunks == [] and response.content == ()
    assert response.stop_reason == "content_filter"


async def test_content_filter_ends_a_run_as_completed_with_content_filter(loopback):
    body = content_filtered("openai_chat_text.sse", b"stop")
    loopback.replies.append(Reply(body=body))
    run = run_agent_loop(
        messages=[UserMessage("u1", "Weather?")],
        model=openai(loopback),
        tools=ToolRegistry([]),
        max_steps=2,
    )
    result = await run.wait()
    assert type(result) is Completed and result.stop_reason == "content_filter"
    assert result.final_text == joined(body, "content")


async def test_deepseek_reasoning_content_becomes_thinking(loopback):
    body = wire("deepseek_chat_reasoning_content.sse")
    loopback.replies.append(Reply(body=body))
    chunks, response = await read(openai(loopback))
    thinking = joined(body, "reasoning_content")
    text = joined(body, "content")
    assert thinking.startswith("Hmm, the user just said") and text.startswith("Hello there!")
    thinking_chunks = [c for c in chunks if type(c) is ThinkingDelta]
    assert chunks[: len(thinking_chunks)] == thinking_chunks  # the reasoning comes first
    assert "".join(c.thinking for c in thinking_chunks) == thinking
    assert all(c.signature == "" for c in thinking_chunks)
    # ~200 recorded reasoning deltas: merged per read, not one chunk each
    assert len([d for d in deltas(body) if d.get("reasoning_content")]) > 150
    assert len(thinking_chunks) <= 10
    assert "".join(c.text for c in chunks[len(thinking_chunks) :]) == text
    assert response.content == (ThinkingBlock(thinking, ""), TextBlock(text))
    assert response.stop_reason == "stop"


async def test_deepseek_reasoning_passes_the_step_checks_of_a_run(loopback):
    body = wire("deepseek_chat_reasoning_content.sse")
    loopback.replies.append(Reply(body=body, piece=517))
    run = run_agent_loop(
        messages=[UserMessage("u1", "Hello")],
        model=openai(loopback),
        tools=ToolRegistry([]),
        max_steps=2,
    )
    result = await run.wait()
    assert type(result) is Completed and result.stop_reason == "stop"
    assert result.messages[-1].content == (
        ThinkingBlock(joined(body, "reasoning_content")),
        TextBlock(joined(body, "content")),
    )


async def test_openrouter_reasoning_field_becomes_thinking(loopback):
    body = wire("openrouter_chat_reasoning.sse")
    loopback.replies.append(Reply(body=body, piece=97))
    chunks, response = await read(openai(loopback))
    thinking = "This is a simple arithmetic question. 2+2 equals 4."
    assert joined(body, "reasoning") == thinking
    assert "".join(c.thinking for c in chunks if type(c) is ThinkingDelta) == thinking
    assert "".join(c.text for c in chunks if type(c) is TextDelta) == "2 + 2 = 4"
    assert response.content == (ThinkingBlock(thinking), TextBlock("2 + 2 = 4"))


def reasoning_then_tool_call() -> bytes:
    # No recording has reasoning_content and a tool call in one stream: assembled
    # from the DeepSeek recording's events up to its first content delta (the
    # reasoning) and every event of the OpenAI tool-call recording, bytes unchanged.
    deepseek = events(wire("deepseek_chat_reasoning_content.sse"))
    first_text = next(
        i for i, e in enumerate(deepseek) if b'"content":null' not in e and b'"content":"' in e
    )
    return b"\n\n".join(deepseek[:first_text] + events(wire("openai_chat_tool_calls.sse"))) + (
        b"\n\n"
    )


@tool
async def get_weather(city: str, state: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}, {state}"


THOUGHT = joined(wire("deepseek_chat_reasoning_content.sse"), "reasoning_content")
CALL = {
    "id": "call_CTf1nWJLqSeRgDqaCG27xZ74",
    "type": "function",
    "function": {
        "name": "get_weather",
        "arguments": '{"city":"San Francisco","state":"CA"}',
    },
}


@pytest.mark.parametrize("send", ["tool_calls", "always", "never"])
async def test_send_reasoning_decides_which_assistant_messages_carry_it(loopback, send):
    loopback.replies += [
        Reply(body=reasoning_then_tool_call(), piece=700),
        Reply(body=wire("deepseek_chat_reasoning_content.sse"), piece=700),
    ]
    history = [
        UserMessage("u0", "Hi"),
        AssistantMessage("a0", (ThinkingBlock("A greeting."), TextBlock("Hello!"))),
        UserMessage("u1", "Weather in San Francisco?"),
    ]
    model = openai(loopback, send_reasoning=send)
    assert model.send_reasoning == send
    run = run_agent_loop(
        messages=history, model=model, tools=ToolRegistry([get_weather]), max_steps=3
    )
    result = await run.wait()
    assert type(result) is Completed and result.steps == 2
    assert result.messages[3].content == (
        ThinkingBlock(THOUGHT),
        ToolCall(CALL["id"], "get_weather", {"city": "San Francisco", "state": "CA"}),
    )
    plain: dict[str, Any] = {"role": "assistant", "content": "Hello!"}
    calling: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    if send == "always":
        plain["reasoning_content"] = "A greeting."
    if send != "never":
        calling = {"role": "assistant", "content": None, "reasoning_content": THOUGHT,
                   "tool_calls": [CALL]}  # fmt: skip
    assert sent(loopback, 0) == [
        {"role": "user", "content": "Hi"},
        plain,
        {"role": "user", "content": "Weather in San Francisco?"},
    ]
    assert sent(loopback, 1) == [
        *sent(loopback, 0),
        calling,
        {"role": "tool", "tool_call_id": CALL["id"], "content": "Sunny in San Francisco, CA"},
    ]


def test_send_reasoning_is_checked():
    with pytest.raises(ValueError, match="send_reasoning must be 'tool_calls', 'always'"):
        OpenAIChatModel("m", api_key=KEY, send_reasoning="sometimes")  # type: ignore[arg-type]
    assert OpenAIChatModel("m", api_key=KEY).send_reasoning == "tool_calls"


async def test_user_images_reach_the_body_as_image_url_parts(loopback):
    loopback.replies.append(Reply(body=wire("openai_chat_text.sse")))
    user = UserMessage(
        "u1",
        (
            TextBlock("What are these?"),
            ImageBlock("image/png", data=PNG),
            ImageBlock("image/jpeg", url="https://example.com/cat.jpg"),
        ),
    )
    await read(openai(loopback), request(user))
    assert sent(loopback) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What are these?"},
                {"type": "image_url", "image_url": {"url": PNG_URL}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        }
    ]


async def test_user_documents_reach_the_body_as_file_and_text_parts(loopback):
    loopback.replies.append(Reply(body=wire("openai_chat_text.sse")))
    user = UserMessage(
        "u1",
        (
            DocumentBlock("application/pdf", data=PDF, title="report.pdf"),
            DocumentBlock("application/pdf", data=PDF),
            DocumentBlock("text/plain", data="naïve notes\n".encode(), title="notes.txt"),
            DocumentBlock("text/plain", data=b"untitled"),
        ),
    )
    await read(openai(loopback), request(user))
    assert sent(loopback)[0]["content"] == [
        {"type": "file", "file": {"filename": "report.pdf", "file_data": PDF_URL}},
        {"type": "file", "file": {"filename": "document.pdf", "file_data": PDF_URL}},
        {"type": "text", "text": "notes.txt\nnaïve notes\n"},
        {"type": "text", "text": "untitled"},
    ]


async def test_tool_result_media_go_in_one_user_message_after_the_batch(loopback):
    loopback.replies.append(Reply(body=wire("openai_chat_text.sse")))
    calls = (ToolCall("call_1", "shot", {}), ToolCall("call_2", "fetch", {}))
    history = request(
        UserMessage("u1", "Look."),
        AssistantMessage("a1", calls),
        ToolResultMessage(
            "r1", "call_1", "shot", (TextBlock("Screenshot taken."), ImageBlock("image/png", PNG))
        ),
        ToolResultMessage("r2", "call_2", "fetch", (DocumentBlock("application/pdf", PDF),)),
        UserMessage("u2", "Well?"),
    )
    await read(openai(loopback), history)
    assert sent(loopback)[2:] == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "Screenshot taken.\n"
            "[image 1 of this result follows in the next user message]",
        },
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": "[document 1 of this result follows in the next user message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images and documents returned by tool call call_1:"},
                {"type": "image_url", "image_url": {"url": PNG_URL}},
                {"type": "text", "text": "Images and documents returned by tool call call_2:"},
                {"type": "file", "file": {"filename": "document.pdf", "file_data": PDF_URL}},
            ],
        },
        {"role": "user", "content": "Well?"},
    ]


async def test_tool_result_media_at_the_end_of_the_transcript_follow_its_batch(loopback):
    loopback.replies.append(Reply(body=wire("openai_chat_text.sse")))
    history = request(
        UserMessage("u1", "Look."),
        AssistantMessage("a1", (ToolCall("call_1", "shot", {}),)),
        ToolResultMessage(
            "r1", "call_1", "shot", (ImageBlock("image/png", url="https://example.com/s.png"),)
        ),
    )
    await read(openai(loopback), history)
    assert sent(loopback)[2:] == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "[image 1 of this result follows in the next user message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images and documents returned by tool call call_1:"},
                {"type": "image_url", "image_url": {"url": "https://example.com/s.png"}},
            ],
        },
    ]


async def test_a_document_by_url_goes_as_a_note_the_model_reads(loopback):
    # Chat Completions takes a document's bytes only. An error would fail this
    # request and every later one of the session (the document stays in the
    # transcript, a tool may have returned it): the model is told instead.
    pdf = DocumentBlock("application/pdf", url="https://example.com/r.pdf", title="Q3")
    loopback.replies.append(Reply(body=wire("openai_chat_text.sse")))
    run = run_agent_loop(
        messages=[UserMessage("u1", (TextBlock("Read it."), pdf))],
        model=openai(loopback),
        tools=ToolRegistry([]),
        max_steps=2,
    )
    result = await run.wait()
    assert result.status == "completed"
    assert sent(loopback)[0]["content"] == [
        {"type": "text", "text": "Read it."},
        {
            "type": "text",
            "text": "[application/pdf document 'Q3' at https://example.com/r.pdf not attached: "
            "OpenAI Chat Completions takes a document's bytes, not its URL]",
        },
    ]


async def test_only_a_compatible_servers_own_reasoning_goes_back(loopback):
    # The review found Claude's signed thinking and a Responses summary sent as
    # reasoning_content, a field strict servers refuse in a message.
    from trio_agent import RedactedThinkingBlock

    call = ToolCall("call_1", "get_weather", {"city": "Paris", "state": ""})
    item = '{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}'
    foreign = [
        (ThinkingBlock("claude thought", "EqQBCgIYAh"), call),
        (ThinkingBlock("gpt summary"), RedactedThinkingBlock(item), call),
    ]
    for blocks in foreign:
        loopback.replies.append(Reply(body=wire("openai_chat_text.sse")))
        await read(
            openai(loopback),
            request(
                UserMessage("u1", "weather?"),
                AssistantMessage("m1", blocks),
                ToolResultMessage("tool-result-call_1", "call_1", "get_weather", "18 C"),
            ),
        )
        assert "reasoning_content" not in sent(loopback, len(loopback.requests) - 1)[1]
    loopback.replies.append(Reply(body=wire("openai_chat_text.sse")))
    own = (ThinkingBlock("deepseek thought"), call)
    await read(
        openai(loopback),
        request(
            UserMessage("u1", "weather?"),
            AssistantMessage("m1", own),
            ToolResultMessage("tool-result-call_1", "call_1", "get_weather", "18 C"),
        ),
    )
    assert sent(loopback, 2)[1]["reasoning_content"] == "deepseek thought"


async def test_an_in_stream_error_is_typed_redacted_and_not_retried(loopback, tmp_path):
    """An in-stream error event came out untyped, quoted the key and was retried; it is a typed
    error, redacted everywhere it is recorded, and not retried."""
    error = {
        "error": {
            "message": f"Incorrect API key provided: {SECRET_KEY}",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    loopback.replies += [Reply(body=sse(error))] * 3
    with pytest.raises(ModelAuthenticationError) as info:
        await read_stream(openai_model(loopback))
    assert SECRET_KEY not in str(info.value)
    agent = Agent(model=openai_model(loopback), store=JsonlStore(tmp_path), session_id="s1")
    events = []
    async with agent.turn(UserMessage("u1", "hi")) as run:
        async for event in run:
            events.append(event)
    await agent.aclose()
    assert len(loopback.requests) == 2  # not retried
    assert SECRET_KEY not in msgspec.json.encode(events, enc_hook=tuple).decode()
    assert SECRET_KEY.encode() not in JsonlStore(tmp_path).path("s1").read_bytes()


async def test_tool_calls_finish_without_calls_is_a_plain_stop(loopback):
    """A ``tool_calls`` finish reason with no call in the stream was taken as a tool-call stop; it
    is a plain stop."""
    loopback.replies.append(
        Reply(body=sse(choice({"content": "hi"}), choice({}, "tool_calls")) + DONE)
    )
    _, response = await read_stream(openai_model(loopback))
    assert response.stop_reason == "stop" and response.content == (TextBlock("hi"),)


async def test_a_refusal_is_kept_as_text_and_never_sent_back_as_null(loopback):
    """A refusal left the answer empty and went back as ``content: null``; it is kept as the
    assistant's text."""
    loopback.replies += [
        Reply(body=sse(choice({"refusal": "I can't help with that."}), choice({}, "stop")) + DONE),
        Reply(body=fixture("openai_text.sse")),
    ]
    agent = Agent(model=openai_model(loopback))
    first = await agent.prompt(UserMessage("u1", "something bad"))
    assert first.final_text == "I can't help with that."
    await agent.prompt(UserMessage("u2", "ok then"))
    sent = loopback.requests[1].json()["messages"][1]
    assert sent == {"role": "assistant", "content": "I can't help with that."}


async def test_only_the_first_choice_is_the_answer(loopback):
    """With several choices (``n=2``) the others' deltas were mixed into the answer; only the first
    choice is the answer."""
    loopback.replies.append(
        Reply(
            body=sse(
                choice({"content": "Hello"}, index=0),
                choice({"content": "Bonjour"}, index=1),
                choice({}, "stop", index=0),
                choice({}, "length", index=1),
            )
            + DONE
        )
    )
    chunks, response = await read_stream(openai_model(loopback, extra_body={"n": 2}))
    assert chunks == [TextDelta("Hello")] and response.stop_reason == "stop"


async def test_tool_call_deltas_without_an_index_are_told_apart_by_id(loopback):
    """Tool-call deltas without an ``index``, as some compatible servers send them, were merged into
    one call; they are told apart by their id."""
    loopback.replies.append(
        Reply(
            body=sse(
                choice(
                    {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x":'}}]}
                ),
                choice({"tool_calls": [{"function": {"arguments": "1}"}}]}),
                choice(
                    {"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": '{"y":2}'}}]}
                ),
                choice({}, "tool_calls"),
            )
            + DONE
        )
    )
    _, response = await read_stream(openai_model(loopback))
    assert response.content == (ToolCall("a", "f", {"x": 1}), ToolCall("b", "g", {"y": 2}))


async def test_a_stream_that_ends_cleanly_after_its_finish_reason_without_done_is_whole(
    loopback,
):
    """Issue 16: llama.cpp before PR 9459, TGI before PR 2221, ik_llama.cpp and mistral.rs send no
    ``[DONE]``; a stream that ended cleanly after its finish reason was retried as transient, then
    failed."""
    for chunked in (False, True):
        body = sse(choice({"content": "hi"}), choice({}, "stop"))
        loopback.replies.append(Reply(body=body, chunked=chunked, piece=40))
        chunks, response = await read_stream(openai_model(loopback))
        assert response.content == (TextBlock("hi"),) and response.stop_reason == "stop"


async def test_a_chunked_stream_cut_after_its_finish_reason_is_still_an_error(loopback):
    """The other side of the rule above: a chunked stream whose connection closes without the last
    chunk is cut, not ended, even after its finish reason."""
    body = sse(choice({"content": "hi"}), choice({}, "stop"))
    loopback.replies.append(Reply(body=body, chunked=True, end_chunked=False, piece=40))
    with pytest.raises(TransientModelError):
        await read_stream(openai_model(loopback))


async def test_a_stream_that_ends_before_its_finish_reason_is_not_complete(loopback):
    """A stream that ended before its finish reason was taken as complete; it is transient."""
    loopback.replies.append(Reply(body=sse(choice({"content": "hi"}))))
    with pytest.raises(TransientModelError, match="before a finish reason"):
        await read_stream(openai_model(loopback))


async def test_max_completion_tokens_is_sent_for_newer_models(loopback):
    """``max_completion_tokens``, which newer models take instead of ``max_tokens``, was not
    sent."""
    loopback.replies.append(Reply(body=fixture("openai_text.sse")))
    await read_stream(openai_model(loopback, max_completion_tokens=300))
    assert loopback.requests[0].json()["max_completion_tokens"] == 300


async def test_an_escaped_lone_surrogate_in_a_chunk_is_read_as_u_fffd(loopback):
    """An escaped lone surrogate (``"\\ud83d"``, half an emoji, as some compatible servers
    send) made msgspec refuse the chunk and failed the whole stream; it reads as U+FFFD, as
    lone surrogates do elsewhere, in text and in a call's arguments alike, and a whole pair
    and an escaped backslash before ``ud800`` stay as they are."""
    call = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a": "x'}}
    more = {"index": 0, "function": {"arguments": '\ud800"}'}}
    body = sse(
        choice({"content": "Hi \ud83d"}),
        choice({"content": "\ude00 \ud83d\ude00 \\ud800"}),
        choice({"tool_calls": [call]}),
        choice({"tool_calls": [more]}),
        choice({}, "tool_calls"),
    )
    assert b'"Hi \\ud83d"' in body  # json.dumps escapes it so: what msgspec refuses
    loopback.replies.append(Reply(body=body + DONE))
    chunks, response = await read_stream(openai_model(loopback))
    text = "Hi \ufffd\ufffd \U0001f600 \\ud800"
    assert "".join(c.text for c in chunks if type(c) is TextDelta) == text
    assert response.content == (
        TextBlock(text),
        ToolCall("call_1", "f", {"a": "x\ufffd"}),
    )
    assert response.stop_reason == "tool_call"
