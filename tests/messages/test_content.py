"""Richer content through every layer (issue 15): images and documents in user
messages and tool results, thinking and redacted thinking in assistant
messages, and the refusal and content_filter stop reasons."""

from __future__ import annotations

import msgspec
import pytest
from helpers import add, call, settle, start, user

from trio_agent import (
    MAX_CONTENT_BLOCKS,
    MAX_MEDIA_BYTES,
    MAX_MESSAGE_MEDIA_BYTES,
    MAX_STEP_THINKING,
    Agent,
    AssistantMessage,
    Completed,
    DocumentBlock,
    Failed,
    ImageBlock,
    JsonlStore,
    Message,
    ModelChunk,
    ModelRequest,
    RedactedThinkingBlock,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolRegistry,
    ToolResult,
    ToolResultMessage,
    TranscriptError,
    TurnCompleted,
    TurnContentFilter,
    TurnLength,
    TurnRefusal,
    UserMessage,
    content_text,
    execute_tool_call,
    repair_transcript,
    text_from_assistant,
    tool,
    validate_transcript,
)
from trio_agent.ledger import derive
from trio_agent.stores import SqliteStore
from trio_agent.testing import ReplayModel, ScriptedModel, assert_run_invariants, scripted_response

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
IMAGE = ImageBlock("image/png", data=PNG)
PDF = DocumentBlock("application/pdf", data=b"%PDF-1.4 tiny", title="report")


def image_prompt(id: str = "u1") -> UserMessage:
    return UserMessage(id, (TextBlock("What is in this picture?"), IMAGE))


def test_a_user_message_with_an_image_and_a_document_is_a_valid_transcript():
    validate_transcript([UserMessage("u1", (TextBlock("look"), IMAGE, PDF))])
    validate_transcript([UserMessage("u1", (ImageBlock("image/jpeg", url="https://x.io/a.jpg"),))])


def test_a_list_of_blocks_is_kept_as_a_tuple():
    repaired = repair_transcript([UserMessage("u1", [TextBlock("a"), IMAGE])])  # type: ignore[arg-type]
    assert type(repaired[0].content) is tuple and repaired[0].content == (TextBlock("a"), IMAGE)


@pytest.mark.parametrize(
    ("block", "code", "words"),
    [
        (
            ImageBlock("image/bmp", data=b"BM"),
            "INVALID_MEDIA",
            "'image/bmp' is not an allowed image",
        ),
        (ImageBlock("application/pdf", data=b"x"), "INVALID_MEDIA", "not an allowed image"),
        (DocumentBlock("image/png", data=b"x"), "INVALID_MEDIA", "not an allowed document"),
        (ImageBlock("image/png"), "INVALID_MEDIA", "exactly one must be set"),
        (ImageBlock("image/png", data=b"x", url="https://a.b/c"), "INVALID_MEDIA", "exactly one"),
        (ImageBlock("image/png", url="file:///etc/passwd"), "INVALID_MEDIA", "not an http(s) URL"),
        (ImageBlock("image/png", url="https://a.b/" + "x" * 9000), "INVALID_MEDIA", "characters"),
        (ImageBlock("image/png", data="aGk="), "INVALID_FIELD", "data must be bytes, got str"),  # type: ignore[arg-type]
        (DocumentBlock("text/plain", data=b"x", title=1), "INVALID_FIELD", "title must be a str"),  # type: ignore[arg-type]
        (
            ToolCall("c1", "add", {}),
            "INVALID_FIELD",
            "not a TextBlock, ImageBlock or DocumentBlock",
        ),
        (ThinkingBlock("hm"), "INVALID_FIELD", "is a ThinkingBlock"),
    ],
)
def test_bad_user_content_is_refused_with_a_code_and_its_place(block, code, words):
    with pytest.raises(TranscriptError) as caught:
        validate_transcript([UserMessage("u1", (TextBlock("x"), block))])
    assert caught.value.code == code and words in str(caught.value)
    assert "content[1]" in str(caught.value)


