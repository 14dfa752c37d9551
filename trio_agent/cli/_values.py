"""The values the command line's options take, checked as it is read (argparse's
``type=``): a bad value is a usage error (exit 2) naming the option, before
anything runs."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable

from ..providers._base import check_base_url

__all__ = [
    "agent_ref",
    "base_url",
    "count",
    "env_name",
    "fraction",
    "json_object",
    "seconds",
    "seconds_or_never",
]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def base_url(text: str) -> str:
    """A base URL as the providers take one (``check_base_url``: the one rule),
    checked at parse time."""
    try:
        return check_base_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_AGENT_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def agent_ref(text: str) -> str:
    """``--agent``'s value, as argparse's ``type``: ``MODULE:NAME`` (each dotted
    names, as ``python -m`` and an import statement take them); a file path gets
    a hint."""
    module = text.partition(":")[0]
    if _AGENT_REF.fullmatch(text) and not module.endswith(".py"):
        return text
    if module.endswith(".py") or "/" in module or "\\" in module:
        hint = "the module's name, not its file: app:agent for app.py"
    else:
        hint = "as app:agent: a module importable from the current directory, and a name in it"
    raise argparse.ArgumentTypeError(f"{text!r} is not MODULE:NAME ({hint})")


def env_name(text: str) -> str:
    """The name of an environment variable (letters, digits, ``_``)."""
    if not _ENV_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an environment variable name")
    return text


def fraction(most: float) -> Callable[[str], float]:
    """A number in ``0..most``, as argparse's ``type``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0.0 <= value <= most:  # NaN fails too
            raise argparse.ArgumentTypeError(f"must be in 0..{most:g}, got {text}")
        return value

    return parse


def count(least: int, most: int | None = None) -> Callable[[str], int]:
    """An int in ``least..most``, as argparse's ``type``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least or (most is not None and value > most):
            bound = f"in {least}..{most}" if most is not None else f">= {least}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def json_object(text: str) -> dict[str, object]:
    """A JSON object, as argparse's ``type`` (``approve --arguments``)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # nested past the reader's bound
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is needed, got {text!r:.80}")
    return value


def seconds_or_never(text: str) -> float:
    """A number of seconds as ``seconds`` takes, or 0 (never), as argparse's ``type``."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    return seconds(text)


def lease_seconds(text: str) -> float:
    """``--lease-seconds``: a number of seconds as ``seconds`` takes, at least
    ``MIN_LEASE_SECONDS`` (a lease is renewed every third of it), as argparse's ``type``."""
    from ..stores.postgres._leases import MIN_LEASE_SECONDS  # no psycopg: the bound alone

    value = seconds(text)
    if value < MIN_LEASE_SECONDS:
        raise argparse.ArgumentTypeError(
            f"at least {MIN_LEASE_SECONDS:g} second is needed (a lease is renewed every "
            f"third of it, so a shorter one runs out between renewals), got {text!r}"
        )
    return value


def seconds(text: str) -> float:
    """A positive, finite number of seconds, as argparse's ``type``."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 < value < 86400):
        raise argparse.ArgumentTypeError(
            f"a number of seconds in (0, 86400) is needed, got {text!r}"
        )
    return value
