"""Provider constructors say what they take, and their errors say what to do."""

from __future__ import annotations

import inspect

import pytest

from trio_agent import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel


@pytest.mark.parametrize("cls", [OpenAIChatModel, AnthropicModel, OpenAIResponsesModel])
def test_constructors_spell_out_every_option(cls):
    # DESIGN 11.3: explicit keywords, no **options
    parameters = inspect.signature(cls).parameters
    assert all(p.kind is not p.VAR_KEYWORD for p in parameters.values())
    names = ("api_key", "base_url", "settings", "default_headers", "connect_seconds")
    for name in (*names, "read_seconds", "ssl_context", "proxy", "pool", "max_argument_bytes"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError, match="api_kye"):
        cls("m", api_kye="k")


@pytest.mark.parametrize(
    ("cls", "variable"),
    [(OpenAIChatModel, "OPENAI_API_KEY"), (AnthropicModel, "ANTHROPIC_API_KEY")],
)
def test_a_missing_key_says_which_variable_to_set(cls, variable, monkeypatch):
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ValueError, match=f"no API key: set {variable} or pass api_key="):
        cls("m")


@pytest.mark.parametrize("url", ["localhost:8000/v1", "ftp://example.com", "http://", "//host/v1"])
def test_a_base_url_needs_a_scheme_and_a_host(url):
    with pytest.raises(ValueError, match="base_url must be an http:// or https:// URL with a host"):
        OpenAIChatModel("m", api_key="k", base_url=url)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:99999/v1", "bad port"),
        ("http://127.0.0.1:abc/v1", "bad port"),
        ("http://127.0.0.1:0/v1", "bad port"),
        ("https://proxy.example/v1#SECRET", "must not have a fragment"),
        ("https://proxy.example/v1?api-version=1#SECRET", "must not have a fragment"),
        ("http://user:SECRET@proxy.example/v1", "must not hold a user name or password"),
        ("http://SECRET@proxy.example/v1", "must not hold a user name or password"),
    ],
)
def test_a_base_url_with_a_bad_port_a_fragment_or_user_info_is_refused(url, says, monkeypatch):
    for given in ({"base_url": url}, {}):
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)  # the variable is checked alike
        with pytest.raises(ValueError, match=says) as caught:
            AnthropicModel("m", api_key="k", **given)
        assert "SECRET" not in str(caught.value)  # a possible secret is never quoted


def test_a_good_base_url_loses_its_trailing_slash(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "https://proxy.example/v1/")
    assert OpenAIChatModel("m", api_key="k").base_url == "https://proxy.example/v1"
    assert AnthropicModel("m", api_key="k", base_url="http://127.0.0.1:9/").base_url == (
        "http://127.0.0.1:9"
    )
    for url in ("https://[::1]:65535/v1", "http://proxy.example:1/api/@v1"):
        assert OpenAIChatModel("m", api_key="k", base_url=url).base_url == url


async def test_a_base_url_query_is_kept_after_the_api_path(loopback):
    # Issue 16: Azure's deployments take ?api-version=...; the path was glued
    # after the query string.
    from loopback import Reply, fixture

    from trio_agent import ModelRequest, UserMessage
    from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel

    request = ModelRequest("request-001", (UserMessage("u1", "hi"),), ())
    base = f"{loopback.url}/openai/deployments/gpt-4o/?api-version=2024-10-21"
    cases = [
        (OpenAIChatModel, "openai_text.sse", "/openai/deployments/gpt-4o/chat/completions"),
        (AnthropicModel, "anthropic_text.sse", "/openai/deployments/gpt-4o/v1/messages"),
    ]
    for make, name, path in cases:
        loopback.replies.append(Reply(body=fixture(name)))
        model = make("m", api_key="k", base_url=base)
        assert model.base_url == f"{loopback.url}/openai/deployments/gpt-4o?api-version=2024-10-21"
        async with model.stream(request) as stream:
            await stream.response()
        assert loopback.requests[-1].path == f"{path}?api-version=2024-10-21"
    responses = OpenAIResponsesModel("m", api_key="k", base_url=base)
    assert responses._url().endswith("/openai/deployments/gpt-4o/responses?api-version=2024-10-21")
