"""Keeping the API key out of every error message, and server text capped."""

from __future__ import annotations

import re
from typing import final

from ...model import ModelError

MAX_ERROR_TEXT = 2000
"""Characters an error message carries at most: server text beyond it is cut."""
CUT = " [cut]"
"""What ends a text that was cut."""

# ------------------------------------------------------------------ secrets
#
# Any text a server sends may quote the API key: an echo of it in an error body
# or an in-stream error, or a header or chunk-size line made of it that we quote
# as malformed. Every error an adapter raises is scrubbed once, where it leaves
# the adapter (``SSEModelStream``, in _base.py): every form of the key is
# redacted, then the message is cut to ``MAX_ERROR_TEXT``.

_REDACTED = "[redacted]"
_LONGEST_FORM = 32
"""Characters one character of a key takes at most in a form ``_char_forms``
matches (a 4-byte UTF-8 character as four ``%2525XX``: 28)."""


def _char_forms(char: str) -> str:
    """A regex for one character of a key in every form a server or our own
    quoting may give it: raw or backslash-escaped (``\\/``), as a ``\\uXXXX``
    (``\\UXXXXXXXX``, a surrogate pair) or ``\\xXX`` escape, percent-encoded
    (``%XX`` per UTF-8 byte, double-encoded ``%25XX`` too) or as an HTML character
    reference; up to 4 backslashes before an escape (a repr of an escape doubles
    them). Longest forms first: the group is atomic."""
    code = ord(char)
    utf8 = char.encode()
    escape = r"\\{1,4}"
    forms = [f"{escape}U{code:08x}"]  # case-insensitive: \U0000002f, \u0000002F
    if code > 0xFFFF:  # JSON escapes an astral character as a surrogate pair
        high, low = divmod(code - 0x10000, 0x400)
        forms.append(f"{escape}u{0xD800 + high:04x}{escape}u{0xDC00 + low:04x}")
    else:
        forms.append(f"{escape}u{code:04x}")  # \u002f, \\u002F
    forms.append("".join(f"{escape}x{byte:02x}" for byte in utf8))  # repr of bytes
    if 0x7F < code < 0x100:
        forms.append(f"{escape}x{code:02x}")  # repr of a non-printable str character
    forms.append("".join(f"%(?:25){{0,2}}{byte:02x}" for byte in utf8))
    forms.append(f"&#(?:0{{0,4}}{code}|x0{{0,4}}{code:x});")
    forms.append(r"\\{0,4}" + re.escape(char))
    if code > 0x7F:  # its UTF-8 bytes read as latin-1 (a header we decoded so)
        forms.append(re.escape(utf8.decode("latin-1")))
    return f"(?>{'|'.join(forms)})"


def secret_pattern(secret: str) -> re.Pattern[str]:
    """The one definition of what ``secret`` looks like in a text: any mixture,
    character by character, of the forms of ``_char_forms`` (case-insensitive:
    redacting a little too much is harmless)."""
    return re.compile("".join(map(_char_forms, secret)), re.IGNORECASE)


@final
class Redactor:
    """Finds secrets in error texts, in any of their forms: the API key, and those
    of a proxy (its password, its Basic token: ``Proxy.secrets``). Built once per
    model (by the adapter), shared by all its streams. Its repr shows nothing of
    them."""

    __slots__ = ("_patterns", "reach")

    def __init__(self, secret: str, *more: str) -> None:
        secrets = sorted(dict.fromkeys((secret, *more)), key=len, reverse=True)
        if not all(secrets):
            raise ValueError("a Redactor needs a non-empty secret")
        self._patterns = tuple(map(secret_pattern, secrets))
        self.reach = len(secrets[0]) * _LONGEST_FORM  # characters the longest form can take

    def __repr__(self) -> str:
        return "Redactor()"

    def redact(self, text: str) -> str:
        """``text`` with every form of every secret replaced. Where two secrets'
        forms overlap (one ends where the other starts) the whole stretch is
        replaced once, so that no part of either survives."""
        if len(self._patterns) == 1:
            return self._patterns[0].sub(_REDACTED, text)
        spans = sorted(m.span() for p in self._patterns for m in p.finditer(text) if m.end())
        pieces: list[str] = []
        done = 0  # characters of text already kept or replaced
        for start, end in spans:
            if start < done:  # overlaps the last replaced stretch: widen it
                done = max(done, end)
                continue
            pieces += (text[done:start], _REDACTED)
            done = end
        pieces.append(text[done:])
        return "".join(pieces)


def scrub_text(text: str, redactor: Redactor | None) -> str:
    """``text`` with the key redacted, then cut to ``MAX_ERROR_TEXT`` characters.

    Only the text the cut can keep is searched: the first ``MAX_ERROR_TEXT`` plus
    the reach of one key, so that a key starting before the cap is seen whole.
    The last ``reach`` characters of that are dropped after redacting (a key cut
    in two by the first cut may stand there, and redacting shortens what comes
    before, so they could move under the cap): no part of a key survives a cut.
    """
    reach = redactor.reach if redactor is not None else 0
    searched = MAX_ERROR_TEXT + reach
    if len(text) > searched:
        text = text[:searched]
        if redactor is not None:
            text = redactor.redact(text)[:-reach]
        return text[: MAX_ERROR_TEXT - len(CUT)] + CUT
    if redactor is not None:
        text = redactor.redact(text)
    if len(text) > MAX_ERROR_TEXT:  # redacting a short key can lengthen the text
        text = text[: MAX_ERROR_TEXT - len(CUT)] + CUT
    return text


def scrub_error(exc: ModelError, redactor: Redactor | None) -> None:
    """Scrub an error (and the errors chained to it) in place, keeping its type and
    attributes: every text argument and note goes through ``scrub_text``, and a
    hidden ``__context__`` (suppressed by ``raise ... from None``: the parse error it
    replaced, which may quote the raw text) is dropped."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ModelError):
            error.args = tuple(
                scrub_text(arg, redactor) if type(arg) is str else arg for arg in error.args
            )
            notes = getattr(error, "__notes__", None)
            if type(notes) is list:
                notes[:] = [scrub_text(n, redactor) if type(n) is str else n for n in notes]
        if error.__suppress_context__:
            error.__context__ = None
        error = error.__cause__ if error.__cause__ is not None else error.__context__


def error_read_limit(redactor: Redactor | None) -> int:
    """Bytes of an error response to read: enough for all the text ``scrub_text``
    searches (a character takes up to 4 bytes of UTF-8)."""
    return 4 * (MAX_ERROR_TEXT + (redactor.reach if redactor is not None else 0))
