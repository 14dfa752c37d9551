"""--json is a versioned schema (issue 14, item 17): demo, run and resume print the
same envelope of the same events, show of the records, and `trio-agent schema`
prints their JSON Schema, made by msgspec, every type described."""

from __future__ import annotations

import json
import typing

from cli_runner import TRIO_AGENT, call_stream, cli, command, text_stream
from loopback import Reply

from trio_agent.events import Event, RunResult, SessionEvent, TurnEnd, TurnResult
from trio_agent.ledger import Record


def names(union) -> set[str]:
    return {t.__name__ for t in typing.get_args(union)}


async def schema(kind: str | None = None) -> dict:
    done = await cli([*TRIO_AGENT, "schema", *(["--kind", kind] if kind else [])])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check(line: dict, document: dict, envelope: str, union: str) -> None:
    """``line`` has the envelope's fields and its payload is a type of ``union`` with
    every field the schema requires (a small part of a JSON Schema validator)."""
    defs = document["$defs"]
    assert set(line) == set(defs[envelope]["required"]) == {"schema", union_field(envelope)}
    assert line["schema"] == 1 == defs[envelope]["properties"]["schema"]["enum"][0]
    payload = line[union_field(envelope)]
    tag = defs[union]["discriminator"]["propertyName"]
    target = defs[union]["discriminator"]["mapping"][payload[tag]].rsplit("/", 1)[1]
    assert set(defs[target]["required"]) <= set(payload)
    assert set(payload) <= set(defs[target]["properties"])


def union_field(envelope: str) -> str:
    return {"EventLine": "event", "RecordLine": "record"}[envelope]


async def test_every_command_prints_the_same_versioned_lines(loopback, tmp_path):
    document = await schema()
    ledger = tmp_path / "s.jsonl"
    loopback.replies += [
        Reply(body=call_stream("c1", "list_dir", {"path": "."})),
        Reply(body=text_stream("listed")),
        Reply(body=text_stream("again")),
    ]
    outputs = {
        "demo": await cli([*TRIO_AGENT, "demo", "--json"]),
        "run": await cli(
            command(loopback, tmp_path, "run", "--json", "--ledger", str(ledger), "ls")
        ),
        "resume": await cli([*TRIO_AGENT, "resume", str(ledger), "--json", "--message", "more"]),
    }
    kinds = {}
    for name, done in outputs.items():
        assert done.returncode == 0, (name, done.stderr)
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        for line in lines:
            check(line, document, "EventLine", "SessionEvent")
        kinds[name] = {line["event"]["type"] for line in lines}
        assert lines[0]["event"]["type"] == "turn.started"
        assert lines[-1]["event"]["type"] == "turn.finished"
    assert kinds["demo"] == kinds["run"] >= kinds["resume"] | {"tool.started"}

    shown = await cli([*TRIO_AGENT, "show", "--json", str(ledger)])
    assert shown.returncode == 0, shown.stderr
    for line in shown.stdout.splitlines():
        check(json.loads(line), document, "RecordLine", "Record")


async def test_schema_describes_every_event_result_and_record():
    document = await schema()
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    lines = ("EventLine", "RecordLine", "WarningsLine")
    assert document["anyOf"] == [{"$ref": f"#/$defs/{name}"} for name in lines]
    defs = document["$defs"]
    wanted = (
        names(SessionEvent) | names(Event) | names(RunResult) | names(TurnEnd) | names(Record)
    ) | {TurnResult.__name__, *lines}
    assert wanted <= set(defs)
    undocumented = sorted(n for n in wanted if not defs[n].get("description", "").strip())
    assert undocumented == []
    for union in ("SessionEvent", "Event", "RunResult", "TurnEnd", "Record"):
        assert "discriminator" in defs[union]  # the named unions, for $ref

    events, records = await schema("events"), await schema("records")
    assert "ModelChunk" in events["$defs"] and "SessionStartRecord" not in events["$defs"]
    assert "SessionStartRecord" in records["$defs"] and "ModelChunk" not in records["$defs"]
    bad = await cli([*TRIO_AGENT, "schema", "--kind", "everything"])
    assert bad.returncode == 2


def undescribed(document: dict) -> list[str]:
    """Every property (``Type.field``) of every object in ``document`` with no
    description, wherever the object sits (components, or inline in a property)."""
    found = []

    def walk(node, where: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, where)
        elif isinstance(node, dict):
            for name, prop in node.get("properties", {}).items():
                if not (isinstance(prop, dict) and str(prop.get("description", "")).strip()):
                    found.append(f"{where}.{name}")
            for value in node.values():
                walk(value, where)

    for name, component in document["$defs"].items():
        walk(component, name)
    return found


async def test_every_field_of_every_type_is_described():
    document = await schema()
    objects = [d for d in document["$defs"].values() if "properties" in d]
    assert len(objects) >= 45 and sum(len(d["properties"]) for d in objects) >= 170
    assert undescribed(document) == []
    # the check sees a field that loses its description, a tag field included
    for type_name, field in [
        ("TurnFinished", "sequence"),
        ("Usage", "cache_write_tokens"),
        ("SessionStartRecord", "kind"),
        ("EventLine", "schema"),
    ]:
        broken = json.loads(json.dumps(document))
        del broken["$defs"][type_name]["properties"][field]["description"]
        assert undescribed(broken) == [f"{type_name}.{field}"]
