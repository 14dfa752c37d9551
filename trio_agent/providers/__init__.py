"""Model adapters for real providers, on trio's own streams (no HTTP library).

``OpenAIChatModel`` speaks OpenAI-compatible Chat Completions streaming;
``OpenAIResponsesModel`` speaks OpenAI's Responses streaming (statelessly,
reasoning kept encrypted); ``AnthropicModel`` speaks Anthropic Messages streaming.
Each keeps its connections alive in a ``ConnectionPool`` (its own, or one shared
with ``pool=``): close it with ``await model.aclose()`` or ``async with model:``.
"""

from .._public import publish as _publish
from .anthropic import AnthropicModel as AnthropicModel
from .http._pool import ConnectionPool as ConnectionPool
from .openai import OpenAIChatModel as OpenAIChatModel
from .responses import OpenAIResponsesModel as OpenAIResponsesModel

__all__ = ["AnthropicModel", "ConnectionPool", "OpenAIChatModel", "OpenAIResponsesModel"]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
