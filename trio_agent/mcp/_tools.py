"""MCP tool listings and results in our terms: names, specs, filters, content.

Pure functions, no I/O but one: ``tool_names`` picks and names the tools of
a listing, ``check_call`` checks a call's arguments before they are sent
(the schema's patterns, if it has any, matched in a child process:
``_mcp_patterns``), ``result_value`` maps a ``CallToolResult`` to what a
``Tool`` returns.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, Final

import jsonschema  # type: ignore[import-untyped]  # no stubs; a dependency of mcp
import mcp.types as mcp_types
import msgspec
import pydantic
import referencing

from .._log import MCP as logger
from ..limits import IMAGE_MEDIA_TYPES, MAX_CONTENT_BLOCKS, ArgumentsError, check_arguments
from ..messages import ImageBlock, InputBlock, TextBlock
from ..tools import ToolArgumentsError, ToolEffect, ToolError, ToolResult
from ._patterns import (
    Answers,
    TooCostly,
    Undecided,
    checking_class,
    errors_of,
    match_patterns,
    patterns_in,
    texts_in,
)

__all__ = [
    "MAX_LISTING_BYTES",
    "MAX_TOOLS",
    "NESTED_TOO_DEEPLY",
    "Validator",
    "check_call",
    "effect_of",
    "describe_error",
    "listed_bytes",
    "parameters_of",
    "result_value",
    "taken_in",
    "too_deep",
    "tool_names",
    "validator",
]

MAX_TOOLS: Final = 1024
"""Tools one listing may hold (every page together); a longer one is refused."""
MAX_LISTING_BYTES: Final = 16 * 2**20
"""Bytes of one listing's tools (every page together, as JSON); past it, refused."""
_MAX_SCHEMA_BYTES: Final = 256 * 1024
"""Bytes of one tool's ``inputSchema`` as JSON; a bigger one leaves its tool out."""
_NOT_NAME: Final = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME: Final = 64
_MAX_ERRORS_SHOWN: Final = 3
_MAX_SCHEMA_DEPTH: Final = 256
"""Containers an ``inputSchema`` may nest (the SDK reads less: JSON 200 deep);
a deeper one would reach Python's recursion limit in the copies made of it."""
_MAX_ERROR_CHARS: Final = 2000
"""Characters of a failed request's description (``describe_error``): the server's
words (its error's message, what its answer got wrong) may run to megabytes."""
_ERRORS_READ: Final = 64
"""Validation errors of a server's answer read for its description; past these
they are only counted (pydantic formats 260,000 of them in seconds: 56 MB)."""
NESTED_TOO_DEEPLY: Final = "is nested too deeply to read"
"""How an answer the SDK's JSON parser refused as too deep is described."""
_NO_RETRIEVAL: Final = referencing.Registry()
"""What a ``$ref`` may resolve to beyond the schema itself: nothing."""

Validator = Callable[[dict[str, Any]], Awaitable[None] | None]
"""A check of a call's arguments: None when they passed at once, else the rest
of the check to await (``ToolArgumentsError`` if they do not fit)."""


def tool_names(
    listed: Iterable[mcp_types.Tool],
    prefix: str | None,
    allow: Collection[str] | None,
    deny: Collection[str],
    label: str,
) -> list[tuple[str, mcp_types.Tool]]:
    """The tools of a listing we offer, each with its name for the model.

    A tool is kept when its server name is in ``allow`` (all when None) and
    not in ``deny``. Its name is ``{prefix}_{name}`` (just the name without a
    prefix), with characters a model cannot take replaced by ``_`` and cut to
    64; a name already taken by an earlier tool is skipped with a warning.
    """
    kept: list[tuple[str, mcp_types.Tool]] = []
    taken: set[str] = set()
    for listed_tool in listed:
        name = listed_tool.name
        if (allow is not None and name not in allow) or name in deny:
            continue
        ours = _NOT_NAME.sub("_", f"{prefix}_{name}" if prefix else name)[:_MAX_NAME]
        if not ours or ours in taken:
            logger.warning("%s: tool %r skipped: its name %r is taken", label, name, ours)
            continue
        taken.add(ours)
        kept.append((ours, listed_tool))
    return kept


