"""Model adapters for real providers, on trio's own streams (no HTTP library).

``OpenAIChatModel`` speaks OpenAI-compatible Chat Completions streaming;
``OpenAIResponsesModel`` speaks OpenAI's Responses streaming (statelessly,
reasoning kept encrypted); ``AnthropicModel`` speaks Anthropic Messages streaming.
Each keeps its connections alive in a ``ConnectionPool`` (its own, or one shared
with ``pool=``): close it with ``await model.aclose()`` or ``async with model:``.

``infer_model("openai:gpt-4o")`` makes a model from its name, for OpenAI's and
Anthropic's APIs and the OpenAI-compatible services of ``PRESETS`` (Ollama,
OpenRouter, DeepSeek, Gemini, Groq, Mistral, vLLM, LiteLLM); ``Agent`` and
``run_agent_loop`` take such a name as ``model=`` too. ``FallbackModel(first,
*rest)`` moves to the next model when an attempt fails with a provider's error.
"""

from .._public import publish as _publish
from ..engine._fallback import FallbackModel as FallbackModel
from ._names import PRESETS as PRESETS
from ._names import Preset as Preset
from ._names import infer_model as infer_model
from .anthropic import AnthropicModel as AnthropicModel
from .http._pool import ConnectionPool as ConnectionPool
from .openai import OpenAIChatModel as OpenAIChatModel
from .responses import OpenAIResponsesModel as OpenAIResponsesModel

__all__ = [
    "PRESETS",
    "AnthropicModel",
    "ConnectionPool",
    "FallbackModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "Preset",
    "infer_model",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
