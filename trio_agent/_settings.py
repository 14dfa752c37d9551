"""``ModelSettings``: how a model should answer (sampling, limits, tool choice,
reasoning), given to a run, an ``Agent`` or one turn and merged field by field;
each adapter maps the fields to its provider's names."""

from __future__ import annotations

import math
import re
from collections.abc import Container
from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta, Struct

__all__ = [
    "REASONING_EFFORTS",
    "ModelSettings",
    "check_settings",
    "check_headers",
    "check_run_settings",
    "merge_settings",
    "tool_choice_of",
]

REASONING_EFFORTS: Final = ("minimal", "low", "medium", "high")
_TOOL_CHOICES: Final = ("auto", "none", "required")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # RFC 9110 token
_MAX_STOPS: Final = 16


class ModelSettings(Struct, frozen=True, omit_defaults=True, kw_only=True):
    """How the model should answer; every field unset (None, or no stops) by
    default, so a provider's own default applies. Merged field by field: a
    later (more specific) setting wins where it is set."""

    max_tokens: Annotated[
        int | None, Meta(description="The most output tokens of one response.")
    ] = None
    temperature: Annotated[float | None, Meta(description="Sampling temperature, 0 to 2.")] = None
    top_p: Annotated[float | None, Meta(description="Nucleus sampling mass, 0 to 1.")] = None
    stop: Annotated[
        tuple[str, ...], Meta(description="Sequences that end the response where they appear.")
    ] = ()
    seed: Annotated[int | None, Meta(description="A seed for sampling, where supported.")] = None
    tool_choice: Annotated[
        str | None,
        Meta(description='"auto", "none", "required", or the name of a tool it must call.'),
    ] = None
    parallel_tool_calls: Annotated[
        bool | None, Meta(description="Whether one response may call several tools.")
    ] = None
    reasoning_effort: Annotated[
        str | None, Meta(description='"minimal", "low", "medium" or "high".')
    ] = None
    thinking_budget: Annotated[
        int | None,
        Meta(description="Tokens the model may think before answering (Anthropic's budget)."),
    ] = None
    extra_body: Annotated[
        dict[str, Any] | None,
        Meta(description="Fields added to the request body as they are (they win)."),
    ] = None
    extra_headers: Annotated[
        dict[str, str] | None, Meta(description="Headers added to the request.")
    ] = None

    def __repr__(self) -> str:
        """The fields set, ``extra_headers`` by name only (a value may be a key)."""
        shown = for_the_record(self)
        fields = ", ".join(
            f"{name}={getattr(shown, name)!r}"
            for name in self.__struct_fields__
            if getattr(shown, name) not in (None, ())
        )
        return f"ModelSettings({fields})"


_FIELDS: Final = ModelSettings.__struct_fields__


def merge_settings(
    earlier: ModelSettings | None, later: ModelSettings | None
) -> ModelSettings | None:
    """``later`` over ``earlier``, field by field: where ``later`` sets a field
    (not None, or stops given) it wins; ``extra_body`` and ``extra_headers``
    merge key by key, ``later``'s keys winning."""
    if earlier is None or later is None:
        return later if earlier is None else earlier
    fields: dict[str, Any] = {}
    for name in _FIELDS:
        mine, theirs = getattr(earlier, name), getattr(later, name)
        if name in ("extra_body", "extra_headers") and mine and theirs:
            fields[name] = {**mine, **theirs}
        else:
            fields[name] = theirs if theirs is not None and theirs != () else mine
    return ModelSettings(**fields)


def _number(value: object, name: str, low: float, high: float) -> None:
    if value is None:
        return
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise TypeError(f"settings.{name} must be a finite number or None, got {value!r:.80}")
    if not low <= value <= high:  # type: ignore[operator]
        raise ValueError(f"settings.{name} must be in [{low:g}, {high:g}], got {value!r}")


def _count(value: object, name: str, low: int) -> None:
    if value is None:
        return
    if type(value) is not int:
        raise TypeError(f"settings.{name} must be an int or None, got {value!r:.80}")
    if value < low:
        raise ValueError(f"settings.{name} must be >= {low}, got {value}")


_CLIENT_HEADERS: Final = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",  # proxy= carries a proxy's credentials
        "proxy-connection",
    }
)
"""Headers the HTTP client writes itself (framing, hop by hop): never the caller's."""