def test_media_limits_per_block_and_per_message():
    big = ImageBlock("image/png", data=bytes(MAX_MEDIA_BYTES + 1))
    with pytest.raises(TranscriptError) as caught:
        validate_transcript([UserMessage("u1", (big,))])
    assert caught.value.code == "MEDIA_TOO_LARGE"
    exactly = ImageBlock("image/png", data=bytes(MAX_MEDIA_BYTES))
    validate_transcript([UserMessage("u1", (exactly,))])
    # each block within its limit, the message's sum past its own
    share = MAX_MESSAGE_MEDIA_BYTES // 2 + 1
    assert share <= MAX_MEDIA_BYTES
    halves = (
        ImageBlock("image/png", data=bytes(share)),
        PDF,
        ImageBlock("image/png", data=bytes(share)),
    )
    with pytest.raises(TranscriptError, match="in one message") as caught:
        validate_transcript([UserMessage("u1", halves)])
    assert caught.value.code == "MEDIA_TOO_LARGE"


def test_content_block_count_is_limited():
    validate_transcript([UserMessage("u1", (TextBlock("x"),) * MAX_CONTENT_BLOCKS)])
    with pytest.raises(TranscriptError, match="more than 256"):
        validate_transcript([UserMessage("u1", (TextBlock("x"),) * (MAX_CONTENT_BLOCKS + 1))])


def test_tool_results_take_blocks_and_assistant_messages_take_thinking():
    c = call("shot", "c1")
    validate_transcript(
        [
            user(),
            AssistantMessage("m1", (ThinkingBlock("plan", "sig"), RedactedThinkingBlock("x"), c)),
            ToolResultMessage("tool-result-c1", "c1", "shot", (TextBlock("here"), IMAGE)),
        ]
    )
    with pytest.raises(TranscriptError, match="is a ImageBlock, not a TextBlock, ThinkingBlock"):
        validate_transcript([user(), AssistantMessage("m1", (IMAGE,))])
    with pytest.raises(TranscriptError) as caught:
        validate_transcript([user(), AssistantMessage("m1", (ThinkingBlock("\ud800"),))])
    assert caught.value.code == "INVALID_UNICODE"


def test_text_helpers_ignore_thinking_and_media():
    message = AssistantMessage("m", (ThinkingBlock("secret plan", "s"), TextBlock("Hi")))
    assert text_from_assistant(message) == "Hi"
    assert content_text((TextBlock("a"), IMAGE, TextBlock("b"))) == "ab"
    assert content_text("plain") == "plain"


def test_media_bytes_are_base64_in_json_and_round_trip():
    message = UserMessage("u1", (TextBlock("x"), IMAGE, PDF))
    encoded = msgspec.json.encode(message)
    assert b'"data":"iVBORw0KGg' in encoded  # PNG's signature, in base64
    assert msgspec.json.decode(encoded, type=Message) == message
    # the old form still decodes unchanged
    assert msgspec.json.decode(b'{"role":"user","id":"u","content":"hi"}', type=Message) == (
        UserMessage("u", "hi")
    )


async def test_an_image_from_the_user_reaches_the_model_and_the_run_completes():
    # the bug: the run failed INVALID_TRANSCRIPT "content must be a str, got list"
    run, model = start([scripted_response("r1", "A cat.")], messages=[image_prompt()])
    events, result = await settle(run)
    assert isinstance(result, Completed) and result.final_text == "A cat."
    assert model.requests[0].messages[0].content == (TextBlock("What is in this picture?"), IMAGE)
    assert_run_invariants(events, result)


def thinking_script() -> list:
    think = ThinkingBlock("The user wants a sum.", "sig-AAAA")
    return [
        scripted_response("r1", [think, call("add", "c1", {"left": 20, "right": 22})]),
        scripted_response("r2", [ThinkingBlock("Done.", "sig-BBBB"), TextBlock("42")]),
    ]


async def test_thinking_streams_as_deltas_and_is_kept_for_the_next_request():
    run, model = start(thinking_script())
    events, result = await settle(run)
    assert isinstance(result, Completed) and result.final_text == "42"
    chunks = [e.chunk for e in events if isinstance(e, ModelChunk)]
    assert ThinkingDelta("The user wants a sum.", "sig-AAAA") in chunks
    second = model.requests[1].messages[1]
    assert second.content[0] == ThinkingBlock("The user wants a sum.", "sig-AAAA")
    assert_run_invariants(events, result)


