"""Typed final output (``output_type=``): what the model is asked for, how its
answer is read and checked, and what goes back to it when the answer does not fit.

Two ways to ask (``output_mode``): ``"tool"`` (the default: works with every
model that calls tools) offers a tool named ``OUTPUT_TOOL_NAME`` whose
parameters are the type's JSON Schema, and the call's arguments are the
answer; ``"native"`` sends the schema as ``ModelRequest.output`` (OpenAI's
``response_format``, Anthropic's ``output_config``) and the answer is the
final text, as JSON. A type whose schema is not an object (``list[int]``,
``int``, a ``Literal``, a union) is wrapped as ``{"response": ...}``, which is
what tool parameters and strict native schemas need. A pydantic type (a
model, ``list[Model]``, ...) is described and validated by pydantic, any other
by msgspec (``tools._codec``). Everything here is pure; the turn
(``_turn.py``) does the appending and the counting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container, Hashable, Sequence
from contextvars import ContextVar
from inspect import isawaitable
from typing import Any, Final, Literal, final

import attrs

from ..errors import HOOK_ERROR, OUTPUT_INVALID, describe
from ..limits import MAX_ARGUMENT_DEPTH, OUTPUT_TOOL_NAME, json_depth
from ..messages._ir import AssistantMessage, ToolCall, text_from_assistant
from ..model import OutputFormat
from ..tools._codec import JsonType, json_type
from ..tools._tool import Tool, ToolError, ToolRegistry, ToolSource
from ..tools._types import NotJson, TypeMismatch

__all__ = [
    "OUTPUT_ACCEPTED",
    "OutputEnd",
    "OutputError",
    "OutputSpec",
    "OutputSlot",
    "judge_output",
    "CURRENT_SLOT",
    "check_output_tool",
    "offered",
    "output_spec",
    "strict_ready",
]

OUTPUT_ACCEPTED: Final = "final result accepted"
"""The result the output tool's call gets when its answer is accepted."""

OutputValidator = Callable[[Any], Awaitable[Any]] | Callable[[Any], Any]
"""An async function of the decoded value, or a plain one (called on the trio
thread, as hooks are)."""


class OutputError(Exception):
    """Raise from an ``output_validator`` to refuse an answer: the message goes back
    to the model, which may try again (``output_retries`` times)."""


@final
class OutputInvalid(Exception):
    """An answer that does not fit (internal): its reason is for the model."""


@final
@attrs.frozen(eq=False)
class OutputSpec:
    """A checked ``output_type`` and how to ask for it (built by ``output_spec``)."""

    type: Any
    mode: Literal["tool", "native", "text"]
    """``"text"``: ``output_type=str``, the answer is the final text as it is."""
    retries: int
    validator: OutputValidator | None
    schema: dict[str, Any]
    """What the model is asked to send: an object schema."""
    codec: JsonType | None
    """How the answer travels and is checked (msgspec's or pydantic's; wrapped in
    ``{"response": ...}`` when the type's schema is not an object); None for text."""
    tool: Tool[..., str] | None = attrs.field(default=None, init=False)
    """The output tool the model is offered (tool mode), one for every turn."""
    format: OutputFormat | None = attrs.field(default=None, init=False)
    """What the request carries for a native answer (native mode)."""

    def __attrs_post_init__(self) -> None:
        if self.mode == "tool":
            object.__setattr__(self, "tool", _output_tool(self))
        elif self.mode == "native":
            native = OutputFormat(OUTPUT_TOOL_NAME, self.schema, strict=strict_ready(self.schema))
            object.__setattr__(self, "format", native)

    @property
    def wrapped(self) -> bool:
        """Whether the answer travels as ``{"response": value}``."""
        return self.codec is not None and self.codec.wrapped

    def from_arguments(self, arguments: dict[str, Any]) -> Any:
        """The output tool's arguments as the output type, or ``OutputInvalid``
        with the reason and JSON path."""
        assert self.codec is not None
        try:
            return self.codec.convert(arguments)
        except TypeMismatch as exc:
            raise OutputInvalid(str(exc)) from None

    def from_text(self, text: str) -> Any:
        """A native answer's text as the output type, or ``OutputInvalid``. The
        answer is held to the output tool's nesting limit (``MAX_ARGUMENT_DEPTH``),
        which also keeps a deep answer from reaching Python's recursion limit
        anywhere it goes (decoding, the ledger, a resume)."""
        if json_depth(text) > MAX_ARGUMENT_DEPTH:
            raise OutputInvalid(f"the answer nests deeper than {MAX_ARGUMENT_DEPTH} containers")
        assert self.codec is not None
        try:
            return self.codec.decode(text)
        except NotJson as exc:
            raise OutputInvalid(f"the answer is not JSON: {exc}") from None
        except TypeMismatch as exc:
            raise OutputInvalid(str(exc)) from None

    async def validated(self, value: Any) -> Any:
        """``value`` after the ``output_validator`` (its return value replaces the
        output unless None); ``OutputError`` becomes ``OutputInvalid``, any other
        exception ``ValidatorFailed``. A plain (not async) validator is called as
        it is, as hooks are. Cancellation propagates from the validator."""
        if self.validator is None:
            return value
        try:
            checked = self.validator(value)
            if isawaitable(checked):
                checked = await checked
        except OutputError as exc:
            raise OutputInvalid(str(exc) or type(exc).__name__) from None
        except Exception as exc:
            raise ValidatorFailed(f"output_validator raised {describe(exc)}") from exc
        return value if checked is None else checked