def listed_bytes(listed: Iterable[mcp_types.Tool]) -> int:
    """The size of ``listed`` as JSON, to hold a listing to ``MAX_LISTING_BYTES``."""
    return sum(len(tool.model_dump_json(by_alias=True)) for tool in listed)


def effect_of(listed: mcp_types.Tool) -> ToolEffect:
    """The tool's effect from the server's annotations: ``readOnlyHint`` makes it
    ``"pure"``, else ``idempotentHint`` ``"idempotent"``; anything else (none
    given, or not exactly True) ``"once"``, which is never run twice."""
    annotations = listed.annotations
    if annotations is None:
        return "once"
    if annotations.read_only_hint is True:
        return "pure"
    return "idempotent" if annotations.idempotent_hint is True else "once"


def parameters_of(listed_tool: mcp_types.Tool) -> dict[str, Any]:
    """The tool's ``inputSchema`` as plain JSON (an object schema at least);
    ``ValueError`` saying why for one nested too deeply or too big to take (a
    copy of it is made on the event loop: some 0.1 s at the bound)."""
    deep = f"its inputSchema is nested more than {_MAX_SCHEMA_DEPTH} levels deep"
    try:
        encoded = msgspec.json.encode(listed_tool.input_schema)  # the size first: it is quick
    except RecursionError:
        raise ValueError(deep) from None
    if len(encoded) > _MAX_SCHEMA_BYTES:
        raise ValueError(f"its inputSchema is over {_MAX_SCHEMA_BYTES // 1024} KiB")
    if _nesting(listed_tool.input_schema, _MAX_SCHEMA_DEPTH) > _MAX_SCHEMA_DEPTH:
        raise ValueError(deep)
    schema = msgspec.json.decode(encoded)
    if not isinstance(schema, dict):
        return {"type": "object"}
    schema.setdefault("type", "object")
    return schema


