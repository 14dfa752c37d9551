"""The regular expressions of an MCP tool's ``inputSchema``, matched where a
pattern that backtracks cannot hold the event loop.

A server's schema is hostile: Python's ``re`` (what ``jsonschema`` uses)
backtracks, and a pattern such as ``^(a+)+$`` takes seconds, doubling per
character, all of them holding the GIL. So the patterns are never matched in
this process: ``patterns_in`` finds every pattern a schema holds (``pattern``,
the keys of ``patternProperties``, wherever they are), ``texts_in`` every
string an argument holds (keys too: ``propertyNames`` and ``patternProperties``
match them), and ``match_patterns`` matches each pattern against each text in a
child Python (``re``, the same semantics as ``jsonschema``'s own), bounded by
``PATTERN_SECONDS`` and 1 GiB of memory; the child is killed at the bound. What
it found is an ``Answers``, which the keywords of ``checking_class`` consult
as ``errors_of`` runs ``jsonschema``; a match the child did not decide is
``Undecided``, raised through every keyword (a ``not`` or ``anyOf`` cannot turn
it into a pass): the call is refused (fail closed).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Final, NamedTuple, final

import jsonschema  # type: ignore[import-untyped]  # no stubs; a dependency of mcp
import msgspec
import trio
from jsonschema import ValidationError

__all__ = [
    "PATTERN_SECONDS",
    "Answers",
    "CHECK_STEPS",
    "PatternError",
    "Scan",
    "TooCostly",
    "Undecided",
    "checking_class",
    "errors_of",
    "json_path",
    "match_patterns",
    "patterns_in",
    "texts_in",
]

PATTERN_SECONDS: Final = 5.0
"""Bound on matching one call's arguments against its schema's patterns: the
child's whole life (start included). Generous, so that a loaded machine never
refuses a call whose patterns are sane; a pattern that backtracks is refused."""
_CHILDREN: Final = 4
"""Matcher children at once (per ``trio.run``); more calls with patterns wait."""
_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("mcp_patterns")
_SHOWN: Final = 120
_NAME: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9_]*\Z")  # a path step jsonschema writes as .name

# The child: a JSON request on stdin ({"patterns": [...], "texts": [...]}); one
# line per pattern on stdout, in order, as soon as it is matched: a string of
# "1"/"0" per text (re.search found it or not), or {"error": why} when the
# pattern does not compile. It never opens anything.
_CHILD = """
import json, re, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
request = json.load(sys.stdin)
texts = request["texts"]
for pattern in request["patterns"]:
    try:
        search = re.compile(pattern).search
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__ + ": " + str(exc)[:200]}), flush=True)
        continue
    print(json.dumps("".join("1" if search(text) else "0" for text in texts)), flush=True)
"""


class Undecided(Exception):
    """A pattern's match that was not decided within the bound."""

    def __init__(self, pattern: str, text: str) -> None:
        super().__init__(pattern, text)
        self.pattern = pattern
        self.text = text

    def describe(self, arguments: Mapping[str, Any]) -> str:
        """The refusal the model sees: which pattern, where in the arguments."""
        pattern = self.pattern if len(self.pattern) <= _SHOWN else self.pattern[:_SHOWN] + "..."
        return (
            f"this argument could not be checked against the schema's pattern {pattern!r} "
            f"within {PATTERN_SECONDS:g} s (the pattern may backtrack too much); the call "
            f"was refused - at `{json_path(arguments, self.text)}`"
        )


CHECK_STEPS: Final = 20_000
"""Keywords one call's arguments may be checked against, all applications
together: some 0.1 s of ``jsonschema`` on the event loop. Sane schemas need far
fewer (the arguments hold at most 257 values); a ``$ref`` can make a schema
apply itself twice at each of 30 levels, 2**30 checks, which is refused."""


class TooCostly(Exception):
    """A check that would apply more than ``CHECK_STEPS`` keywords."""

    def describe(self) -> str:
        """The refusal the model sees."""
        return (
            f"these arguments could not be checked against the tool's schema: it takes more "
            f"than {CHECK_STEPS} steps (the schema may refer to itself many times over); "
            "the call was refused"
        )


class PatternError(Exception):
    """A pattern that does not compile: the schema cannot be used to check."""


