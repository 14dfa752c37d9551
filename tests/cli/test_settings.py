"""Model settings on the command line (issue 16): --temperature, --tool-choice
and --reasoning-effort reach the request, are recorded, and a resume keeps
them; a bad one is a usage error before anything runs."""

from __future__ import annotations

from cli_runner import TRIO_AGENT, cli, command, text_stream
from loopback import Reply

from trio_agent.ledger import derive
from trio_agent.stores import parse_jsonl


def recorded(ledger):
    return derive(parse_jsonl("s1", ledger.read_bytes()).records).metadata["cli"]


async def test_settings_flags_reach_the_request_and_a_resume_keeps_them(loopback, tmp_path):
    ledger = tmp_path / "s1.jsonl"
    flags = ["--temperature", "0.3", "--tool-choice", "read_file", "--reasoning-effort", "low"]
    loopback.replies += [Reply(body=text_stream("a")), Reply(body=text_stream("b"))]
    done = await cli(command(loopback, tmp_path, "run", *flags, "--ledger", str(ledger), "x"))
    assert done.returncode == 0, done.stderr
    body = loopback.requests[0].json()
    assert body["temperature"] == 0.3 and body["reasoning_effort"] == "low"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}
    config = recorded(ledger)
    assert (config["temperature"], config["tool_choice"], config["reasoning_effort"]) == (
        0.3,
        "read_file",
        "low",
    )
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "y"])
    assert resumed.returncode == 0, resumed.stderr
    again = loopback.requests[1].json()
    assert again["temperature"] == 0.3 and again["reasoning_effort"] == "low"


async def test_a_run_without_settings_records_none_and_sends_none(loopback, tmp_path):
    ledger = tmp_path / "s1.jsonl"
    loopback.replies.append(Reply(body=text_stream("a")))
    done = await cli(command(loopback, tmp_path, "run", "--ledger", str(ledger), "x"))
    assert done.returncode == 0, done.stderr
    body = loopback.requests[0].json()
    assert not {"temperature", "tool_choice", "reasoning_effort"} & set(body)
    assert not {"temperature", "tool_choice", "reasoning_effort"} & set(recorded(ledger))


async def test_bad_settings_are_usage_errors_before_anything_runs(loopback, tmp_path):
    for flags, says in [
        (["--temperature", "3"], "must be in 0..2"),
        (["--temperature", "hot"], "is not a number"),
        (["--reasoning-effort", "max"], "invalid choice"),
        (["--tool-choice", "send_email"], "names 'send_email', which is not one of the tools"),
    ]:
        done = await cli(command(loopback, tmp_path, "run", *flags, "x"))
        assert done.returncode == 2, (flags, done.stderr)
        assert says in done.stderr.decode(), (flags, done.stderr)
    assert loopback.requests == []
