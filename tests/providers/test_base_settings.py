"""``ModelSettings`` and headers as each adapter sends them (issue 16, items 4
and 5; DESIGN 11.3): the exact body fields per provider, which settings win
(the request's over the model's over the legacy keywords, ``extra_body`` over
all), ``default_headers`` and ``extra_headers`` on the wire with the key still
redacted from errors, and what is refused before anything is sent. Against the
real loopback server, answered with real recorded streams."""

from __future__ import annotations

import json
from typing import Any

import pytest
from key_forms import assert_scrubbed, every_form
from loopback import Reply, fixture
from paths import WIRE

from trio_agent import (
    ModelAuthenticationError,
    ModelRequest,
    ModelRequestError,
    ModelSettings,
    TextBlock,
    ToolSpec,
    UserMessage,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel

KEY = "sk-test-SECRET-0123456789"
ADD = ToolSpec("add", "Add two integers.", {"type": "object", "properties": {}})
MUL = ToolSpec("mul", "Multiply two integers.", {"type": "object", "properties": {}})

FULL = ModelSettings(
    max_tokens=300,
    temperature=0.5,
    top_p=0.9,
    stop=("END", "STOP"),
    seed=7,
    tool_choice="add",
    parallel_tool_calls=False,
    reasoning_effort="low",
    thinking_budget=100,
)


def served(name: str) -> bytes:
    """A recorded stream as a server sends it (some recordings lost the blank line
    after their last event, which the API sends; it is put back)."""
    body = (WIRE / name).read_bytes()
    return body if body.endswith(b"\n\n") else body + b"\n\n"


def openai(loopback: Any, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", api_key=KEY, base_url=f"{loopback.url}/v1", **options)


def anthropic(loopback: Any, **options: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url=loopback.url, **options)


def responses(loopback: Any, **options: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("gpt-5", api_key=KEY, base_url=f"{loopback.url}/v1", **options)


RECORDING = {
    openai: "openai_chat_text.sse",
    anthropic: "anthropic_text.sse",
    responses: "responses_text.sse",
}
ALL = pytest.mark.parametrize("make", list(RECORDING), ids=["openai", "anthropic", "responses"])

# the fields each adapter sends whatever the settings
BASE = {
    openai: {"model", "messages", "stream", "stream_options", "tools"},
    anthropic: {"model", "max_tokens", "messages", "stream", "system", "tools"},
    responses: {"model", "instructions", "input", "tools", "stream", "store", "include"},
}


def request(settings: ModelSettings | None = None, tools: tuple[ToolSpec, ...] = (ADD, MUL)):
    return ModelRequest(
        id="request-001",
        messages=(UserMessage("u1", "What is 20 + 22?"),),
        tools=tools,
        system="Be brief.",
        settings=settings,
    )


async def sent(loopback: Any, make: Any, req: ModelRequest | None = None, **options: Any) -> Any:
    """Stream ``req`` through the adapter ``make`` builds; the request the server saw."""
    loopback.replies.append(Reply(body=served(RECORDING[make]), piece=211))
    async with make(loopback, **options).stream(req or request()) as stream:
        async for _ in stream:
            pass
        response = await stream.response()
    assert any(type(b) is TextBlock and b.text for b in response.content)
    return loopback.requests[-1]


async def fields(loopback: Any, make: Any, req: ModelRequest | None = None, **options: Any):
    """The body fields beyond those every request carries (and ``max_tokens``)."""
    body = (await sent(loopback, make, req, **options)).json()
    return {k: v for k, v in body.items() if k not in BASE[make] or k == "max_tokens"}


async def test_openai_sends_every_setting_it_has_under_its_names(loopback):
    assert await fields(loopback, openai, request(FULL)) == {
        "max_completion_tokens": 300,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["END", "STOP"],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
        "parallel_tool_calls": False,
        "reasoning_effort": "low",
    }  # no thinking_budget: Chat Completions has no such field


async def test_anthropic_sends_every_setting_it_has_under_its_names(loopback):
    assert await fields(loopback, anthropic, request(FULL)) == {
        "max_tokens": 300,
        "thinking": {"type": "enabled", "budget_tokens": 100},
        "temperature": 0.5,
        "top_p": 0.9,
        "stop_sequences": ["END", "STOP"],
        "tool_choice": {"type": "tool", "name": "add", "disable_parallel_tool_use": True},
    }  # no seed, no reasoning_effort


async def test_responses_sends_every_setting_it_has_under_its_names(loopback):
    assert await fields(loopback, responses, request(FULL)) == {
        "max_output_tokens": 300,
        "temperature": 0.5,
        "top_p": 0.9,
        "tool_choice": {"type": "function", "name": "add"},
        "parallel_tool_calls": False,
        "reasoning": {"effort": "low"},
    }  # no stop, seed or thinking_budget


@ALL
async def test_no_settings_send_no_setting_fields(loopback, make):
    extra = {"max_tokens": 4096} if make is anthropic else {}
    empty = ModelSettings()
    assert await fields(loopback, make, request(None), settings=empty) == extra
    assert await fields(loopback, make, request(empty), default_headers={}) == extra


MODES = {
    openai: {"auto": "auto", "none": "none", "required": "required"},
    anthropic: {"auto": {"type": "auto"}, "none": {"type": "none"}, "required": {"type": "any"}},
    responses: {"auto": "auto", "none": "none", "required": "required"},
}


@ALL
@pytest.mark.parametrize("mode", ["auto", "none", "required"])
async def test_tool_choice_modes(loopback, make, mode):
    got = await fields(loopback, make, request(ModelSettings(tool_choice=mode)))
    assert got.get("tool_choice") == MODES[make][mode]


@pytest.mark.parametrize(
    ("settings", "choice"),
    [
        (
            ModelSettings(parallel_tool_calls=False),
            {"type": "auto", "disable_parallel_tool_use": True},
        ),
        (
            ModelSettings(tool_choice="required", parallel_tool_calls=False),
            {"type": "any", "disable_parallel_tool_use": True},
        ),
        (ModelSettings(tool_choice="none", parallel_tool_calls=False), {"type": "none"}),
        (ModelSettings(tool_choice="auto", parallel_tool_calls=True), {"type": "auto"}),
    ],
)
async def test_anthropic_parallel_tool_calls_off_goes_inside_tool_choice(
    loopback, settings, choice
):
    assert (await fields(loopback, anthropic, request(settings)))["tool_choice"] == choice


@ALL
async def test_tool_settings_go_only_with_tools(loopback, make):
    settings = ModelSettings(tool_choice="required", parallel_tool_calls=True, temperature=0.2)
    got = await fields(loopback, make, request(settings, tools=()))
    assert "tool_choice" not in got and "parallel_tool_calls" not in got
    assert got["temperature"] == 0.2


@ALL
async def test_a_tool_choice_naming_a_tool_not_offered_is_refused_before_sending(loopback, make):
    with pytest.raises(ModelRequestError, match=r"'sub'.*offers: add, mul"):
        await sent(loopback, make, request(ModelSettings(tool_choice="sub")))
    assert loopback.requests == []


@pytest.mark.parametrize(
    ("options", "settings"),
    [
        ({}, ModelSettings(thinking_budget=4096)),  # the keyword's default, 4096
        ({"max_tokens": 1000}, ModelSettings(thinking_budget=2000)),
        ({}, ModelSettings(max_tokens=1024, thinking_budget=1024)),
        ({"max_tokens": 1 << 20}, ModelSettings(max_tokens=500, thinking_budget=600)),
    ],
)
async def test_anthropic_thinking_budget_not_below_max_tokens_is_refused_before_sending(
    loopback, options, settings
):
    with pytest.raises(ModelRequestError, match=r"requires max_tokens > .*budget_tokens"):
        await sent(loopback, anthropic, request(settings), **options)
    assert loopback.requests == []


async def test_anthropic_thinking_budget_below_max_tokens_goes(loopback):
    got = await fields(loopback, anthropic, request(ModelSettings(thinking_budget=4095)))
    assert got == {"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 4095}}


@ALL
async def test_the_requests_settings_win_over_the_models_field_by_field(loopback, make):
    mine = ModelSettings(temperature=0.1, top_p=0.5, max_tokens=50)
    theirs = ModelSettings(temperature=0.9)
    got = await fields(loopback, make, request(theirs), settings=mine)
    assert got["temperature"] == 0.9 and got["top_p"] == 0.5
    name = {openai: "max_completion_tokens", anthropic: "max_tokens"}.get(make, "max_output_tokens")
    assert got[name] == 50
    alone = await fields(loopback, make, request(None), settings=mine)
    assert alone["temperature"] == 0.1 and alone[name] == 50


async def test_openai_legacy_token_keywords_go_as_given_until_a_setting_is_set(loopback):
    legacy = {"max_tokens": 40, "max_completion_tokens": 60}
    got = await fields(loopback, openai, request(None), **legacy)
    assert got == {"max_tokens": 40, "max_completion_tokens": 60}
    got = await fields(loopback, openai, request(ModelSettings(max_tokens=9)), **legacy)
    assert got == {"max_completion_tokens": 9}
    got = await fields(loopback, openai, settings=ModelSettings(max_tokens=8), **legacy)
    assert got == {"max_completion_tokens": 8}


async def test_anthropic_max_tokens_setting_wins_over_the_keyword(loopback):
    got = await fields(loopback, anthropic, request(ModelSettings(max_tokens=77)), max_tokens=999)
    assert got == {"max_tokens": 77}
    got = await fields(loopback, anthropic, max_tokens=999, settings=ModelSettings(max_tokens=78))
    assert got == {"max_tokens": 78}


async def test_responses_settings_win_over_its_keywords_and_keep_the_summary(loopback):
    legacy = {"max_output_tokens": 500, "reasoning_effort": "high", "reasoning_summary": "auto"}
    got = await fields(loopback, responses, request(None), **legacy)
    assert got == {"max_output_tokens": 500, "reasoning": {"effort": "high", "summary": "auto"}}
    settings = ModelSettings(max_tokens=64, reasoning_effort="minimal")
    got = await fields(loopback, responses, request(settings), **legacy)
    assert got == {"max_output_tokens": 64, "reasoning": {"effort": "minimal", "summary": "auto"}}


@ALL
async def test_extra_body_goes_last_over_everything(loopback, make):
    model_settings = ModelSettings(temperature=0.3, extra_body={"top_p": 0.1, "a": 1, "b": 1})
    req_settings = ModelSettings(top_p=0.7, extra_body={"b": 2, "stream": True, "model": "x"})
    body = (
        await sent(
            loopback,
            make,
            request(req_settings),
            settings=model_settings,
            extra_body={"temperature": 1.0, "a": 0, "c": 3},
        )
    ).json()
    # the constructor's extra_body over the fields, the settings' over it
    assert body["temperature"] == 1.0 and body["top_p"] == 0.1
    assert (body["a"], body["b"], body["c"], body["model"]) == (1, 2, 3, "x")


OWN_HEADER = {openai: "authorization", anthropic: "anthropic-version", responses: "authorization"}


@ALL
async def test_default_and_extra_headers_reach_the_request(loopback, make):
    defaults = {"OpenAI-Organization": "org-1", "X-Both": "default", "anthropic-beta": "b-1"}
    extra = {"x-both": "extra", "HTTP-Referer": "https://example.org"}
    seen = await sent(
        loopback, make, request(ModelSettings(extra_headers=extra)), default_headers=defaults
    )
    headers = seen.headers
    assert headers["openai-organization"] == "org-1" and headers["anthropic-beta"] == "b-1"
    assert headers["x-both"] == "extra" and headers["http-referer"] == "https://example.org"
    assert headers["content-type"] == "application/json"  # the adapter's own stay
    assert "Bearer" in headers.get("authorization", "") or headers["x-api-key"] == KEY


@ALL
async def test_a_header_given_in_any_case_replaces_the_adapters_own(loopback, make):
    name = OWN_HEADER[make]
    model = make(loopback, default_headers={name.title(): "replaced"})
    headers = model.request_headers(request())
    assert [k for k in headers if k.lower() == name] == [name]  # one line, not two
    assert (await sent(loopback, make, default_headers={name.title(): "replaced"})).headers[
        name
    ] == "replaced"
    turn = request(ModelSettings(extra_headers={name.upper(): "by the turn"}))
    seen = await sent(loopback, make, turn, default_headers={name: "replaced"})
    assert seen.headers[name] == "by the turn"


async def test_anthropic_beta_and_version_from_default_headers(loopback):
    seen = await sent(
        loopback,
        anthropic,
        default_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
        anthropic_version="2023-01-01",
    )
    assert seen.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert seen.headers["anthropic-version"] == "2023-01-01"


@ALL
@pytest.mark.parametrize("key", ["sk-test/abc+def=ghi", "sk-plain-0123456789abcdef"])
async def test_the_key_is_still_redacted_with_custom_headers(loopback, make, key):
    message = f"Incorrect API key provided: {every_form(key)}"
    body = json.dumps({"error": {"message": message, "type": "authentication_error"}})
    loopback.replies.append(Reply(status=401, body=body.encode()))
    model = make(loopback, default_headers={"OpenAI-Project": "proj-1"})
    model._key, model._redactor = key, type(model._redactor)(key)  # the key under test
    req = request(ModelSettings(extra_headers={"anthropic-beta": "b"}))
    with pytest.raises(ModelAuthenticationError) as caught:
        async with model.stream(req) as stream:
            async for _ in stream:
                pass
    assert "[redacted]" in str(caught.value)
    assert_scrubbed(caught.value, key)
    assert loopback.requests[0].headers["openai-project"] == "proj-1"


@ALL
@pytest.mark.parametrize(
    "extra",
    [{"Content-Length": "0"}, {"host": "evil.example"}, {"x-a": "1\r\nx-b: 2"}, {"bad name": "1"}],
)
async def test_bad_extra_headers_in_a_request_are_refused_before_sending(loopback, make, extra):
    with pytest.raises(ModelRequestError, match="extra_headers"):
        await sent(loopback, make, request(ModelSettings(extra_headers=extra)))
    assert loopback.requests == []


class NOWHERE:  # a base URL for models never asked to send
    url = "http://127.0.0.1:9"


@ALL
@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ("temperature=0.5", TypeError),
        ({"temperature": 0.5}, TypeError),
        (ModelSettings(temperature=2.5), ValueError),
        (ModelSettings(max_tokens=0), ValueError),
        (ModelSettings(reasoning_effort="extreme"), ValueError),
        (ModelSettings(tool_choice="no such tool!"), ValueError),
        (ModelSettings(extra_headers={"x": "a\nb"}), ValueError),
    ],
)
def test_bad_settings_raise_at_construction(make, settings, error):
    with pytest.raises(error, match=r"^settings\b"):
        make(NOWHERE, settings=settings)


@ALL
@pytest.mark.parametrize(
    ("headers", "error", "says"),
    [
        ([("x-a", "1")], TypeError, "must be a dict"),
        ({"x-a": 1}, TypeError, "must be a str"),
        ({b"x-a": "1"}, ValueError, "not a header name"),
        ({"bad name": "1"}, ValueError, "not a header name"),
        ({"x:y": "1"}, ValueError, "not a header name"),
        ({"": "1"}, ValueError, "not a header name"),
        ({"x-a": "sk-SECRET\r\nx-b: 1"}, ValueError, "CR, LF or NUL"),
        ({"x-a": "sk-SECRET\0"}, ValueError, "CR, LF or NUL"),
        ({"Content-Length": "5"}, ValueError, "written by the HTTP client"),
        ({"Transfer-Encoding": "chunked"}, ValueError, "written by the HTTP client"),
        ({"Host": "example.org"}, ValueError, "written by the HTTP client"),
        ({"Proxy-Authorization": "Basic SECRET"}, ValueError, "written by the HTTP client"),
    ],
)
def test_bad_default_headers_raise_at_construction(make, headers, error, says):
    with pytest.raises(error, match="default_headers") as caught:
        make(NOWHERE, default_headers=headers)
    assert says in str(caught.value)
    assert "SECRET" not in str(caught.value)  # a value may be a secret: never quoted


@ALL
def test_the_models_settings_are_a_private_copy(make):
    body = {"a": 1}
    headers = {"x-a": "1"}
    settings = ModelSettings(temperature=0.5, extra_body=body)
    model = make(NOWHERE, settings=settings, default_headers=headers)
    body["a"], headers["x-a"] = 2, "2"
    assert model.settings == ModelSettings(temperature=0.5, extra_body={"a": 1})
    assert model.request_headers(request())["x-a"] == "1"


async def test_a_user_agent_given_replaces_the_clients_own(loopback):
    loopback.replies.append(Reply(body=fixture("openai_text.sse")))
    model = OpenAIChatModel(
        "m", api_key="k", base_url=f"{loopback.url}/v1", default_headers={"User-Agent": "my-app/1"}
    )
    async with model.stream(request()) as stream:
        await stream.response()
    assert loopback.requests[0].headers["user-agent"] == "my-app/1"
    raw = model.request_headers(request())
    assert raw["user-agent"] == "my-app/1"