@final
class Answers:
    """Which of the arguments' texts each of the schema's patterns matches."""

    __slots__ = ("_failed", "_found", "pattern_properties")

    def __init__(
        self,
        found: Mapping[str, frozenset[str]],
        failed: Mapping[str, str],
        pattern_properties: bool,
    ) -> None:
        self._found = found
        self._failed = failed
        self.pattern_properties = pattern_properties
        """Whether the schema holds a ``patternProperties`` (anywhere)."""

    def search(self, pattern: object, text: str) -> bool:
        """Whether ``re.search(pattern, text)`` finds a match; ``Undecided`` when
        that is not known, ``PatternError`` for a pattern that does not compile."""
        if not isinstance(pattern, str):
            raise PatternError(f"a pattern that is not a string: {type(pattern).__name__}")
        found = self._found.get(pattern)
        if found is None:
            why = self._failed.get(pattern)
            if why is not None:
                raise PatternError(why)
            raise Undecided(pattern, text)
        return text in found


class Scan(NamedTuple):
    """What a schema holds that matches regexes."""

    patterns: frozenset[str]
    """The string values of ``pattern``, the keys of ``patternProperties``."""
    pattern_properties: bool
    """Whether it holds a ``patternProperties``."""
    unevaluated: bool
    """Whether it holds an ``unevaluatedProperties``."""


def patterns_in(schema: object) -> Scan:
    """The patterns of ``schema``, wherever they are (a ``$ref`` may point
    anywhere, so keys that only look like keywords count too). Not recursive:
    any depth."""
    found: set[str] = set()
    pattern_properties = unevaluated = False
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            pattern = node.get("pattern")
            if isinstance(pattern, str):
                found.add(pattern)
            properties = node.get("patternProperties")
            if isinstance(properties, dict):
                pattern_properties = True
                found.update(properties)
            unevaluated = unevaluated or "unevaluatedProperties" in node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return Scan(frozenset(found), pattern_properties, unevaluated)


def texts_in(arguments: Mapping[str, Any]) -> list[str]:
    """Every string of ``arguments``, keys and values, once each."""
    texts: dict[str, None] = {}
    stack: list[Any] = [arguments]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            texts.update(dict.fromkeys(node))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            texts[node] = None
    return list(texts)


def json_path(arguments: Mapping[str, Any], text: str) -> str:
    """The JSON path of the first key or string value of ``arguments`` equal to
    ``text`` (``$`` if none is), written as ``jsonschema`` writes its paths."""
    queue: collections.deque[tuple[Any, str]] = collections.deque([(arguments, "$")])
    while queue:
        node, path = queue.popleft()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == text or value == text:
                    return path + _step(key)
                queue.append((value, path + _step(key)))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if value == text:
                    return f"{path}[{index}]"
                queue.append((value, f"{path}[{index}]"))
    return "$"


def _step(key: str) -> str:
    if _NAME.match(key):
        return "." + key
    return "['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']"


async def match_patterns(
    patterns: Iterable[str], texts: list[str], pattern_properties: bool
) -> Answers:
    """Match each pattern against each text in a child process, within
    ``PATTERN_SECONDS``; the patterns not matched by then are left out of the
    ``Answers`` (their matches are ``Undecided``), as are all of them when the
    child cannot run. Cancellation: the child is killed and reaped, then
    ``Cancelled`` propagates."""
    ordered = sorted(patterns)
    found: dict[str, frozenset[str]] = {}
    failed: dict[str, str] = {}
    taken = 0

    def take(line: bytes) -> None:
        nonlocal taken
        if taken >= len(ordered):
            return
        pattern = ordered[taken]
        taken += 1
        try:
            answer = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return  # not the child's answer: that pattern stays undecided
        if isinstance(answer, str) and len(answer) == len(texts):
            found[pattern] = frozenset(
                t for t, bit in zip(texts, answer, strict=True) if bit == "1"
            )
        elif isinstance(answer, dict):
            failed[pattern] = str(answer.get("error"))

    request = msgspec.json.encode({"patterns": ordered, "texts": texts})
    async with _limiter():
        with trio.move_on_after(PATTERN_SECONDS):
            await _run_child(request, take)
    return Answers(found, failed, pattern_properties)


def _limiter() -> trio.CapacityLimiter:
    try:
        return _LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(_CHILDREN)
        _LIMITER.set(limiter)
        return limiter