@pytest.mark.parametrize(
    ("chunks", "content", "ok"),
    [
        # pieces of one thinking block, signature last, as Anthropic streams it
        (
            [ThinkingDelta("a"), ThinkingDelta("b"), ThinkingDelta(signature="S1"), TextDelta("x")],
            (ThinkingBlock("ab", "S1"), TextBlock("x")),
            True,
        ),
        # two adjacent blocks in the response merge as two adjacent text blocks do
        ([ThinkingDelta("ab", "S")], (ThinkingBlock("a", ""), ThinkingBlock("b", "S")), True),
        # empty deltas are dropped on both sides
        ([ThinkingDelta(), TextDelta("x")], (TextBlock("x"),), True),
        (
            [RedactedThinkingBlock("r1"), TextDelta("x")],
            (RedactedThinkingBlock("r1"), TextBlock("x")),
            True,
        ),
        # a changed signature, a dropped thinking block, a different redaction
        ([ThinkingDelta("a", "S1")], (ThinkingBlock("a", "S2"),), False),
        ([ThinkingDelta("a"), TextDelta("x")], (TextBlock("x"),), False),
        ([RedactedThinkingBlock("r1")], (RedactedThinkingBlock("r2"),), False),
        # text between two thinking pieces makes two groups: order matters
        (
            [ThinkingDelta("a"), TextDelta("x"), ThinkingDelta("b")],
            (ThinkingBlock("ab"), TextBlock("x")),
            False,
        ),
    ],
)
async def test_the_stream_must_equal_the_response_after_merging_thinking(chunks, content, ok):
    response = scripted_response("r1", list(content), chunks=tuple(chunks))
    run, _ = start([response])
    _, result = await settle(run)
    if ok:
        assert isinstance(result, Completed), result
    else:
        assert isinstance(result, Failed) and result.code == "MODEL_PROTOCOL_ERROR"
        assert "differs from the streamed chunks" in result.detail


async def test_thinking_past_its_step_limit_is_a_protocol_error():
    big = "x" * (MAX_STEP_THINKING + 1)
    run, _ = start([scripted_response("r1", [ThinkingBlock(big), TextBlock("hi")])])
    _, result = await settle(run)
    assert isinstance(result, Failed) and "characters of thinking" in result.detail


@pytest.mark.parametrize("stop", ["refusal", "content_filter"])
async def test_a_refusal_or_filter_never_reads_as_a_clean_stop(stop):
    run, _ = start([scripted_response("r1", "I can't help with that.", stop)])
    _, result = await settle(run)
    assert isinstance(result, Completed) and result.stop_reason == stop


@pytest.mark.parametrize("stop", ["refusal", "content_filter"])
async def test_a_refusal_or_filter_with_tool_calls_is_a_protocol_error(stop):
    response = scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})], stop)
    run, _ = start([response])
    _, result = await settle(run)
    assert isinstance(result, Failed) and f"stop reason is {stop!r} but there are tool calls" in (
        result.detail
    )


@pytest.mark.parametrize(
    ("stop", "end"), [("refusal", TurnRefusal()), ("content_filter", TurnContentFilter())]
)
async def test_a_turn_ends_with_the_stop_word_and_it_is_sticky(stop, end):
    agent = Agent(
        model=ScriptedModel(
            [scripted_response("r1", "no", stop), scripted_response("r2", "fine now")]
        )
    )
    agent.follow_up(UserMessage("f1", "go on"))
    result = await agent.prompt(UserMessage("u1", "hi"))
    assert result.steps == 2 and result.final_text == "fine now"
    assert result.end == end


async def test_a_refusal_outranks_an_earlier_length_stop():
    agent = Agent(
        model=ScriptedModel(
            [scripted_response("r1", "cut", "length"), scripted_response("r2", "no", "refusal")]
        )
    )
    agent.follow_up(UserMessage("f1", "go on"))
    assert (await agent.prompt(UserMessage("u1", "hi"))).end == TurnRefusal()
    agent = Agent(model=ScriptedModel([scripted_response("r1", "done")]))
    assert (await agent.prompt("hi")).end == TurnCompleted()
    agent = Agent(
        model=ScriptedModel(
            [scripted_response("r1", "no", "refusal"), scripted_response("r2", "cut", "length")]
        )
    )
    agent.follow_up(UserMessage("f1", "go on"))
    assert (await agent.prompt(UserMessage("u1", "hi"))).end == TurnRefusal()
    assert TurnLength() != TurnRefusal()


@tool
async def screenshot() -> ImageBlock:
    """Take a screenshot."""
    return IMAGE


