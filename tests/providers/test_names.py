"""Model names (``providers.infer_model``): ``"provider:model"``, the presets for
OpenAI-compatible services, each with its base URL and key variable, and a local
server that needs no key (issue 35), against the loopback server."""

from __future__ import annotations

import pytest
from loopback import Reply
from sse_bodies import DONE, REQUEST, anthropic_hello, choice, sse

from trio_agent import (
    Agent,
    AnthropicModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
)
from trio_agent.providers import PRESETS, infer_model

KEYS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    *(preset.key_variable for preset in PRESETS.values()),
)
BASES = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", *(f"{name.upper()}_BASE_URL" for name in PRESETS))


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No key or base URL from the machine running the tests."""
    for variable in {*KEYS, *BASES}:
        monkeypatch.delenv(variable, raising=False)


def hello() -> bytes:
    return sse(choice({"content": "hi"}), choice({}, "stop")) + DONE


@pytest.mark.parametrize(
    ("name", "base_url", "key_variable"),
    [
        ("ollama", "http://localhost:11434/v1", "OLLAMA_API_KEY"),
        ("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        ("deepseek", "https://api.deepseek.com", "DEEPSEEK_API_KEY"),
        ("gemini", "https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY"),
        ("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        ("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
        ("vllm", "http://localhost:8000/v1", "VLLM_API_KEY"),
        ("litellm", "http://localhost:4000", "LITELLM_API_KEY"),
    ],
)
def test_each_preset_names_its_base_url_and_key_variable(name, base_url, key_variable, monkeypatch):
    monkeypatch.setenv(key_variable, "k-" + name)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-NOT-FOR-OTHERS")
    preset = PRESETS[name]
    assert (preset.base_url, preset.key_variable) == (base_url, key_variable)
    model = infer_model(f"{name}:some/model:tag")
    assert type(model) is OpenAIChatModel
    assert model.model == "some/model:tag"  # split at the first colon only
    assert model.base_url == base_url
    headers = model.request_headers(REQUEST)
    assert headers["authorization"] == f"Bearer k-{name}"  # never OPENAI_API_KEY
    assert model.provider == preset.label


@pytest.mark.parametrize(
    ("name", "adapter"),
    [
        ("openai:gpt-4o", OpenAIChatModel),
        ("openai-responses:gpt-5", OpenAIResponsesModel),
        ("anthropic:claude-sonnet-4-5", AnthropicModel),
    ],
)
def test_the_providers_own_apis_read_their_own_variables(name, adapter, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-o")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-a")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://anthropic.example")
    model = infer_model(name, max_argument_bytes=1000)  # the adapter's keywords pass through
    assert type(model) is adapter and model.model == name.partition(":")[2]
    assert model.max_argument_bytes == 1000
    if adapter is AnthropicModel:
        assert model.base_url == "https://anthropic.example"


@pytest.mark.parametrize("name", ["gpt-4o", ":gpt-4o", "openai:", ""])
def test_a_name_without_provider_and_model_says_what_a_name_looks_like(name):
    with pytest.raises(ValueError, match="a model name is 'provider:model'") as caught:
        infer_model(name)
    assert "ollama" in str(caught.value)  # the known providers are listed


def test_an_unknown_provider_is_a_clear_error_listing_the_known_ones():
    with pytest.raises(ValueError, match="unknown provider 'claude'") as caught:
        infer_model("claude:sonnet")
    for name in PRESETS:
        assert name in str(caught.value)


def test_an_unknown_keyword_is_refused_by_name():
    with pytest.raises(TypeError, match="api_kye"):
        infer_model("ollama:llama3.2", api_kye="k")


def test_a_hosted_service_without_its_key_says_which_variable_to_set():
    with pytest.raises(ValueError, match="no API key for Groq: set GROQ_API_KEY"):
        infer_model("groq:llama-3.3-70b-versatile")


@pytest.mark.parametrize("cls", [OpenAIChatModel, OpenAIResponsesModel, AnthropicModel])
@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "127.1.2.3"])
def test_a_server_on_this_machine_needs_no_key(cls, host):
    """A local server (llama.cpp, Ollama, vLLM) was refused without a dummy
    OPENAI_API_KEY; it needs no key and gets no key header."""
    model = cls("m", base_url=f"http://{host}:8000/v1")
    headers = model.request_headers(REQUEST)
    assert "authorization" not in headers and "x-api-key" not in headers


def test_a_remote_server_still_needs_a_key_unless_told_it_needs_none():
    with pytest.raises(ValueError, match="no API key: set OPENAI_API_KEY"):
        OpenAIChatModel("m", base_url="http://gpu-box.internal:8000/v1")
    model = OpenAIChatModel("m", base_url="http://gpu-box.internal:8000/v1", api_key="")
    assert "authorization" not in model.request_headers(REQUEST)


def test_a_self_hosted_preset_elsewhere_needs_no_key():
    model = infer_model("vllm:qwen", base_url="http://gpu-box.internal:8000/v1")
    assert model.base_url == "http://gpu-box.internal:8000/v1"
    assert "authorization" not in model.request_headers(REQUEST)


async def test_an_agent_takes_a_model_name_and_a_local_server_gets_no_key(loopback, monkeypatch):
    """``Agent(model="ollama:...")``: the preset's base URL variable, no key, no
    authorization header, the model named as given."""
    monkeypatch.setenv("OLLAMA_BASE_URL", f"{loopback.url}/v1")
    loopback.replies.append(Reply(body=hello()))
    agent = Agent(model="ollama:llama3.2:3b")
    result = await agent.prompt("hello")
    assert result.end.reason == "completed" and result.final_text == "hi"
    seen = loopback.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert "authorization" not in seen.headers
    assert seen.json()["model"] == "llama3.2:3b"


async def test_run_agent_loop_takes_a_model_name(loopback, monkeypatch):
    monkeypatch.setenv("VLLM_BASE_URL", f"{loopback.url}/v1")
    loopback.replies.append(Reply(body=hello()))
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")],
        model="vllm:qwen",
        tools=ToolRegistry(),
        max_steps=1,
    )
    result = await run.wait()
    assert result.status == "completed" and result.final_text == "hi"
    assert loopback.requests[0].json()["model"] == "qwen"


async def test_a_bad_model_name_fails_the_agent_at_once():
    with pytest.raises(ValueError, match="unknown provider 'gpt'"):
        Agent(model="gpt:4o")


async def test_anthropic_on_this_machine_sends_no_key(loopback):
    loopback.replies.append(Reply(body=anthropic_hello()))
    agent = Agent(model=AnthropicModel("claude", base_url=loopback.url))
    assert (await agent.prompt("hello")).final_text == "Hi"
    assert "x-api-key" not in loopback.requests[0].headers