def _nesting(value: object, limit: int) -> int:
    """How deep ``value``'s dicts and lists nest (the root container is 1); once
    past ``limit``, ``limit + 1``. Not recursive: any depth."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                return depth
            deepest = max(deepest, depth)
            stack.extend(
                (item, depth + 1) for item in (node.values() if isinstance(node, dict) else node)
            )
    return deepest


def _full_check(schema: dict[str, Any]) -> list[Any]:
    """The full validator of ``schema`` and what it holds that matches regexes;
    ``[None]`` when it holds ``unevaluatedProperties`` beside
    ``patternProperties`` (``jsonschema`` matches those with ``re`` itself)."""
    scan = patterns_in(schema)
    if scan.pattern_properties and scan.unevaluated:
        logger.info(
            "an inputSchema that cannot be used to check arguments: "
            "unevaluatedProperties beside patternProperties"
        )
        return [None]
    cls = checking_class(jsonschema.validators.validator_for(schema))
    return [cls(schema, registry=_NO_RETRIEVAL), scan]


def validator(schema: dict[str, Any]) -> Validator:
    """A check of arguments against ``schema`` (``ToolArgumentsError`` naming the
    JSON paths). Cheap to make, so listing many tools costs little: a quick test
    passes the common schemas' valid arguments; the full validator is built at
    the first call that needs it. A ``$ref`` is resolved inside the schema only
    (never fetched from a URL or read from a file: a server must not make us
    read anything); a schema that cannot be used (invalid, a ``$ref`` to
    nowhere, a pattern that does not compile) leaves the arguments to the
    server. The schema's patterns are matched in a child process
    (``_mcp_patterns``), never here: a match not decided within
    ``PATTERN_SECONDS`` refuses the call, naming where, as does a check that
    would apply more than ``CHECK_STEPS`` keywords (a ``$ref`` bomb would hold
    the event loop for hours). Cancellation: a child
    matching patterns is killed, then ``Cancelled`` propagates."""
    quick = _quick_check(schema)
    full: list[Any] = []  # (validator, its Scan) once built; [None]: unusable

    def check(arguments: dict[str, Any]) -> Awaitable[None] | None:
        if quick is not None and quick(arguments):
            return None  # the common case: decided here, nothing to await
        return full_check(arguments)

    async def full_check(arguments: dict[str, Any]) -> None:
        try:
            if not full:
                full[:] = _full_check(schema)
            if full[0] is None:
                return
            checker, scan = full
            texts = texts_in(arguments) if scan.patterns else []
            answers = (
                await match_patterns(scan.patterns, texts, scan.pattern_properties)
                if texts
                else Answers({}, {}, scan.pattern_properties)
            )
            errors = errors_of(checker, arguments, answers)
        except Undecided as undecided:
            raise ToolArgumentsError(undecided.describe(arguments)) from None
        except TooCostly as costly:  # the arguments' doing as much as the schema's: not kept
            raise ToolArgumentsError(costly.describe()) from None
        except Exception as exc:  # not a usable schema: the server judges the arguments
            logger.info(
                "an inputSchema that cannot be used to check arguments: %s", type(exc).__name__
            )
            full[:] = [None]
            return
        if errors:
            shown = "; ".join(
                f"{error.message} - at `{error.json_path}`" for error in errors[:_MAX_ERRORS_SHOWN]
            )
            more = len(errors) - _MAX_ERRORS_SHOWN
            raise ToolArgumentsError(shown + (f" (and {more} more)" if more > 0 else ""))

    return check


_ANNOTATIONS: Final = frozenset({"title", "description", "default", "examples"})
_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}


def _quick_check(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """A fast test that passes only arguments ``schema`` accepts, for the schemas
    most tools have (an object of typed properties, some required); None for any
    other schema. When it fails, the full validator decides and says why.

    ``jsonschema`` takes some 25 us a call even for two integers; this, about 1.
    """
    if not set(schema) <= _ANNOTATIONS | {"type", "properties", "required"}:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if schema.get("type") != "object" or not isinstance(properties, dict):
        return None
    if not (isinstance(required, list) and all(isinstance(n, str) for n in required)):
        return None
    types: dict[str, tuple[type, ...]] = {}
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if not (
            isinstance(kind, str) and kind in _JSON_TYPES and set(prop) <= _ANNOTATIONS | {"type"}
        ):
            return None
        types[name] = _JSON_TYPES[kind]
    needed = tuple(required)

    def quick(arguments: dict[str, Any]) -> bool:
        for name in needed:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            allowed = types.get(name)
            if allowed is None:
                continue  # not described: any value (additionalProperties is absent)
            if type(value) is bool and bool not in allowed:
                return False  # JSON's true is no integer or number
            if not isinstance(value, allowed):
                return False
        return True

    return quick


async def check_call(arguments: dict[str, Any], check: Validator | None) -> dict[str, Any]:
    """A private copy of ``arguments`` once they are plain JSON within our limits
    and fit the tool's schema; ``ToolArgumentsError`` saying where if not."""
    try:
        checked = check_arguments(arguments)
    except ArgumentsError as exc:
        raise ToolArgumentsError(str(exc)) from None
    pending = None if check is None else check(checked)
    if pending is not None:
        await pending
    return checked


def result_value(result: mcp_types.CallToolResult) -> str | ToolResult | Any:
    """What the ``Tool`` returns for ``result``: text content as a ``str``; content
    with images as a ``ToolResult`` of blocks; ``structuredContent`` (JSON-encoded
    by the caller) when there is no content; ``ToolError`` when ``isError``."""
    blocks = [block for item in result.content for block in _blocks(item)]
    if result.is_error:
        text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
        raise ToolError(text or "the server reported an error without a message")
    if not blocks and result.structured_content is not None:
        return result.structured_content
    if all(isinstance(b, TextBlock) for b in blocks):
        return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
    return ToolResult(tuple(blocks))


