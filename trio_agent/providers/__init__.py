"""Model adapters for real providers, on trio's own streams (no HTTP library).

``OpenAIChatModel`` speaks OpenAI-compatible Chat Completions streaming;
``AnthropicModel`` speaks Anthropic Messages streaming.
"""

from .anthropic import AnthropicModel as AnthropicModel
from .openai import OpenAIChatModel as OpenAIChatModel

__all__ = ["AnthropicModel", "OpenAIChatModel"]
