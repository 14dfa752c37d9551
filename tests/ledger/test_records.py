"""The ledger's records (issue 14): every record frozen, its kind a literal of its tag;
ledgers written without the newer fields still load."""

from __future__ import annotations

import typing

import msgspec

from trio_agent import UserMessage
from trio_agent.ledger import Record, derive, record_decoder
from trio_agent.stores import parse_jsonl


def test_ledgers_without_the_new_fields_still_load():
    """Issue 14: ledgers written without the new fields (metadata, model) still load."""
    old = (
        b'{"kind":"session/start","seq":0,"format":1,"session_id":"s","created":0.0,'
        b'"system":"","first_request":1,"first_sequence":0}\n'
        b'{"kind":"turn/start","seq":1,"turn":1,"sequence":0}\n'
    )
    loaded = parse_jsonl("s", old)
    assert loaded.records[0].metadata == {} and loaded.records[1].model == ""
    assert derive(loaded.records).metadata == {}


def test_every_record_is_frozen_and_its_kind_is_a_literal_of_its_tag():
    """Issue 14: every record is frozen, and its kind is a literal of its tag."""
    for cls in typing.get_args(Record):
        config = cls.__struct_config__
        assert config.frozen and config.tag == cls.kind
        hint = typing.get_type_hints(cls, include_extras=True)["kind"]
        assert typing.get_origin(hint) is typing.ClassVar
        (literal,) = typing.get_args(hint)
        assert typing.get_args(literal) == (cls.kind,), cls
        assert type(record_decoder.decode(msgspec.json.encode(_one(cls)))) is cls


def _one(cls):
    """A record of ``cls`` from its required fields, zero-valued."""
    values = {"seq": 0}
    for field in msgspec.structs.fields(cls):
        if field.required and field.name != "seq":
            values[field.name] = _zero(field.type)
    return cls(**values)


def _zero(tp):
    if typing.get_origin(tp) is typing.Annotated:  # a field with its description
        return _zero(typing.get_args(tp)[0])
    origin = typing.get_origin(tp)
    if tp is int or tp is float:
        return tp(0)
    if tp is str:
        return ""
    if origin is tuple:
        return ()
    if origin in (typing.Union, type(int | str)):
        return _zero(typing.get_args(tp)[0])
    from trio_agent import ToolResultMessage, TurnCompleted

    if tp is ToolResultMessage:
        return ToolResultMessage("r", "c", "t", "x")
    if "TurnEnd" in repr(tp) or "TurnCompleted" in repr(tp):
        return TurnCompleted()
    return UserMessage("u", "x")