async def _run_child(request: bytes, take: Callable[[bytes], None]) -> None:
    """Run the matcher child on ``request``, each line of its stdout to ``take``
    as it comes; nothing if it cannot start. The child is killed and reaped
    however this ends (cancelled included)."""
    try:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-I", "-S", "-c", _CHILD],  # -I -S: no path, no site
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={},
        )
    except OSError:
        return
    assert process.stdin is not None and process.stdout is not None
    try:
        try:
            await process.stdin.send_all(request)
            await process.stdin.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # it died before reading all of it: nothing is decided
        buffer = bytearray()
        async for chunk in process.stdout:
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                take(bytes(buffer[:end]))
                del buffer[: end + 1]
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.stdin.aclose()
            await process.stdout.aclose()


# ---------------------------------------------------------------- the keywords

_ANSWERS: ContextVar[Answers | None] = ContextVar("trio_agent_mcp_answers", default=None)
_STEPS: ContextVar[list[int] | None] = ContextVar("trio_agent_mcp_steps", default=None)
"""The keyword applications left to the check under way (one cell)."""
_CLASSES: dict[Any, Any] = {}


def checking_class(cls: Any) -> Any:
    """``cls`` (a ``jsonschema`` validator class) with every keyword that matches a
    regex (``pattern``, ``patternProperties``, ``additionalProperties``; a
    ``propertyNames`` schema's ``pattern`` is the first) consulting the
    ``Answers`` of ``errors_of`` instead of running ``re``. Its
    ``unevaluatedProperties``, which runs ``re`` on the ``patternProperties`` it
    finds, makes a schema that holds one unusable (``PatternError``). No format
    checker is on: ``format: regex`` compiles nothing. Every keyword counts
    against ``CHECK_STEPS`` (``TooCostly`` past it)."""
    extended = _CLASSES.get(cls)
    if extended is None:
        keywords = dict(cls.VALIDATORS)
        keywords.update((k, v) for k, v in _KEYWORDS.items() if k in cls.VALIDATORS)
        if "unevaluatedProperties" in cls.VALIDATORS:
            keywords["unevaluatedProperties"] = _unevaluated(
                cls.VALIDATORS["unevaluatedProperties"]
            )
        counted = {k: _counted(v) for k, v in keywords.items()}
        extended = _CLASSES[cls] = jsonschema.validators.extend(cls, counted)
    return extended


def errors_of(checker: Any, arguments: dict[str, Any], answers: Answers) -> list[Any]:
    """The ``ValidationError``s of ``arguments`` (sorted by path), the patterns'
    matches taken from ``answers``; ``Undecided`` for one they lack, ``TooCostly``
    past ``CHECK_STEPS``."""
    token = _ANSWERS.set(answers)
    steps = _STEPS.set([CHECK_STEPS])
    try:
        return sorted(checker.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    finally:
        _STEPS.reset(steps)
        _ANSWERS.reset(token)


def _counted(keyword: Any) -> Any:
    """``keyword`` counting each application against the check's steps."""

    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        left = _STEPS.get()
        if left is not None:
            left[0] -= 1
            if left[0] < 0:
                raise TooCostly
        return keyword(validator, value, instance, schema)

    return counted


def _search(pattern: object, text: str) -> bool:
    answers = _ANSWERS.get()
    if answers is None:
        raise Undecided(str(pattern), text)
    return answers.search(pattern, text)


def _pattern(validator: Any, pattern: object, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    """``jsonschema``'s own, its one regex (the ``patternProperties`` joined) split."""
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = {
        key
        for key in instance
        if key not in properties and not any(_search(pattern, key) for pattern in patterns)
    }
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            regexes = ", ".join(repr(each) for each in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            joined = ", ".join(repr(each) for each in sorted(extras, key=str))
            yield ValidationError(
                f"Additional properties are not allowed ({joined} {verb} unexpected)"
            )


def _unevaluated(original: Any) -> Any:
    def unevaluated(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        answers = _ANSWERS.get()
        if validator.is_type(instance, "object") and (
            answers is None or answers.pattern_properties
        ):
            raise PatternError("unevaluatedProperties beside patternProperties")
        yield from original(validator, value, instance, schema)

    return unevaluated


_KEYWORDS: Final = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}