@tool
async def chart(kind: str) -> ToolResult:
    """Draw a chart."""
    if kind == "bad":
        return ToolResult((TextBlock("chart:"), ImageBlock("image/tiff", data=b"II*")))
    return ToolResult((TextBlock(f"{kind} chart:"), IMAGE), is_error=kind == "error")


@tool
async def pages() -> list:
    """Return pages."""
    return [TextBlock("page 1"), PDF]


async def test_a_tool_may_return_blocks():
    tools = ToolRegistry([screenshot, chart, pages])
    result = await execute_tool_call(tools, ToolCall("c1", "screenshot", {}))
    assert result.content == (IMAGE,) and not result.is_error
    result = await execute_tool_call(tools, ToolCall("c2", "chart", {"kind": "bar"}))
    assert result.content == (TextBlock("bar chart:"), IMAGE) and not result.is_error
    result = await execute_tool_call(tools, ToolCall("c3", "chart", {"kind": "error"}))
    assert result.is_error and result.content[1] == IMAGE
    result = await execute_tool_call(tools, ToolCall("c4", "pages", {}))
    assert result.content == (TextBlock("page 1"), PDF)


async def test_a_tool_returning_a_bad_block_gets_an_error_result_saying_which():
    tools = ToolRegistry([chart])
    result = await execute_tool_call(tools, ToolCall("c1", "chart", {"kind": "bad"}))
    assert result.is_error and type(result.content) is str
    assert "returned content that cannot be sent: content[1].media_type 'image/tiff'" in (
        result.content
    )


async def test_an_image_a_tool_returns_reaches_the_next_request():
    run, model = start(
        [scripted_response("r1", [call("screenshot", "c1")]), scripted_response("r2", "I see it")],
        tools=ToolRegistry([screenshot]),
    )
    events, result = await settle(run)
    assert isinstance(result, Completed)
    assert model.requests[1].messages[2].content == (IMAGE,)
    assert_run_invariants(events, result)


async def test_max_tool_result_chars_cuts_the_text_blocks_and_keeps_the_image():
    @tool
    async def long_chart() -> ToolResult:
        """A chart with a long caption."""
        return ToolResult((TextBlock("a" * 500), IMAGE, TextBlock("b" * 500)))

    agent = Agent(
        model=ScriptedModel(
            [scripted_response("r1", [call("long_chart", "c1")]), scripted_response("r2", "ok")]
        ),
        tools=[long_chart],
        max_tool_result_chars=200,
    )
    result = await agent.prompt("draw")
    content = result.messages[2].content
    assert content[1] == IMAGE
    assert sum(len(b.text) for b in content if type(b) is TextBlock) <= 200
    assert "characters cut" in content[0].text


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_media_and_thinking_survive_the_ledger_and_a_resume(tmp_path, kind):
    store = JsonlStore(tmp_path) if kind == "jsonl" else SqliteStore(tmp_path / "s.db")
    script = [
        scripted_response("r1", [ThinkingBlock("look first", "sig=="), call("screenshot", "c1")]),
        scripted_response("r2", [RedactedThinkingBlock("opaque+/=="), TextBlock("A cat.")]),
    ]
    async with Agent(
        model=ScriptedModel(script), tools=[screenshot], store=store, session_id="s1"
    ) as agent:
        first = await agent.prompt(image_prompt())
    assert first.end == TurnCompleted()
    loaded = await store.load("s1")
    derived = derive(loaded.records)
    assert derived.messages == list(first.messages)
    assert derived.messages[0].content[1].data == PNG  # bytes, not their base64
    # resume: the model is asked again with exactly the stored content
    model = ScriptedModel([scripted_response("r3", "Yes.")])
    again = await Agent.resume(store, "s1", model=model, tools=[screenshot])
    async with again:
        result = await again.prompt("sure?")
    assert result.messages[: len(first.messages)] == first.messages
    assert model.requests[0].messages[: len(first.messages)] == first.messages


async def test_replay_model_streams_thinking_as_it_was_recorded(tmp_path):
    store = JsonlStore(tmp_path)
    async with Agent(
        model=ScriptedModel(thinking_script()), store=store, session_id="s1", tools=[add]
    ) as agent:
        first = await agent.prompt("20 + 22?")
    loaded = await store.load("s1")
    async with Agent(model=ReplayModel(loaded.records), tools=[add]) as agent:
        again = await agent.prompt(UserMessage(first.messages[0].id, "20 + 22?"))
    assert again.messages == first.messages


