"""An API key in every form a server may echo it in (raw, JSON-escaped, ``\\u``
escapes, percent-encoded, mixed), and ``assert_scrubbed``: no form of it, nor of
either half, anywhere in an error or what it chains to."""

from __future__ import annotations

import json
import traceback
import urllib.parse

from trio_agent.providers.http._secrets import MAX_ERROR_TEXT


def unicode_escaped(text: str, upper: bool = False) -> str:
    """Every character as a JSON ``\\u00XX`` escape."""
    return "".join(("\\u%04X" if upper else "\\u%04x") % ord(c) for c in text)


def percent_encoded(text: str) -> str:
    """Every character as ``%XX``."""
    return "".join(f"%{ord(c):02X}" for c in text)


FORMS = {
    "raw": lambda key: key,
    "json": lambda key: json.dumps(key)[1:-1].replace("/", "\\/"),
    "unicode": unicode_escaped,
    "UNICODE": lambda key: unicode_escaped(key, upper=True),
    "percent": percent_encoded,
    "quoted": lambda key: urllib.parse.quote(key, safe=""),
    "mixed": lambda key: (
        key[:3]
        + unicode_escaped(key[3:7])
        + percent_encoded(key[7:11])
        + key[11:].replace("/", "\\/")
    ),
}


def every_form(key: str) -> str:
    """The key in all its forms, space-separated: what the tests plant."""
    return " ".join(form(key) for form in FORMS.values())


def find_key(text: str, key: str) -> list[str]:
    """The forms of the key, or of either half of it, that ``text`` holds."""
    half = len(key) // 2
    return [
        f"{name}({part})"
        for name, form in FORMS.items()
        for part in (key[:half], key[half:])
        if form(part) in text
    ]


def chain(exc: BaseException) -> list[BaseException]:
    """The error and every error reachable from it (cause, context, hidden or not)."""
    out: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        error = todo.pop()
        if error is not None and all(error is not seen for seen in out):
            out.append(error)
            todo += [error.__cause__, error.__context__]
    return out


def assert_scrubbed(exc: BaseException, key: str) -> None:
    """No form of the key (nor half of it) in the error's text, repr, formatted
    traceback, or anything chained to it; the message within the cap."""
    texts = ["".join(traceback.format_exception(exc))]
    for error in chain(exc):
        texts += [str(error), repr(error)]
        assert len(str(error)) <= MAX_ERROR_TEXT, len(str(error))
    for text in texts:
        assert not find_key(text, key), (find_key(text, key), text[:3000])