@final
class ValidatorFailed(Exception):
    """The ``output_validator`` raised something else than ``OutputError``: a bug,
    which ends the turn (``HOOK_ERROR``) instead of going back to the model."""


def strict_ready(schema: Any) -> bool:
    """Whether a provider's strict mode can take ``schema`` as it is: every object
    lists all its properties as required and forbids others (OpenAI answers 400
    otherwise). A ``msgspec.Struct`` with ``forbid_unknown_fields=True`` and no
    defaults is; a plain one is asked for without ``strict``."""
    if isinstance(schema, list):
        return all(strict_ready(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    properties = schema.get("properties")
    if isinstance(properties, dict) and (
        schema.get("additionalProperties") is not False
        or set(schema.get("required", ())) != set(properties)
    ):
        return False
    return all(strict_ready(value) for value in schema.values())


_TOOL_DESCRIPTION: Final = (
    "Give the final answer: call this once, with the answer as the arguments. "
    "The answer is checked against the schema; an error result says what to fix."
)


_SPECS: dict[Hashable, OutputSpec] = {}
_SPECS_KEPT = 256
"""Output specs already built, by their options: the schema and the tool are most
of what a spec costs, and a run or turn asks for one every time. Bounded."""


def output_spec(
    output_type: Any,
    mode: object = "tool",
    retries: object = 2,
    validator: object = None,
) -> OutputSpec | None:
    """The checked output options (``_output_spec``), built once per set of options."""
    try:
        key: Hashable | None = (output_type, mode, retries, type(retries), validator)
        known = _SPECS.get(key)
    except TypeError:  # an unhashable type or validator: built every time
        key = known = None
    if known is not None:
        return known
    spec = _output_spec(output_type, mode, retries, validator)
    if spec is not None and key is not None:
        if len(_SPECS) >= _SPECS_KEPT:
            _SPECS.pop(next(iter(_SPECS)), None)
        _SPECS[key] = spec
    return spec


def _output_spec(
    output_type: Any,
    mode: object = "tool",
    retries: object = 2,
    validator: object = None,
) -> OutputSpec | None:
    """The checked output options, or None without an ``output_type``. ``str`` is
    the final text as it is (a validator may still refuse it). ``TypeError`` /
    ``ValueError`` for what cannot be used: a type neither msgspec nor pydantic
    can describe (the message says what to use), a bad mode, retries or
    validator."""
    if mode not in ("tool", "native"):
        raise ValueError(f"output_mode must be 'tool' or 'native', got {mode!r}")
    if type(retries) is not int or retries < 0:
        raise ValueError(f"output_retries must be an int >= 0, got {retries!r}")
    if validator is not None and not callable(validator):
        raise TypeError(f"output_validator must be a callable or None, got {validator!r}")
    if output_type is None:
        return None
    if output_type is str:
        return OutputSpec(str, "text", retries, validator, {"type": "string"}, None)
    try:
        codec = json_type(output_type)
    except TypeError as exc:
        raise TypeError(f"output_type: {exc}") from None
    return OutputSpec(output_type, mode, retries, validator, codec.schema, codec)


@final
@attrs.define(eq=False)
class OutputSlot:
    """One turn's answer so far: the accepted value (``accepted``), and the
    attempts that failed (``failures``), which the turn counts against
    ``retries``."""

    spec: OutputSpec
    accepted: bool = False
    value: Any = None
    failures: int = 0
    reason: str | None = None
    """Why the output tool refused the answer of this step, if it did."""
    crash: str | None = None
    """The validator's unexpected error, if it raised one."""
    held: bool = False
    """Calls of this step wait for a person's approval: no final answer now."""

    def left(self) -> int:
        """Retries left after the attempt being judged fails."""
        return max(self.spec.retries - self.failures - 1, 0)

    def retry_hint(self) -> str:
        left = self.left()
        return f" ({left} {'retry' if left == 1 else 'retries'} left)"


CURRENT_SLOT: ContextVar[OutputSlot | None] = ContextVar("trio_agent_output", default=None)
"""The running turn's ``OutputSlot``: set by the turn for its task (tool tasks of a
parallel batch inherit it), so one output tool per output type serves every turn."""


def offered(
    tools: ToolRegistry, output: OutputSpec | None, sources: Sequence[ToolSource] = ()
) -> Container[str]:
    """The names of the tools a model is offered: ``tools``, the output tool with an
    output type in tool mode, and the tool sources' tools as they are now (so
    ``tool_choice`` may name any of them)."""
    if (output is None or output.tool is None) and not sources:
        return tools
    return _Offered(tools, output is not None and output.tool is not None, sources)


@final
@attrs.frozen
class _Offered:
    """``offered``'s names, looked up only when asked (a source is read only if a
    ``tool_choice`` names a tool)."""

    tools: ToolRegistry
    output: bool
    sources: Sequence[ToolSource]

    def __contains__(self, name: object) -> bool:
        if name in self.tools or (self.output and name == OUTPUT_TOOL_NAME):
            return True
        return any(tool.name == name for source in self.sources for tool in source.tools())


def check_output_tool(tools: ToolRegistry) -> None:
    """``ValueError`` when a registered tool takes the output tool's name."""
    if tools.get(OUTPUT_TOOL_NAME) is not None:
        raise ValueError(
            f"a tool named {OUTPUT_TOOL_NAME!r} is registered: the name is the typed "
            "output's (output_type=); rename the tool"
        )


def _output_tool(spec: OutputSpec) -> Tool[..., str]:
    """The tool the model gives its answer with: its arguments are read as the
    output type and checked; the first answer that fits is kept in the running
    turn's slot (``CURRENT_SLOT``; a later call in the same turn changes nothing)."""

    async def answer(arguments: dict[str, Any]) -> str:
        slot = CURRENT_SLOT.get()
        if slot is None or slot.spec is not spec:
            raise ToolError(f"{OUTPUT_TOOL_NAME} answers only in the turn that asked for it")
        if slot.accepted:
            return f"{OUTPUT_ACCEPTED} already: this call changes nothing"
        if slot.held:
            raise ToolError(
                "calls of this step wait for a person's approval: give the final answer "
                "once they are answered"
            )
        try:
            value = await spec.validated(spec.from_arguments(arguments))
        except ValidatorFailed as exc:
            slot.crash = str(exc)
            raise ToolError("the answer could not be checked") from None
        except OutputInvalid as exc:
            slot.reason = str(exc)
            if slot.failures >= slot.spec.retries:  # the last try: the turn ends on it
                raise ToolError(
                    f"the answer does not fit: {exc}; no retries are left, the turn ends "
                    "without an answer"
                ) from None
            raise ToolError(
                f"the answer does not fit: {exc}; call {OUTPUT_TOOL_NAME} again with "
                f"a corrected answer{slot.retry_hint()}"
            ) from None
        slot.accepted, slot.value = True, value
        return OUTPUT_ACCEPTED

    return Tool(
        name=OUTPUT_TOOL_NAME,
        description=_TOOL_DESCRIPTION,
        parameters=spec.schema,
        execute=answer,
    )


@final
@attrs.frozen
class OutputEnd:
    """The turn ends on its typed answer: accepted (``output``), or not given
    (``code``: ``OUTPUT_INVALID`` past the retries, ``HOOK_ERROR`` for a broken
    validator; ``detail`` says why), or declined (``stop_reason`` refusal or
    content_filter, no output)."""

    stop_reason: str
    output: Any = None
    code: str | None = None
    detail: str | None = None


def _asks_output(message: AssistantMessage | None) -> bool:
    return message is not None and any(
        type(block) is ToolCall and block.name == OUTPUT_TOOL_NAME for block in message.content
    )


def _failed(slot: OutputSlot, stop_reason: str, reason: str, again: str) -> OutputEnd | str:
    """One more failed attempt: the turn fails past the retries, else ``again`` is
    what the model is told (with the retries left)."""
    slot.failures += 1
    if slot.failures > slot.spec.retries:
        tries = slot.failures
        return OutputEnd(
            stop_reason,
            code=OUTPUT_INVALID,
            detail=f"{reason} ({tries} {'attempt' if tries == 1 else 'attempts'})",
        )
    left = slot.spec.retries - slot.failures
    return f"{again} ({left} {'retry' if left == 1 else 'retries'} left)"


async def judge_output(
    slot: OutputSlot, stop_reason: str, message: AssistantMessage | None
) -> OutputEnd | str | None:
    """After a step: the turn's end (``OutputEnd``), or the text of a user message
    asking again for the answer, or None to go on as without an output type (a
    tool batch ran). Counts failed attempts against ``retries``. Awaits only the
    validator (native mode); cancellation propagates."""
    spec = slot.spec
    if stop_reason in ("refusal", "content_filter"):
        return OutputEnd(stop_reason)
    if slot.crash is not None:
        return OutputEnd(stop_reason, code=HOOK_ERROR, detail=slot.crash)
    if spec.mode == "text":
        return await _judge_text(slot, stop_reason, message)
    if spec.mode == "tool":
        if slot.accepted:
            return OutputEnd("stop", slot.value)
        if stop_reason == "tool_call":
            if not _asks_output(message):
                return None
            reason, slot.reason = slot.reason, None
            # the call's error result told the model already: no message, go on
            reason = reason or "the answer's arguments were refused"
            verdict = _failed(slot, stop_reason, reason, "")
            return verdict if type(verdict) is OutputEnd else None
        cut = " (cut at the output-token limit)" if stop_reason == "length" else ""
        return _failed(
            slot,
            stop_reason,
            f"the model answered with text{cut}, not a call to {OUTPUT_TOOL_NAME}",
            f"Your answer must be given by calling the {OUTPUT_TOOL_NAME} tool, with the "
            "answer as its arguments, not as text",
        )
    if stop_reason == "tool_call":
        return None
    if stop_reason == "length":
        reason = "the answer was cut at the output-token limit"
    else:
        try:
            text = text_from_assistant(message) if message is not None else ""
            return OutputEnd("stop", await spec.validated(spec.from_text(text)))
        except ValidatorFailed as exc:
            return OutputEnd(stop_reason, code=HOOK_ERROR, detail=str(exc))
        except OutputInvalid as exc:
            reason = str(exc)
    return _failed(
        slot,
        stop_reason,
        reason,
        f"Your answer does not fit the required JSON schema: {reason}. Answer again "
        "with only the JSON",
    )


async def _judge_text(
    slot: OutputSlot, stop_reason: str, message: AssistantMessage | None
) -> OutputEnd | str | None:
    """``output_type=str``: the final text is the output (a ``length`` stop too,
    as without an output type), once the validator, if any, takes it."""
    if stop_reason == "tool_call":
        return None
    text = text_from_assistant(message) if message is not None else ""
    try:
        return OutputEnd(stop_reason, await slot.spec.validated(text))
    except ValidatorFailed as exc:
        return OutputEnd(stop_reason, code=HOOK_ERROR, detail=str(exc))
    except OutputInvalid as exc:
        reason = str(exc)
    return _failed(slot, stop_reason, reason, f"Your answer was refused: {reason}. Answer again")
