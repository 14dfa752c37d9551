"""What an HTTP failure, an in-stream error or a broken event stands for, as our
error classes (pure: no I/O)."""

from __future__ import annotations

import email.utils
import math
import re
import ssl
import time
from collections.abc import Mapping
from typing import Any

import msgspec
import trio

from ...model import (
    ContextOverflowError,
    ModelAuthenticationError,
    ModelError,
    ModelRequestError,
    ModelResponseError,
    TransientModelError,
)
from ._redirect import not_followed

_TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The ``retry-after`` hint in seconds (a number or an HTTP date), if any."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def error_for_status(
    provider: str, status: int, body: bytes, headers: Mapping[str, str]
) -> ModelError:
    """The error a failed HTTP response stands for (it quotes the body raw: see
    ``scrub_error``)."""
    text = body.decode("utf-8", "replace")
    message = f"{provider} answered HTTP {status}{not_followed(status, headers)}: {text}"
    lowered = text.lower()
    if status in _TRANSIENT_STATUS:
        return TransientModelError(message, retry_after=retry_after(headers))
    if status in (401, 403):
        return ModelAuthenticationError(message)
    if status == 413 or any(
        marker in lowered
        for marker in (
            "context_length_exceeded",
            "prompt is too long",
            "maximum context length",
            "too many tokens",
        )
    ):
        return ContextOverflowError(message)
    if status >= 500:
        return TransientModelError(message, retry_after=retry_after(headers))
    return ModelRequestError(message)


def stream_error(provider: str, kind: str, message: str) -> ModelError:
    """An error the provider reported inside the stream, typed by its kind (it
    quotes the provider raw: see ``scrub_error``)."""
    text = f"{provider} stream error{f' {kind}' if kind else ''}: {message}"
    lowered = f"{kind} {message}".lower()
    if any(
        k in lowered
        for k in (
            "overloaded",
            "rate_limit",
            "server_error",
            "api_error",
            "timeout",
            "unavailable",
            "upstream connect",  # Envoy's 503: "upstream connect error or disconnect/reset"
        )
    ):
        return TransientModelError(text)
    if any(k in lowered for k in ("authentication", "permission", "invalid_api_key")):
        return ModelAuthenticationError(text)
    if any(k in lowered for k in ("context_length", "prompt is too long", "too many tokens")):
        return ContextOverflowError(text)
    return ModelError(text)


def transport_error(provider: str, exc: Exception, where: str = "") -> ModelError:
    """Timeouts and dropped connections are worth another attempt; a certificate
    that does not verify is not. trio's TLS stream reports its cause underneath.
    ``where`` adds how the connection went (through which proxy)."""
    if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__  # type: ignore[assignment]
    text = f"{provider}: {type(exc).__name__}: {exc}{where}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ModelError(text)
    return TransientModelError(text)


def decode_all(
    decoder: msgspec.json.Decoder[Any],
    datas: list[bytes],
    provider: str,
    fallback: msgspec.json.Decoder[Any] | None = None,
) -> Any:
    """The events' data, each decoded by msgspec into the provider's wire struct.
    With a ``fallback``, ``decoder`` is a narrower shortcut: an event it does not
    accept is decoded by ``fallback``, whose verdict stands. An escaped lone
    surrogate (``"\\ud800"``), which msgspec refuses and some servers send, is
    read as U+FFFD (``without_lone_escapes``), only once msgspec has refused the
    events: the common path pays nothing."""
    try:
        return _decode_each(decoder, datas, fallback)
    except (msgspec.DecodeError, RecursionError) as exc:
        repaired = [without_lone_escapes(data) for data in datas]
        if repaired != datas:  # msgspec refuses lone surrogates: replaced, as elsewhere
            try:
                return _decode_each(decoder, repaired, fallback)
            except (msgspec.DecodeError, RecursionError):
                pass  # broken in another way too: reported as it came
        for data in datas:  # an error event in a shape the wire struct does not take?
            found = error_text(lenient(data))
            if found is not None:
                raise stream_error(provider, *found) from None
        raise ModelResponseError(f"{provider} sent an event that does not decode: {exc}") from None


def lenient(data: bytes) -> Any:
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


def error_text(document: Any) -> tuple[str, str] | None:
    """The kind and message of an error object, ``{"error": ...}``, if ``document``
    is one: the error a string (``{"error": "upstream connect error"}``), or an
    object with a ``message`` and maybe a ``type`` and ``code``, or else quoted as
    JSON."""
    if type(document) is not dict or not document.get("error"):
        return None
    error = document["error"]
    if type(error) is str:
        return "", error
    if type(error) is not dict:
        return "", msgspec.json.encode(error).decode()
    kind = " ".join(str(error[k]) for k in ("type", "code") if error.get(k) not in (None, ""))
    message = error.get("message")
    if type(message) is not str or not message:
        message = msgspec.json.encode(error).decode()
    return kind, message


def _decode_each(
    decoder: msgspec.json.Decoder[Any],
    datas: list[bytes],
    fallback: msgspec.json.Decoder[Any] | None,
) -> list[Any]:
    try:
        return [decoder.decode(data) for data in datas]
    except msgspec.ValidationError:
        if fallback is None:
            raise
    return [_decode_either(decoder, fallback, data) for data in datas]


# An escaped high surrogate with no low half after it, and a low half with no high
# half before it (its lookbehind after its ``\u``: the scan keeps a literal prefix).
# Only right when every backslash left starts an escape: see without_lone_escapes.
_LONE_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")
_LONE_LOW = re.compile(rb"\\u(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\u)[dD][c-fC-F][0-9a-fA-F]{2}")
_FFFD = rb"\\ufffd"  # a template: the escape \ufffd
_PAIR = b"\\\\"  # an escaped backslash
_HIDDEN = b"\xff\xff"  # never in UTF-8: it stands for one while the surrogates are found


def without_lone_escapes(data: bytes) -> bytes:
    """JSON ``data`` with each escaped lone surrogate (``\\ud800`` with no low
    half after it, a low half alone) replaced by ``\\ufffd``, U+FFFD, as the
    library replaces lone surrogates elsewhere (``without_lone_surrogates``): the
    text stays readable, and encodes as UTF-8. A pair stays whole, and so does
    an escaped backslash before ``u`` (``\\\\ud800`` is that text).

    All in C, whatever the escapes: each escaped backslash (paired left to
    right, as JSON reads them) is hidden as two 0xFF bytes, which UTF-8 never
    has (``data`` with one is left as it is: it does not decode anyway), so
    every backslash left starts an escape; the lone halves are then replaced by
    two regex passes, and the backslashes put back. A Python call per escape
    cost seconds for a 16 MiB answer of escapes, on the trio thread."""
    if b"\\u" not in data or b"\xff" in data:
        return data
    hidden = data.replace(_PAIR, _HIDDEN)
    repaired = _LONE_LOW.sub(_FFFD, _LONE_HIGH.sub(_FFFD, hidden))
    return data if repaired == hidden else repaired.replace(_HIDDEN, _PAIR)


def _decode_either(
    decoder: msgspec.json.Decoder[Any], fallback: msgspec.json.Decoder[Any], data: bytes
) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError:
        return fallback.decode(data)
