"""Partial typed output (issue 18, item 4): ``PartialOutput`` and ``partial_output``.

Events are built by hand (``ModelChunk`` with ``TextDelta`` chunks, or a whole
``final_result`` call), except for two runs of the real loop at the end.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Literal, TypedDict

import attrs
import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_agent import ToolCall, ToolRegistry, UserMessage, run_agent_loop
from trio_agent.events import AttemptFailed, ModelChunk
from trio_agent.limits import MAX_ARGUMENT_DEPTH, OUTPUT_TOOL_NAME, json_depth
from trio_agent.model import TextDelta, ThinkingDelta
from trio_agent.output import _scan as _partial_scan
from trio_agent.output._partial import PartialOutput, is_wrapped, partial_output
from trio_agent.testing import ScriptedModel, scripted_response


def deltas(
    pieces: list[str], request_id: str = "request-001", attempt: int = 1
) -> list[ModelChunk]:
    return [
        ModelChunk(sequence=i, request_id=request_id, chunk=TextDelta(piece), attempt=attempt)
        for i, piece in enumerate(pieces)
    ]


def cut(text: str, size: int) -> list[str]:
    return [text[at : at + size] for at in range(0, len(text), size)]


def values(output_type: Any, events: list[Any], **options: Any) -> list[Any]:
    """Every value ``PartialOutput`` gives for ``events``, in order."""
    state = PartialOutput(output_type, **options)
    out = []
    for event in events:
        if state.advance(event):
            out.append(state.value)
    return out


def call(arguments: dict[str, Any], name: str = OUTPUT_TOOL_NAME) -> ToolCall:
    return ToolCall("call-1", name, arguments)


class Item(msgspec.Struct):
    name: str
    qty: int


class Order(msgspec.Struct):
    title: str
    items: list[Item]
    note: str = ""


@dataclasses.dataclass
class Person:
    name: str
    age: int
    emails: list[str] = dataclasses.field(default_factory=list)


class Movie(TypedDict):
    title: str
    year: int


@attrs.define
class Point:
    x: int
    y: int


def test_struct_sequence_for_a_chunked_answer() -> None:
    answer = '{"title": "Tea", "items": [{"name": "cup", "qty": 12}, {"name": "pot", "qty": 1}]}'
    got = values(Order, deltas(cut(answer, 5)))
    assert got == [
        # the title and items must both have started before an Order converts
        Order("Tea", []),
        # the first item appears once it converts (its "qty" held until it ends)
        Order("Tea", [Item("cup", 12)]),
        Order("Tea", [Item("cup", 12), Item("pot", 1)]),
    ]


def test_struct_partial_strings_grow_and_json_shows_what_does_not_convert() -> None:
    state = PartialOutput(Order)
    seen: list[Order] = []
    jsons = []
    for event in deltas(cut('{"items": [], "title": "Hello world"}', 4)):
        value = state.feed(event)
        if value is not None:
            seen.append(value)
        jsons.append(state.json)
    # cut as '{"it', 'ems"', ': []', ', "t', 'itle', '": "', 'Hell', 'o wo', 'rld"', '}'
    assert [order.title for order in seen] == ["", "Hell", "Hello wo", "Hello world"]
    # before "title" started nothing converted, but the plain reading was there
    # (never a partial key)
    assert jsons[:5] == [{}, {}, {"items": []}, {"items": []}, {"items": []}]
    assert jsons[-1] == {"items": [], "title": "Hello world"}


def test_dataclass() -> None:
    answer = '{"name": "Ada", "age": 36, "emails": ["a@b.c", "d@e.f"]}'
    got = values(Person, deltas(cut(answer, 6)))
    assert got == [
        # cut as '{"name', '": "Ad', 'a", "a', 'ge": 3', '6, "em', 'ails":', ' ["a@b',
        # '.c", "', 'd@e.f"', ']}': "emails" has a default, so a Person comes once
        # "age" is whole
        Person("Ada", 36),
        Person("Ada", 36, ["a@b"]),
        Person("Ada", 36, ["a@b.c", ""]),
        Person("Ada", 36, ["a@b.c", "d@e.f"]),
    ]


def test_typeddict() -> None:
    got = values(Movie, deltas(cut('{"title": "Alien", "year": 1979}', 3)))
    # "year" is required, so nothing converts until it is whole
    assert got == [{"title": "Alien", "year": 1979}]


def test_attrs_class() -> None:
    assert values(Point, deltas(cut('{"x": 1, "y": 22}', 2))) == [Point(1, 22)]


def test_list_of_int_is_wrapped_and_numbers_are_held_until_they_end() -> None:
    state = PartialOutput(list[int])
    assert state.wrapped
    got = []
    for event in deltas(['{"resp', 'onse": [1', "2", ", 3", "45", "6, ", "7]}"]):
        if state.advance(event):
            got.append(state.value)
    assert got == [[], [12], [12, 3456], [12, 3456, 7]]
    assert state.json == [12, 3456, 7]


def test_literal_appears_only_whole() -> None:
    answer = '{"response": "escalate"}'
    assert values(Literal["approve", "reject", "escalate"], deltas(list(answer))) == ["escalate"]


def test_union_of_str_literals_and_none() -> None:
    kind = Literal["yes", "no"] | Literal["maybe"] | None
    assert values(kind, deltas(cut('{"response": "maybe"}', 3))) == ["maybe"]
    # a None value is a value: ``advance`` says so, ``feed`` cannot
    state = PartialOutput(kind)
    events = deltas(['{"response": nu', "ll}"])
    assert [state.advance(event) for event in events] == [False, True]
    assert state.value is None


def test_struct_with_a_literal_field_keeps_the_field_out_until_it_is_whole() -> None:
    class Verdict(msgspec.Struct):
        reason: str
        label: Literal["good", "bad"] | None = None

    got = values(Verdict, deltas(cut('{"reason": "ok", "label": "good"}', 3)))
    # cut as '{"r', 'eas', 'on"', ': "', 'ok"', ', "', 'lab', 'el"', ': "', 'goo', 'd"}'
    assert got == [Verdict(""), Verdict("ok"), Verdict("ok", "good")]


def test_nested_arrays() -> None:
    answer = '{"response": [[1, 2], [], [[3], ["x"]]]}'
    got = values(list[Any], deltas(cut(answer, 2)))
    assert got[-1] == [[1, 2], [], [[3], ["x"]]]
    assert [[1], [[]]] not in got  # never a number cut short
    # cut as '{"', 're', 'sp', 'on', 'se', '":', ' [', '[1', ', ', '2]', ', ', '[]',
    # ', ', '[[', '3]', ', ', '["', 'x"', ']]', ']}'
    assert got == [
        [],
        [[]],
        [[1]],
        [[1, 2]],
        [[1, 2], []],
        [[1, 2], [], [[]]],
        [[1, 2], [], [[3]]],
        [[1, 2], [], [[3], [""]]],
        [[1, 2], [], [[3], ["x"]]],
    ]


def test_list_of_structs_leaves_the_half_written_last_element_out() -> None:
    answer = msgspec.json.encode({"response": [{"name": f"n{i}", "qty": i} for i in range(5)]})
    got = values(list[Item], deltas(list(answer.decode())))
    assert got == [[Item(f"n{i}", i) for i in range(k)] for k in range(6)]


def test_unicode_escape_cut_in_the_middle() -> None:
    text = '{"response": "caf\\u00e9!"}'
    at = text.index("\\u00") + 4  # "\u00" | "e9"
    got = values(str, deltas([text[:at], text[at:]]), wrapped=True)
    assert got == ["caf", "café!"]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_surrogate_pair_and_escapes_split_anywhere(size: int) -> None:
    value = 'say "hi" \\ \U0001f600 \u00e9\n\t/'
    answer = (
        msgspec.json.encode({"response": value}).decode().replace("\U0001f600", "\\ud83d\\ude00")
    )
    got = values(str, deltas(cut(answer, size)), wrapped=True)
    assert got[-1] == value
    for partial in got:
        assert value.startswith(partial)  # no half escape, no lone surrogate
    assert len(got) == len(set(got))


def test_escaped_quotes_in_keys_and_values() -> None:
    answer = '{"a\\"b": "x\\"y", "c": "\\\\"}'
    got = values(dict[str, str], deltas(list(answer)))
    assert got[-1] == {'a"b': 'x"y', "c": "\\"}
    assert {'a"b': 'x"'} in got
    assert all(set(value) <= {'a"b', "c"} for value in got)  # never a partial key


def test_str_is_plain_text() -> None:
    got = values(str, deltas(["Hel", "lo ", "{not json"]))
    assert got == ["Hel", "Hello ", "Hello {not json"]


def test_text_that_is_not_json_yields_nothing() -> None:
    state = PartialOutput(Order)
    for event in deltas(["Let me ", "look that up.", ' {"title": "x", "items": []}']):
        assert state.feed(event) is None
    assert state.json is msgspec.UNSET


def test_other_events_and_chunks_are_ignored() -> None:
    state = PartialOutput(list[int])
    assert (
        state.feed(
            AttemptFailed(
                sequence=0,
                request_id="request-001",
                attempt=1,
                error="boom",
                retry_in=None,
                chunks=0,
            )
        )
        is None
    )
    thinking = ModelChunk(sequence=1, request_id="request-001", chunk=ThinkingDelta("{"))
    assert state.feed(thinking) is None
    assert (
        state.feed(ModelChunk(sequence=2, request_id="request-001", chunk=call({}, "add"))) is None
    )
    assert state.feed(deltas(['{"response": [1]}'])[0]) == [1]


def test_restart_on_a_new_attempt_and_a_new_request() -> None:
    state = PartialOutput(list[int])
    first = deltas(['{"response": [1, 2, ', "3"], attempt=1)
    assert [state.feed(event) for event in first] == [[1, 2], None]
    # attempt 2 of the same request: what attempt 1 read is void
    second = deltas(['{"response": [', "9]}"], attempt=2)
    assert [state.feed(event) for event in second] == [[], [9]]
    assert state.attempt == 2
    # the next step (an output retry): a new request id starts over again
    third = deltas(['{"response": [9]}'], request_id="request-002")
    assert [state.feed(event) for event in third] == [[9]]  # equal, but a new answer
    assert (state.request_id, state.attempt) == ("request-002", 1)


def test_tool_mode_call_yields_the_value_at_once() -> None:
    state = PartialOutput(Order)
    events = [
        *deltas(["I will answer now. "]),
        ModelChunk(
            sequence=5,
            request_id="request-001",
            chunk=call({"title": "T", "items": [{"name": "a", "qty": 1}]}),
        ),
        *deltas(['{"title": "other", "items": []}']),  # text after the call: not the answer
    ]
    got = [state.feed(event) for event in events]
    assert got == [None, Order("T", [Item("a", 1)]), None]
    assert state.json == {"title": "T", "items": [{"name": "a", "qty": 1}]}


def test_tool_mode_wrapped_and_invalid() -> None:
    state = PartialOutput(list[int])
    assert state.feed(ModelChunk(sequence=0, request_id="r", chunk=call({"response": [1, 2]}))) == [
        1,
        2,
    ]
    state = PartialOutput(list[int])
    invalid = ModelChunk(sequence=0, request_id="r", chunk=call({"response": ["x"]}))
    assert state.feed(invalid) is None
    assert state.json == ["x"]


def test_tool_mode_keeps_the_first_call_that_fits_as_the_loop_does() -> None:
    state = PartialOutput(list[int])
    events = [
        *deltas(['{"response": [5, ']),  # text before the call, read as it came
        ModelChunk(sequence=1, request_id="request-001", chunk=call({"response": "no"})),
        ModelChunk(sequence=2, request_id="request-001", chunk=call({"response": [1]})),
        ModelChunk(sequence=3, request_id="request-001", chunk=call({"response": [2]})),
    ]
    assert [state.feed(event) for event in events] == [[5], None, [1], None]
    assert state.json == [1]


def test_wrap_rule_matches_the_output_spec() -> None:
    output = pytest.importorskip("trio_agent.output._spec")

    class Tagged(msgspec.Struct, tag=True):
        a: int

    class Row(msgspec.Struct, array_like=True):
        a: int

    kinds: list[Any] = [
        Order,
        Person,
        Movie,
        Point,
        dict[str, int],
        list[int],
        int,
        Literal["a", "b"],
        Order | None,
        Tagged,
        Row,
        tuple[int, str],
        bool,
    ]
    for kind in kinds:
        spec = output.output_spec(kind)
        assert is_wrapped(kind) == spec.wrapped, kind


class Pin(msgspec.Struct, omit_defaults=True):
    x: int
    y: float
    label: str


class Doc(msgspec.Struct, omit_defaults=True):
    title: str
    tags: list[str]
    pins: list[Pin]
    matrix: list[list[int]]
    flag: bool
    kind: Literal["a", "bb", "ccc"]
    note: str | None = None
    counts: dict[str, int] = {}


_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_int = st.integers(-(2**63), 2**63 - 1)
_float = st.floats(allow_nan=False, allow_infinity=False)
_pins = st.builds(Pin, x=_int, y=_float, label=_text)
_docs = st.builds(
    Doc,
    title=_text,
    tags=st.lists(_text, max_size=4),
    pins=st.lists(_pins, max_size=3),
    matrix=st.lists(st.lists(_int, max_size=3), max_size=3),
    flag=st.booleans(),
    kind=st.sampled_from(["a", "bb", "ccc"]),
    note=st.none() | _text,
    counts=st.dictionaries(_text, _int, max_size=3),
)


def consistent(partial: Any, final: Any) -> bool:
    """``partial`` could grow into ``final``: a prefix of a string, a list whose
    elements could grow into the final ones, an object with a subset of the keys."""
    if type(partial) is str and type(final) is str:
        return final.startswith(partial)
    if type(partial) is list and type(final) is list:
        return len(partial) <= len(final) and all(map(consistent, partial, final))
    if type(partial) is dict and type(final) is dict:
        return all(key in final and consistent(item, final[key]) for key, item in partial.items())
    return bool(partial == final and type(partial) is type(final))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    case=st.one_of(
        st.tuples(st.just(Doc), _docs),
        st.tuples(st.just(list[Pin]), st.lists(_pins, max_size=4)),
    ),
    data=st.data(),
)
def test_every_partial_value_grows_into_the_final_one(case: Any, data: st.DataObject) -> None:
    kind, value = case
    wrapped = is_wrapped(kind)
    text = msgspec.json.encode({"response": value} if wrapped else value).decode()
    final_plain = msgspec.to_builtins(value)
    points = sorted(set(data.draw(st.lists(st.integers(1, max(len(text) - 1, 1)), max_size=40))))
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    state = PartialOutput(kind)
    got = []
    for event in deltas([piece for piece in pieces if piece]):
        if state.advance(event):
            got.append(state.value)
        if state.json is not msgspec.UNSET:
            assert consistent(state.json, final_plain), (state.json, final_plain)
    assert got, "the whole answer must give a value"
    assert got[-1] == value
    for before, after in itertools.pairwise(got):
        assert before != after
    for partial in got:
        assert consistent(msgspec.to_builtins(partial), final_plain), (partial, value)


def test_a_long_answer_is_scanned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a timing: the reader never scans a character twice (an escape cut by a
    delta's end is read again, at most 11 characters), so the whole of a
    60,000-character answer is one pass however it is cut; what runs per delta
    beyond the scan is C (msgspec), over the open containers only."""
    scanned = 0
    scan = _partial_scan.PrefixScanner._scan

    def counting(self: Any) -> None:
        nonlocal scanned
        start = self._pos
        scan(self)
        scanned += self._pos - start

    monkeypatch.setattr(_partial_scan.PrefixScanner, "_scan", counting)
    items = [Item(f'item {i} \u00e9 "q"', i) for i in range(1500)]
    text = msgspec.json.encode({"response": items}).decode().replace("\u00e9", "\\u00e9")
    assert len(text) > 60_000
    got = values(list[Item], deltas(cut(text, 60)))
    assert got[-1] == items
    assert len(text) <= scanned <= len(text) + 11 * (len(text) // 60 + 1)


class Source:
    """An async iterable of events: a memory channel's receiving end."""

    def __init__(self, receive: trio.MemoryReceiveChannel[Any]) -> None:
        self.receive = receive

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


async def test_partial_output_iterates_values_and_yields_none_values() -> None:
    send, receive = trio.open_memory_channel[Any](100)
    for event in deltas(['{"response": [nu', "ll, 1", "]}"]):
        send.send_nowait(event)
    send.close()
    got = [value async for value in partial_output(Source(receive), list[int | None])]
    assert got == [[], [None], [None, 1]]


async def test_partial_output_cancelled_while_waiting_goes_on_afterwards() -> None:
    send, receive = trio.open_memory_channel[Any](100)
    iterator = partial_output(Source(receive), list[int])
    send.send_nowait(deltas(['{"response": [1, '])[0])
    assert await iterator.__anext__() == [1]
    with trio.move_on_after(0.01) as scope:
        await iterator.__anext__()  # nothing comes: cancelled while awaiting the source
    assert scope.cancelled_caught
    send.send_nowait(deltas(["2]}"])[0])
    assert await iterator.__anext__() == [1, 2]
    assert iterator.state.json == [1, 2]
    send.close()
    with pytest.raises(StopAsyncIteration):
        await iterator.__anext__()


async def test_with_the_loop_native_mode_and_an_output_retry() -> None:
    script = [
        scripted_response("r1", '{"title": "x", "items": [{"name": 1}]}', text_chunks=4),
        scripted_response(
            "r2", '{"title": "Tea", "items": [{"name": "cup", "qty": 2}]}', text_chunks=6
        ),
    ]
    run = run_agent_loop(
        messages=[UserMessage("u", "go")],
        model=ScriptedModel(script),
        tools=ToolRegistry([]),
        max_steps=4,
        output_type=Order,
        output_mode="native",
    )
    async with run:
        got = [value async for value in partial_output(run, Order)]
    assert run.result is not None
    assert run.result.status == "completed"
    assert got[-1] == run.result.output == Order("Tea", [Item("cup", 2)])
    assert Order("x", []) in got  # the first, refused answer, read as it streamed


async def test_with_the_loop_tool_mode() -> None:
    answer = {"title": "T", "items": []}
    script = [
        scripted_response("r1", [ToolCall("c1", OUTPUT_TOOL_NAME, answer)]),
        scripted_response("r2", "unused"),
    ]
    run = run_agent_loop(
        messages=[UserMessage("u", "go")],
        model=ScriptedModel(script),
        tools=ToolRegistry([]),
        max_steps=4,
        output_type=Order,
    )
    async with run:
        got = [value async for value in partial_output(run, Order)]
    assert got == [Order("T", [])]
    assert run.result is not None and run.result.status == "completed"


_json = st.recursive(
    st.none() | st.booleans() | _int | _float | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=_json, indent=st.sampled_from([0, 2]), data=st.data())
def test_any_json_pretty_or_compact_reads_as_prefixes(
    value: Any, indent: int, data: st.DataObject
) -> None:
    text = msgspec.json.format(msgspec.json.encode({"response": value}), indent=indent).decode()
    points = sorted(set(data.draw(st.lists(st.integers(1, len(text) - 1), max_size=30))))
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    state = PartialOutput(Any)
    got = []
    for event in deltas(pieces):
        if state.advance(event):
            got.append(state.value)
            assert consistent(state.value, value), (state.value, value)
        if state.json is not msgspec.UNSET:
            assert consistent(state.json, value)
    assert got[-1] == value
    assert state.json == value


_noise = st.text(alphabet='{}[]",: \n0123456789-+.eEtruefalsn\\u"ab', max_size=40)


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from([Any, list[int], dict[str, Any], Order, list[list[str]]]),
    text=st.one_of(_noise, _noise.map(lambda noise: '{"response": ' + noise)),
    data=st.data(),
)
def test_any_text_never_raises_and_a_valid_whole_reads_as_msgspec_decodes_it(
    kind: Any, text: str, data: st.DataObject
) -> None:
    points = sorted(set(data.draw(st.lists(st.integers(1, max(len(text) - 1, 1)), max_size=10))))
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    state = PartialOutput(kind)
    for event in deltas([piece for piece in pieces if piece]):
        state.advance(event)
        _ = state.json
    target: Any = (
        msgspec.defstruct("W", [("response", kind)], forbid_unknown_fields=True)
        if state.wrapped
        else kind
    )
    try:
        whole = msgspec.json.decode(text, type=target)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    expected = whole.response if state.wrapped else whole
    assert state.value == expected