def test_the_token_estimate_counts_an_image_not_its_base64():
    from trio_agent.session import estimate_tokens

    small = ModelRequest("request-001", (UserMessage("u1", (TextBlock("hi"), IMAGE)),), ())
    big_image = ImageBlock("image/png", data=bytes(3_000_000))
    big = ModelRequest("request-001", (UserMessage("u1", (TextBlock("hi"), big_image)),), ())
    assert estimate_tokens(big) == estimate_tokens(small)  # an image is an image
    assert 1600 <= estimate_tokens(small) < 1700


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ((), "holds no block"),
        ((ImageBlock("image/png", data=b""),), "data is empty"),
        ((ImageBlock("image/png", url="https://x.io/a b.png"),), "not an http(s) URL"),
        ((ImageBlock("image/png", url="https://x.io/a\n.png"),), "not an http(s) URL"),
        ((ImageBlock("image/png", url="https://"),), "not an http(s) URL with a host"),
        ((ImageBlock("image/png", url="http://?x=1"),), "not an http(s) URL with a host"),
    ],
)
def test_content_no_provider_can_take_is_refused_at_once(content, words):
    with pytest.raises(TranscriptError, match="content") as caught:
        validate_transcript([UserMessage("u1", content)])
    assert words in str(caught.value)


@tool
async def mixed() -> list:
    """Return a caption and an image in a plain list."""
    return ["caption", ImageBlock("image/png", data=bytes(MAX_MEDIA_BYTES + 1))]


async def test_a_list_mixing_blocks_and_values_is_an_error_not_json_past_the_limits():
    # The review found ["caption", ImageBlock(25 MB)] JSON-encoded: the image went
    # to the model as 34 M characters of base64 text, past every media limit.
    result = await execute_tool_call(ToolRegistry([mixed]), ToolCall("c1", "mixed", {}))
    assert result.is_error and type(result.content) is str and len(result.content) < 300
    assert "content[0] is a str, not a TextBlock, ImageBlock or DocumentBlock" in result.content


@pytest.mark.parametrize(
    ("lengths", "limit"),
    [([50] * 200, 1000), ([10, 100_000], 200), ([500, 500], 200), ([50, 5000, 3000], 1000)],
)
def test_cut_content_fits_the_limit_and_never_grows(lengths, limit):
    # The review found cut blocks replaced by markers longer than what they cut:
    # 200 blocks of 50 characters came out 10,800 characters long for a limit of 1,000.
    from trio_agent.session._retry import truncate_content

    content = tuple(
        block for i, n in enumerate(lengths) for block in (TextBlock(chr(97 + i % 26) * n), IMAGE)
    )
    cut = truncate_content(content, limit)
    texts = [b.text for b in cut if type(b) is TextBlock]
    assert sum(map(len, texts)) <= limit
    assert [b for b in cut if type(b) is ImageBlock] == [IMAGE] * len(lengths)
    short = [n for n in lengths if n * len(lengths) <= limit]
    for n in short:  # a block within its share is kept whole
        assert any(len(t) == n for t in texts)


def test_the_token_estimate_never_encodes_the_media():
    # The review found each step base64-encoding every image once more, only to
    # count it (40 ms a step for a 20 MB image, with a context window set).
    import tracemalloc

    from trio_agent.session import estimate_tokens

    image = ImageBlock("image/png", data=bytes(MAX_MEDIA_BYTES))
    request = ModelRequest("request-001", (UserMessage("u1", (TextBlock("hi"), image)),), ())
    tracemalloc.start()
    estimate_tokens(request)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100_000


async def test_the_invariants_compare_a_calls_arguments_as_the_step_does():
    # The second review found assert_run_invariants comparing arguments in key
    # order while the step sorts keys: a stream and a response that give one
    # call's keys in different orders are one call.
    streamed = ToolCall("c1", "add", {"right": 2, "left": 1})
    answered = ToolCall("c1", "add", {"left": 1, "right": 2})
    response = scripted_response("r1", [answered], chunks=(streamed,))
    run, _ = start([response, scripted_response("r2", "3")])
    events, result = await settle(run)
    assert isinstance(result, Completed)
    assert_run_invariants(events, result)