def _blocks(item: mcp_types.ContentBlock) -> list[InputBlock]:
    """Our blocks for one MCP content block: text, an image, or text that says
    what the content was when we cannot carry it (audio, a binary resource)."""
    if isinstance(item, mcp_types.TextContent):
        return [TextBlock(item.text)]
    if isinstance(item, mcp_types.ImageContent):
        if item.mime_type not in IMAGE_MEDIA_TYPES:
            return [TextBlock(f"[an image ({item.mime_type}) of a type the model cannot receive]")]
        try:
            data = base64.b64decode(item.data, validate=True)
        except (binascii.Error, ValueError):
            return [TextBlock(f"[an image ({item.mime_type}) whose data is not valid base64]")]
        return [ImageBlock(item.mime_type, data=data)]
    if isinstance(item, mcp_types.AudioContent):
        return [TextBlock(f"[audio ({item.mime_type}) the model cannot receive]")]
    if isinstance(item, mcp_types.ResourceLink):
        return [TextBlock(f"[resource {item.uri}: {item.name}]")]
    if isinstance(item, mcp_types.EmbeddedResource):
        resource = item.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return [TextBlock(resource.text)]
        return [TextBlock(f"[binary resource {resource.uri} ({resource.mime_type})]")]
    return [TextBlock(f"[{type(item).__name__} content the model cannot receive]")]


def too_deep(text: str) -> bool:
    """Whether ``text``, a failure to read an answer, says it is nested too deeply
    (the SDK's JSON parser stops at 200 levels: "recursion limit exceeded")."""
    return "recursion limit exceeded" in text or NESTED_TOO_DEEPLY in text


def describe_error(exc: Exception) -> str:
    """A readable line for a failed request, at most ``_MAX_ERROR_CHARS``: the MCP
    error's code and message, what the server's answer got wrong (the first few
    of its validation errors, never all of them formatted), or the exception's
    type and text (for an answer nested too deeply to read, that, not the
    parser's report)."""
    code = getattr(exc, "code", None)
    message = getattr(getattr(exc, "error", None), "message", None)
    if isinstance(code, int) and isinstance(message, str):
        if too_deep(message):
            message = f"the server's answer {NESTED_TOO_DEEPLY}"
        return _cut(f"MCP error {code}: {message}")
    if isinstance(exc, pydantic.ValidationError):
        return _cut(f"{type(exc).__name__}: {_invalid(exc)}")
    text = str(exc).strip()
    return _cut(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _invalid(exc: pydantic.ValidationError) -> str:
    """What a server's answer got wrong: how many errors, the first few (read only
    when there are at most ``_ERRORS_READ``: reading them costs as formatting)."""
    count = exc.error_count()
    said = f"{count} validation error{'s' if count != 1 else ''} for {exc.title}"
    if count > _ERRORS_READ:
        return said
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    shown = "; ".join(
        f"{'.'.join(map(str, error['loc']))}: {error['msg']}"
        for error in errors[:_MAX_ERRORS_SHOWN]
    )
    more = count - _MAX_ERRORS_SHOWN
    return f"{said}: {shown}" + (f" (and {more} more)" if more > 0 else "")


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def taken_in(result: dict[str, object]) -> str | None:
    """Make an answer's ``result`` cheap for the SDK to validate (it does so twice,
    on the trio thread, some 25 us a block or a tool: 1,000,000 content blocks held
    the loop 25 s, 100,000 tools 8 s) before the session sees it (over stdio, in
    the worker thread a long line is parsed in): runs of plain text blocks are
    joined into one (as a result's texts are joined anyway), and what we would
    refuse after that validation is refused now, saying why (the error the
    request gets). None when the answer may go on."""
    tools = result.get("tools")
    if isinstance(tools, list) and len(tools) > MAX_TOOLS:
        return f"tools/list refused: it lists more than {MAX_TOOLS} tools"
    content = result.get("content")
    if isinstance(content, list) and len(content) > MAX_CONTENT_BLOCKS:
        content = result["content"] = _joined_texts(content)
        if len(content) > MAX_CONTENT_BLOCKS:
            return f"the server's answer has more than {MAX_CONTENT_BLOCKS} content blocks"
    return None


def _joined_texts(content: list[object]) -> list[object]:
    """``content`` with each run of plain text blocks joined into one, by newlines."""
    joined: list[object] = []
    run: list[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and set(block) <= _PLAIN:
            text = block.get("text")
            if isinstance(text, str):
                run.append(text)
                continue
        if run:
            joined.append({"type": "text", "text": "\n".join(run)})
            run = []
        joined.append(block)
    if run:
        joined.append({"type": "text", "text": "\n".join(run)})
    return joined


_PLAIN: Final = frozenset({"type", "text", "annotations", "_meta"})
"""The keys of a text block whose text is all we take of it."""
