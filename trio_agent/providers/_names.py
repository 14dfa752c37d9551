"""Model names: ``"provider:model"`` made into a model by ``infer_model``, the one
parser of names, with the table of services it knows (``PRESETS``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, final

import msgspec

from ._base import check_base_url, is_loopback
from .anthropic import AnthropicModel
from .openai import OpenAIChatModel
from .responses import OpenAIResponsesModel

__all__ = ["PRESETS", "Preset", "infer_model"]

Api = Literal["openai", "openai-responses", "anthropic"]


@final
class Preset(msgspec.Struct, frozen=True, kw_only=True):
    """A service a model name may start with (``"groq:llama-3.3-70b-versatile"``):
    the API it speaks, where it is and which variable holds its key.

    ``base_url`` None: the adapter's own default (``OPENAI_BASE_URL`` or
    OpenAI's, ``ANTHROPIC_BASE_URL`` or Anthropic's). ``base_url_variable``
    overrides ``base_url`` when set. ``needs_key`` False: a server one runs
    oneself (Ollama, vLLM, a LiteLLM proxy), which sends its key only when
    ``key_variable`` is set. ``label`` names the service in errors, the
    ledger's model label and telemetry (``gen_ai.provider.name``, lower-cased).
    """

    name: str
    api: Api
    label: str
    key_variable: str
    base_url: str | None = None
    base_url_variable: str | None = None
    needs_key: bool = True


def _compatible(name: str, label: str, base_url: str, needs_key: bool = True) -> Preset:
    """A service speaking OpenAI's Chat Completions: ``NAME_API_KEY`` and
    ``NAME_BASE_URL`` are its variables."""
    prefix = name.upper()
    return Preset(
        name=name,
        api="openai",
        label=label,
        key_variable=f"{prefix}_API_KEY",
        base_url=base_url,
        base_url_variable=f"{prefix}_BASE_URL",
        needs_key=needs_key,
    )


PRESETS: Final[Mapping[str, Preset]] = MappingProxyType(
    {
        preset.name: preset
        for preset in (
            Preset(name="openai", api="openai", label="OpenAI", key_variable="OPENAI_API_KEY"),
            Preset(
                name="openai-responses",
                api="openai-responses",
                label="OpenAI",
                key_variable="OPENAI_API_KEY",
            ),
            Preset(
                name="anthropic",
                api="anthropic",
                label="Anthropic",
                key_variable="ANTHROPIC_API_KEY",
            ),
            _compatible("ollama", "Ollama", "http://localhost:11434/v1", needs_key=False),
            _compatible("openrouter", "OpenRouter", "https://openrouter.ai/api/v1"),
            _compatible("deepseek", "DeepSeek", "https://api.deepseek.com"),
            _compatible(
                "gemini", "Gemini", "https://generativelanguage.googleapis.com/v1beta/openai"
            ),
            _compatible("groq", "Groq", "https://api.groq.com/openai/v1"),
            _compatible("mistral", "Mistral", "https://api.mistral.ai/v1"),
            _compatible("vllm", "vLLM", "http://localhost:8000/v1", needs_key=False),
            _compatible("litellm", "LiteLLM", "http://localhost:4000", needs_key=False),
        )
    }
)
"""The services a model name may name, by prefix: OpenAI's two APIs and
Anthropic's, and OpenAI-compatible services with their base URL and key variable."""


def _known() -> str:
    return ", ".join(PRESETS)


def infer_model(
    name: str, **options: Any
) -> OpenAIChatModel | OpenAIResponsesModel | AnthropicModel:
    """The model ``name`` names: ``"provider:model"`` (split at the first colon:
    ``"ollama:llama3.2:3b"`` is Ollama's ``llama3.2:3b``), ``provider`` one of
    ``PRESETS``. ``options`` are the adapter's keywords (``settings=``,
    ``base_url=``, ``api_key=``, ``pool=``, ...): a keyword it does not take is a
    ``TypeError`` naming it.

    ``openai:`` is ``OpenAIChatModel``, ``openai-responses:``
    ``OpenAIResponsesModel``, ``anthropic:`` ``AnthropicModel``, each with its own
    variables (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ...). The other presets
    are ``OpenAIChatModel`` at the service's base URL (``base_url=``, else its
    ``NAME_BASE_URL`` variable, else the table's) with the key of its
    ``NAME_API_KEY`` variable (``api_key=`` over it), never ``OPENAI_API_KEY``:
    one service's key is never sent to another. A server one runs oneself
    (``ollama``, ``vllm``, ``litellm``), or any on localhost, needs no key.

    ``ValueError`` for a name that is not ``provider:model``, an unknown
    provider (the error lists the known ones), or a missing key (naming its
    variable).
    """
    if type(name) is not str:
        raise TypeError(f"a model name must be a str, got {type(name).__name__}")
    provider, colon, model = name.partition(":")
    if not colon or not provider or not model:
        raise ValueError(
            f"a model name is 'provider:model' (openai:gpt-4o, anthropic:claude-sonnet-4-5), "
            f"got {name!r}; providers: {_known()}"
        )
    preset = PRESETS.get(provider)
    if preset is None:
        raise ValueError(
            f"unknown provider {provider!r} in model name {name!r}; the known ones are "
            f"{_known()} (or pass a model object, such as OpenAIChatModel(model, "
            "base_url=...) for another compatible server)"
        )
    if preset.base_url is None:  # OpenAI's and Anthropic's own APIs: the adapters' variables
        if preset.api == "openai":
            return OpenAIChatModel(model, **options)
        if preset.api == "openai-responses":
            return OpenAIResponsesModel(model, **options)
        return AnthropicModel(model, **options)
    base_url = check_base_url(
        options.pop("base_url", None)
        or os.environ.get(preset.base_url_variable or "")
        or preset.base_url
    )
    api_key = options.pop("api_key", None)
    if api_key is None:
        api_key = os.environ.get(preset.key_variable, "")
        if not api_key and preset.needs_key and not is_loopback(base_url):
            raise ValueError(
                f"no API key for {preset.label}: set {preset.key_variable} or pass api_key="
            )
    made = OpenAIChatModel(model, api_key=api_key, base_url=base_url, **options)
    made.provider = preset.label
    return made