def check_headers(headers: object, name: str) -> dict[str, str]:
    """``headers`` as a new dict, names lowercased (an adapter's own are lowercase,
    so one given in any case replaces it), if every name is an HTTP token that the
    HTTP client does not write itself and every value a str without CR, LF or
    NUL; ``TypeError`` or ``ValueError`` naming the bad one otherwise. The
    values are never quoted (one may be a secret). The one rule for
    ``extra_headers`` and an adapter's ``default_headers``."""
    if headers is None:
        return {}
    if type(headers) is not dict:
        raise TypeError(f"{name} must be a dict of str to str or None, got {headers!r:.80}")
    out: dict[str, str] = {}
    for key, value in headers.items():
        if type(key) is not str or not _HEADER_NAME.match(key):
            raise ValueError(f"{name}: {key!r:.80} is not a header name")
        if key.lower() in _CLIENT_HEADERS:
            raise ValueError(f"{name}: {key!r:.80} is written by the HTTP client; it cannot be set")
        if type(value) is not str:
            raise TypeError(f"{name}[{key!r:.80}] must be a str, got {type(value).__name__}")
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"{name}[{key!r:.80}] must not hold CR, LF or NUL")
        out[key.lower()] = value
    return out


def check_settings(settings: object) -> ModelSettings | None:
    """``settings`` if it is None or a valid ``ModelSettings``; ``TypeError`` or
    ``ValueError`` naming the field otherwise (said when the run or the agent
    is made, never mid-run)."""
    if settings is None:
        return None
    if type(settings) is not ModelSettings:
        raise TypeError(f"settings must be a ModelSettings or None, got {settings!r:.80}")
    s = settings
    _count(s.max_tokens, "max_tokens", 1)
    _number(s.temperature, "temperature", 0.0, 2.0)
    _number(s.top_p, "top_p", 0.0, 1.0)
    _count(s.seed, "seed", -(2**63))
    _count(s.thinking_budget, "thinking_budget", 1)
    if type(s.stop) is not tuple or not all(type(x) is str and x for x in s.stop):
        raise TypeError(f"settings.stop must be a tuple of non-empty str, got {s.stop!r:.80}")
    if len(s.stop) > _MAX_STOPS:
        raise ValueError(f"settings.stop holds {len(s.stop)} sequences, more than {_MAX_STOPS}")
    choice = s.tool_choice
    if choice is not None and (type(choice) is not str or not _TOOL_NAME.match(choice)):
        raise ValueError(
            f'settings.tool_choice must be "auto", "none", "required" or a tool\'s name, '
            f"got {choice!r:.80}"
        )
    if s.parallel_tool_calls is not None and type(s.parallel_tool_calls) is not bool:
        raise TypeError("settings.parallel_tool_calls must be a bool or None")
    if s.reasoning_effort is not None and s.reasoning_effort not in REASONING_EFFORTS:
        raise ValueError(
            f"settings.reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, "
            f"got {s.reasoning_effort!r:.80}"
        )
    if s.extra_body is not None:
        if type(s.extra_body) is not dict or not all(type(k) is str for k in s.extra_body):
            raise TypeError("settings.extra_body must be a dict with str keys, or None")
        try:
            msgspec.json.encode(s.extra_body)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise TypeError(f"settings.extra_body cannot be encoded as JSON: {exc}") from None
    check_headers(s.extra_headers, "settings.extra_headers")
    # a private, frozen copy: what the caller does to its dicts later changes nothing
    return msgspec.convert(msgspec.to_builtins(s), ModelSettings)


def tool_choice_of(settings: ModelSettings | None) -> str | None:
    """The tool a setting makes the model call, if it names one (not a mode)."""
    if settings is None or settings.tool_choice in (None, *_TOOL_CHOICES):
        return None
    return settings.tool_choice


def check_run_settings(settings: object, tools: Container[str]) -> ModelSettings | None:
    """``check_settings``, and a ``tool_choice`` that names a tool names one of
    ``tools`` (``ValueError`` before anything runs, not a provider's 400 later)."""
    checked = check_settings(settings)
    name = tool_choice_of(checked)
    if name is not None and name not in tools:
        raise ValueError(f"settings.tool_choice names {name!r}, which is not one of the tools")
    return checked


def for_the_record(settings: ModelSettings | None) -> ModelSettings | None:
    """``settings`` as a ledger records them: ``extra_headers`` by name, their
    values replaced by ``[redacted]`` (one may be a key: Azure's ``api-key``,
    a gateway's bearer token)."""
    if settings is None or not settings.extra_headers:
        return settings
    hidden = dict.fromkeys(settings.extra_headers, "[redacted]")
    return msgspec.structs.replace(settings, extra_headers=hidden)
