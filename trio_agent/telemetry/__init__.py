"""OpenTelemetry for trio-agent (the ``[otel]`` extra: ``opentelemetry-api``).

Nothing to turn on here: once the application has configured an
OpenTelemetry tracer provider (and, for metrics, a meter provider), each
turn is traced following the GenAI semantic conventions: an ``invoke_agent``
span per turn (or ``run_agent_loop`` run), a ``chat {model}`` span per model
attempt (retries are separate spans), an ``execute_tool {tool}`` span per
tool call, and the metrics ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.duration``. With no provider configured (or the
API not installed) it costs nothing but a check per turn.

A ``chat`` span of a provider adapter says what the provider said, in its
words: ``gen_ai.response.id`` (``chatcmpl-...``, ``resp_...``, ``msg_...``),
``gen_ai.response.finish_reasons`` (``tool_calls``, ``end_turn``,
``completed``: not the normalised stop reason) and ``gen_ai.response.model``;
and where the request went and how: ``server.address``, ``server.port`` (the
API's, not a proxy's) and ``gen_ai.request.max_tokens`` as sent (the setting,
or the adapter's own keyword such as ``AnthropicModel(max_tokens=)``, or
``extra_body``). A model of another kind gets its message id and stop reason.

Message content (the messages sent, the answers, tool arguments and
results) is never recorded unless asked: ``configure(capture_content=True)``,
or the conventional environment variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import lazy as _lazy

if TYPE_CHECKING:
    from ._content import CAPTURE_CONTENT_VARIABLE as CAPTURE_CONTENT_VARIABLE
    from ._content import configure as configure

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "configure",
]

# Loaded when first named: a program that traces nothing imports none of it.
__getattr__ = _lazy(globals(), {name: "._content" for name in __all__})
