"""Native typed output on the wire (issue 18, DESIGN.md section 11.4): a request's
``output`` (an ``OutputFormat``) asks each provider for the answer's shape in its
documented form, and the answer streams back as ordinary JSON text. Over the
real adapters against the loopback server."""

from __future__ import annotations

import json
from typing import Any

from loopback import Reply
from wire_builders import AnthropicWire, ChatWire, ResponsesWire, pieces, wires

from trio_agent import ModelRequest, ModelSettings, TextBlock, TextDelta, ToolSpec, UserMessage
from trio_agent.model import OutputFormat

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
    "additionalProperties": False,
}
OUTPUT = OutputFormat("weather_report", SCHEMA)
ANSWER = {"city": "Hanoi", "temperature": 31.5}
SPEC = ToolSpec("get_weather", "The weather in a city.", {"type": "object", "properties": {}})


WIRES = wires(ChatWire, ResponsesWire, AnthropicWire)


def request(output: OutputFormat | None = OUTPUT, **fields: Any) -> ModelRequest:
    return ModelRequest(
        id="request-001",
        messages=(UserMessage("u1", "The weather in Hanoi, please."),),
        tools=(SPEC,),
        system="Be brief.",
        output=output,
        **fields,
    )


async def read(model: Any, req: ModelRequest) -> tuple[list[Any], Any]:
    async with model.stream(req) as stream:
        chunks = [chunk async for chunk in stream]
        return chunks, await stream.response()


@WIRES
async def test_the_request_carries_the_native_format_and_the_answer_streams_as_text(loopback, wire):
    text = json.dumps(ANSWER)
    parts = pieces(text, 5)
    loopback.replies.append(Reply(body=wire.text(parts), piece=37))
    chunks, response = await read(wire.model(loopback), request())
    body = loopback.requests[0].json()
    assert body[wire.field] == wire.expected(OUTPUT)
    # the schema went as it was given, not rewritten
    assert json.dumps(SCHEMA, separators=(",", ":")) in loopback.requests[0].body.decode()
    assert chunks == [TextDelta(piece) for piece in parts]
    assert response.content == (TextBlock(text),)
    assert response.stop_reason == "stop" and response.request_id == "request-001"
    assert json.loads(response.content[0].text) == ANSWER


@WIRES
async def test_without_output_the_request_carries_nothing_extra(loopback, wire):
    loopback.replies += [Reply(body=wire.text(["hi"])), Reply(body=wire.text(["hi"]))]
    model = wire.model(loopback)
    plain_chunks, plain = await read(model, request(output=None))
    await read(model, request())
    without, with_output = (seen.json() for seen in loopback.requests)
    assert wire.field not in without
    assert "json_schema" not in loopback.requests[0].body.decode()
    # the format is the one field output adds: everything else is the same
    assert with_output.pop(wire.field) == wire.expected(OUTPUT)
    assert with_output == without
    assert plain_chunks == [TextDelta("hi")] and plain.content == (TextBlock("hi"),)


@WIRES
async def test_strict_false_goes_as_given_where_the_api_has_the_flag(loopback, wire):
    loose = OutputFormat("loose", {"type": "object", "properties": {}}, strict=False)
    loopback.replies.append(Reply(body=wire.text(["{}"])))
    await read(wire.model(loopback), request(output=loose))
    sent = loopback.requests[0].json()[wire.field]
    assert sent == wire.expected(loose)
    if wire is AnthropicWire:  # the API's format has neither a name nor a strict flag
        assert sent == {"format": {"type": "json_schema", "schema": loose.schema}}
    else:
        assert "false" in json.dumps(sent) and "loose" in json.dumps(sent)


@WIRES
async def test_the_format_goes_beside_the_tools_and_the_settings(loopback, wire):
    loopback.replies.append(Reply(body=wire.text(["{}"])))
    settings = ModelSettings(max_tokens=500, temperature=0.25)
    await read(wire.model(loopback), request(settings=settings))
    body = loopback.requests[0].json()
    assert body[wire.field] == wire.expected(OUTPUT)
    assert body["temperature"] == 0.25 and len(body["tools"]) == 1


@WIRES
async def test_extra_body_still_overrides_the_format(loopback, wire):
    mine = {"type": "json_object"}
    theirs = {"type": "text"}
    loopback.replies += [Reply(body=wire.text(["{}"])) for _ in range(3)]
    model = wire.model(loopback, extra_body={wire.field: mine})
    await read(model, request())
    # the settings' extra_body wins over the constructor's, which wins over the adapter
    await read(model, request(settings=ModelSettings(extra_body={wire.field: theirs})))
    # extra_body can also add beside it: a field the adapter does not send
    other = wire.model(loopback, extra_body={"metadata": {"run": "r1"}})
    await read(other, request())
    first, second, third = (seen.json() for seen in loopback.requests)
    assert first[wire.field] == mine
    assert second[wire.field] == theirs
    assert third[wire.field] == wire.expected(OUTPUT) and third["metadata"] == {"run": "r1"}


async def test_the_responses_format_is_the_flat_sdk_shape(loopback):
    # ResponseFormatTextJSONSchemaConfigParam: type, name, schema, strict side by
    # side under text.format (not nested under json_schema as in chat completions)
    loopback.replies.append(Reply(body=ResponsesWire.text(["{}"])))
    await read(ResponsesWire.model(loopback), request())
    text = loopback.requests[0].json()["text"]
    assert set(text) == {"format"}
    assert set(text["format"]) == {"type", "name", "schema", "strict"}
    assert "json_schema" not in text["format"]


async def test_anthropic_sends_no_beta_header_for_the_ga_form(loopback):
    loopback.replies.append(Reply(body=AnthropicWire.text(["{}"])))
    await read(AnthropicWire.model(loopback), request())
    seen = loopback.requests[0]
    assert "anthropic-beta" not in seen.headers
    assert "output_format" not in seen.json()  # the beta field's name