def test_int_keys_read_from_json_strings_as_they_stream() -> None:
    # JSON object keys are strings: "1" is the int key 1, as the loop decodes it
    got = values(dict[int, str], deltas(cut('{"1": "a", "2": "b"}', 3)))
    assert got == [{}, {1: "a"}, {1: "a", 2: "b"}]


def test_int_keys_in_a_tool_mode_answer_give_the_value() -> None:
    state = PartialOutput(dict[int, str])
    call = ToolCall("c1", OUTPUT_TOOL_NAME, {"1": "a"})
    value = state.feed(ModelChunk(sequence=1, request_id="request-001", chunk=call))
    assert value == {1: "a"}


class Holder(msgspec.Struct):
    data: Any


@pytest.mark.parametrize("depth", [32, 1_200, 20_000])
def test_an_answer_nested_past_the_output_limit_stops_the_reader_without_a_recursion_error(depth):
    """A native answer nested 1,200 deep made the partial reader compare its
    readings recursively until ``RecursionError`` (issue 32). The reader stops at
    the output's nesting limit, as the loop refuses such an answer; what it gave
    before stays consistent."""
    text = '{"data": ' + "[" * depth + "1" + "]" * depth + "}"
    events = deltas(cut(text, 7))
    seen = values(Holder, events)
    depths = [json_depth(msgspec.json.encode(value).decode(), 0) for value in seen]
    assert seen and max(depths) <= MAX_ARGUMENT_DEPTH
    shallow = '{"data": ' + "[" * 31 + "1" + "]" * 31 + "}"
    assert values(Holder, deltas(cut(shallow, 7)))[-1] == msgspec.json.decode(shallow, type=Holder)
