"""The command line's options, errors, recorded configuration and resume (issue 14,
items 12-15), each through a real subprocess against the loopback server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio
from cli_runner import BASE_ENV, ENV, TRIO_AGENT, call_stream, cli, command, text_stream
from loopback import Reply, fixture

import trio_agent
from trio_agent.ledger import derive
from trio_agent.stores import parse_jsonl


def records(ledger):
    return parse_jsonl(ledger.stem, ledger.read_bytes()).records


def turn_starts(ledger) -> int:
    return sum(r.kind == "turn/start" for r in records(ledger))


async def test_no_key_names_the_variable_it_read_and_the_flag(loopback, tmp_path):
    for provider, read, other in (
        ("openai", "OPENAI_API_KEY", "ANTHROPIC_"),
        ("anthropic", "ANTHROPIC_API_KEY", "OPENAI_"),
    ):
        done = await cli(
            [
                *TRIO_AGENT,
                "run",
                "--provider",
                provider,
                "--model",
                "m",
                "--workspace",
                str(tmp_path),
                "--base-url",
                loopback.url,
                "task",
            ],
            env=BASE_ENV,
        )
        assert done.returncode == 2, done.stderr
        error = done.stderr.decode()
        assert f"no API key: set {read} or pass --api-key-env NAME" in error
        assert other not in error  # only the variable actually read is named
        assert "Traceback" not in error
    named = await cli(
        command(loopback, tmp_path, "run", "--api-key-env", "MY_SERVER_KEY", "task"),
        env=ENV,  # OPENAI_API_KEY is set, but the flag names another variable
    )
    assert named.returncode == 2
    assert "MY_SERVER_KEY (named by --api-key-env) is not set" in named.stderr.decode()
    assert loopback.requests == []


async def test_run_on_an_existing_ledger_says_to_resume_it(loopback, tmp_path):
    ledger = tmp_path / "s1.jsonl"
    loopback.replies.append(Reply(body=text_stream("hi")))
    first = await cli(command(loopback, tmp_path, "run", "--ledger", str(ledger), "hello"))
    assert first.returncode == 0, first.stderr
    before = ledger.read_bytes()
    again = await cli(command(loopback, tmp_path, "run", "--ledger", str(ledger), "again"))
    assert again.returncode == 2
    assert f"use `trio-agent resume {ledger}`" in again.stderr.decode()
    assert ledger.read_bytes() == before and len(loopback.requests) == 1


async def test_a_base_url_without_a_scheme_is_a_usage_error_at_parse_time(tmp_path):
    done = await cli(
        [
            *TRIO_AGENT,
            "run",
            "--provider",
            "openai",
            "--model",
            "m",
            "--workspace",
            str(tmp_path / "not-even-there"),
            "--base-url",
            "localhost:8000/v1",
            "task",
        ],
        env=BASE_ENV,  # no key either: the URL is refused first, by the parser
    )
    assert done.returncode == 2
    error = done.stderr.decode()
    assert error.startswith("usage: trio-agent run")
    assert (
        "argument --base-url: base_url must be an http:// or https:// URL with a host, "
        "got 'localhost:8000/v1'"
    ) in error


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:99999/v1", "bad port"),
        ("http://127.0.0.1:abc/v1", "bad port"),
        ("http://127.0.0.1:8000/v1#SECRET", "must not have a fragment"),
        ("http://user:SECRET@127.0.0.1:8000/v1", "must not hold a user name or password"),
    ],
)
async def test_a_base_url_the_providers_refuse_is_a_usage_error_at_parse_time(url, says, tmp_path):
    """The CLI checks --base-url by the providers' own rule (``check_base_url``), as
    the parser reads it: nothing is run, nothing is recorded, no secret is echoed."""
    ledger = tmp_path / "s.jsonl"
    for verb in (["run", "--ledger", str(ledger)], ["resume", str(ledger)]):
        done = await cli(
            [
                *TRIO_AGENT,
                *verb,
                "--provider",
                "openai",
                "--model",
                "m",
                "--workspace",
                str(tmp_path / "not-even-there"),
                "--base-url",
                url,
                *(["task"] if verb[0] == "run" else []),
            ],
            env=BASE_ENV,  # no key either: the URL is refused first, by the parser
        )
        assert done.returncode == 2, done.stderr
        error = done.stderr.decode()
        assert error.startswith(f"usage: trio-agent {verb[0]}")
        assert "argument --base-url: " in error and says in error
        assert "SECRET" not in error and "Traceback" not in error
    assert not ledger.exists()


async def test_version_prints_the_package_version():
    done = await cli([*TRIO_AGENT, "--version"])
    assert done.returncode == 0
    assert done.stdout.decode() == f"trio-agent {trio_agent.__version__}\n"
    assert trio_agent.__version__ == "0.1.0"


def test_every_option_has_help_that_shows_its_default():
    from trio_agent.cli._parser import build_parser

    parsers = build_parser("0")
    for name, parser in parsers.commands.items():
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            text = action.help or ""
            assert text, f"{name} {action.option_strings[0]} has no help"
            assert "default: " in text or "(required)" in text, (name, action.option_strings)
    help_text = parsers.commands["run"].format_help()
    assert "Anthropic only" not in help_text and "Anthropic max_tokens" not in help_text
    assert "the most output tokens per model response" in help_text
    assert "(default: 32)" in help_text and "(default: 4)" in help_text
    resume_help = parsers.commands["resume"].format_help()
    assert "an option given overrides it" in " ".join(resume_help.split())
    assert (
        "Without --message it continues only a reply an interruption left owed: the last "
        "turn was cut by a crash (left open) or ended interrupted or cancelled (Ctrl-C), or "
        "calls were left without a result (the resume closes them). A turn that ended any "
        "other way (completed, max_steps, failed, ...) is not continued"
    ) in " ".join(resume_help.split())


async def test_max_tokens_reach_both_providers_and_openai_keeps_its_default(loopback, tmp_path):
    loopback.replies += [Reply(body=text_stream("a")), Reply(body=text_stream("b"))]
    assert (await cli(command(loopback, tmp_path, "run", "x"))).returncode == 0
    assert (
        await cli(command(loopback, tmp_path, "run", "--max-tokens", "77", "x"))
    ).returncode == 0
    default, given = (seen.json() for seen in loopback.requests)
    assert "max_completion_tokens" not in default and "max_tokens" not in default
    assert given["max_completion_tokens"] == 77 and "max_tokens" not in given

    loopback.replies += [Reply(body=fixture("anthropic_text.sse"))] * 2
    anthropic = [
        *TRIO_AGENT,
        "run",
        "--provider",
        "anthropic",
        "--model",
        "claude",
        "--workspace",
        str(tmp_path),
        "--base-url",
        loopback.url,
    ]
    env = {**BASE_ENV, "ANTHROPIC_API_KEY": "sk-ant"}
    assert (await cli([*anthropic, "x"], env=env)).returncode == 0
    assert (await cli([*anthropic, "--max-tokens", "99", "x"], env=env)).returncode == 0
    assert [seen.json()["max_tokens"] for seen in loopback.requests[2:]] == [4096, 99]


async def test_api_key_env_reads_the_key_from_the_named_variable(loopback, tmp_path):
    loopback.replies.append(Reply(body=text_stream("ok")))
    done = await cli(
        command(loopback, tmp_path, "run", "--api-key-env", "LOCAL_LLM_KEY", "x"),
        env={**BASE_ENV, "LOCAL_LLM_KEY": "sk-local"},
    )
    assert done.returncode == 0, done.stderr
    assert loopback.requests[0].headers["authorization"] == "Bearer sk-local"
    bad = await cli(command(loopback, tmp_path, "run", "--api-key-env", "NOT-A-NAME", "x"))
    assert bad.returncode == 2 and b"is not an environment variable name" in bad.stderr


async def test_retries_is_the_number_of_retries_of_a_transient_error(loopback, tmp_path):
    busy = Reply(503, b'{"error": {"message": "busy"}}', headers={"retry-after": "0"})
    loopback.replies += [busy, Reply(body=text_stream("made it"))]
    done = await cli(command(loopback, tmp_path, "run", "--retries", "1", "x"))
    assert done.returncode == 0, done.stderr
    assert len(loopback.requests) == 2 and b"made it" in done.stdout
    assert b"(attempt 1 failed:" in done.stdout and b"retrying in 0.0 s" in done.stdout

    loopback.replies += [busy, Reply(body=text_stream("never read"))]
    none = await cli(command(loopback, tmp_path, "run", "--retries", "0", "x"))
    assert none.returncode == 1 and len(loopback.requests) == 3
    assert b"giving up" in none.stdout and b"[turn 1 failed: MODEL_ERROR" in none.stdout
    for bad in ("-1", "two"):
        refused = await cli(command(loopback, tmp_path, "run", "--retries", bad, "x"))
        assert refused.returncode == 2 and b"argument --retries" in refused.stderr


async def test_run_records_its_configuration_and_resume_needs_no_flags(loopback, tmp_path):
    (tmp_path / "ws").mkdir()
    ledger = tmp_path / "sessions" / "s.jsonl"
    env = {**BASE_ENV, "MY_KEY": "sk-mine-123"}
    loopback.replies.append(Reply(body=text_stream("first answer")))
    done = await cli(
        [
            *TRIO_AGENT,
            "run",
            "--provider",
            "openai",
            "--model",
            "gpt-4o-mini",
            "--workspace",
            "ws",
            "--base-url",
            f"{loopback.url}/v1",
            "--api-key-env",
            "MY_KEY",
            "--system",
            "Be brief.",
            "--max-steps",
            "7",
            "--max-tokens",
            "55",
            "--retries",
            "2",
            "--ledger",
            str(ledger),
            "hello",
        ],
        env=env,
        cwd=tmp_path,  # a relative workspace is recorded absolute
    )
    assert done.returncode == 0, done.stderr
    metadata = derive(records(ledger)).metadata
    seal = metadata["cli"].pop("seal")  # this user's, over the rest (tests/cli/test_trust.py)
    assert isinstance(seal, str) and len(seal) == 64
    assert metadata == {
        "cli": {
            "format": 1,
            "provider": "openai",
            "model": "gpt-4o-mini",
            "base_url": f"{loopback.url}/v1",
            "workspace": str((tmp_path / "ws").resolve()),
            "system": "Be brief.",
            "max_steps": 7,
            "max_tokens": 55,
            "retries": 2,
            "api_key_env": "MY_KEY",
        }
    }
    assert b"sk-mine-123" not in ledger.read_bytes()  # the name only, never the key

    # resume from elsewhere with no flags: the recorded provider, model, server, key
    # variable, settings and workspace are used
    loopback.replies += [
        Reply(body=call_stream("c1", "write_file", {"path": "f.txt", "content": "x"})),
        Reply(body=text_stream("done")),
    ]
    resumed = await cli(
        [*TRIO_AGENT, "resume", str(ledger), "--approve", "auto", "--message", "write f"], env=env
    )
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "ws" / "f.txt").read_text() == "x"
    seen = loopback.requests[1]
    assert seen.headers["authorization"] == "Bearer sk-mine-123"
    body = seen.json()
    assert body["model"] == "gpt-4o-mini" and body["max_completion_tokens"] == 55
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}

    # a flag overrides what was recorded, for that resume
    loopback.replies.append(Reply(body=text_stream("other")))
    other = await cli(
        [*TRIO_AGENT, "resume", str(ledger), "--model", "gpt-other", "--message", "again"],
        env=env,
    )
    assert other.returncode == 0, other.stderr
    assert loopback.requests[-1].json()["model"] == "gpt-other"

    shown = (await cli([*TRIO_AGENT, "show", str(ledger)], env=env)).stdout.decode()
    assert "configuration (recorded by `trio-agent run`; `resume` uses it):" in shown
    assert "  model: gpt-4o-mini" in shown and "  api_key_env: MY_KEY" in shown
    assert "  max_steps: 7" in shown and "sk-mine" not in shown
    heads = re.findall(r"^== turn (\d) \((.+)\)$", shown, re.MULTILINE)
    assert [(n, label.rsplit(":", 1)[1]) for n, label in heads] == [
        ("1", "gpt-4o-mini"),
        ("2", "gpt-4o-mini"),
        ("3", "gpt-other"),
    ]


async def test_resume_of_an_applications_ledger_says_what_it_needs_and_adds_no_workspace_tools(
    loopback, tmp_path
):
    """Issue 35 (item 4): ``resume`` of a ledger an application wrote (no configuration
    recorded by ``run``) asked for --provider, --model and --workspace, and would have
    gone on with the workspace tools, which the session never had. It says what it
    needs (--agent, or --provider and --model), writes nothing until given it, and
    runs with a model alone: the workspace tools only with an explicit --workspace."""
    from trio_agent import Agent, JsonlStore
    from trio_agent.testing import ScriptedModel, scripted_response

    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "hi")]),
        store=JsonlStore(tmp_path),
        session_id="lib",
        metadata={"app": "mine"},
    )
    await agent.prompt("hello")
    await agent.aclose()
    ledger = tmp_path / "lib.jsonl"
    before = ledger.read_bytes()
    done = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "x"])
    assert done.returncode == 2
    error = " ".join(done.stderr.decode().split())
    assert (
        "session lib was not started by `trio-agent run` (its ledger records no run "
        "configuration: an application, or an older version, wrote it): pass --agent "
        "MODULE:NAME to go on with the application's agent, or --provider and --model to go "
        "on with a model alone, with no tools (and --workspace DIR for the workspace tools)"
    ) in error
    half = await cli([*TRIO_AGENT, "resume", str(ledger), "--provider", "openai", "--message", "x"])
    assert half.returncode == 2 and b"--provider and --model" in half.stderr
    sandboxed = [*TRIO_AGENT, "resume", str(ledger), "--provider", "openai", "--model", "m"]
    refused = await cli([*sandboxed, "--sandbox", "none", "--message", "x"])
    assert refused.returncode == 2 and b"they need --workspace DIR" in refused.stderr
    assert ledger.read_bytes() == before and not loopback.requests

    base = [*sandboxed, "--base-url", f"{loopback.url}/v1"]
    loopback.replies += [Reply(body=text_stream("alone")), Reply(body=text_stream("tooled"))]
    alone = await cli([*base, "--message", "go on"])
    assert alone.returncode == 0, alone.stderr
    assert "tools" not in loopback.requests[0].json()  # a model alone: nothing offered
    assert b"no workspace: no workspace tools (pass --workspace DIR for them)" in alone.stdout
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tooled = await cli([*base, "--workspace", str(workspace), "--message", "and on"])
    assert tooled.returncode == 0, tooled.stderr
    offered = {t["function"]["name"] for t in loopback.requests[1].json()["tools"]}
    assert {"read_file", "write_file", "run"} <= offered
    shown = await cli([*TRIO_AGENT, "show", str(ledger)])
    text = shown.stdout.decode()
    assert (
        "configuration: none recorded by `trio-agent run` (resume needs --agent MODULE:NAME, "
        "or --provider and --model: with no tools but --workspace's)"
    ) in text
    assert 'metadata: {"app":"mine"}' in text


async def test_a_key_variable_named_by_the_ledger_is_said_to_come_from_it(loopback, tmp_path):
    ledger = tmp_path / "k.jsonl"
    loopback.replies.append(Reply(body=text_stream("hi")))
    first = await cli(
        command(loopback, tmp_path, "run", "--api-key-env", "MY_KEY", "--ledger", str(ledger), "x"),
        env={**BASE_ENV, "MY_KEY": "sk-mine"},
    )
    assert first.returncode == 0, first.stderr
    before = ledger.read_bytes()
    recorded = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "y"], env=ENV)
    assert recorded.returncode == 2
    error = recorded.stderr.decode()
    assert "MY_KEY (named by the ledger's recorded configuration) is not set" in error
    assert "--api-key-env)" not in error and "OPENAI_API_KEY" not in error
    flagged = await cli(
        [*TRIO_AGENT, "resume", str(ledger), "--api-key-env", "OTHER_KEY", "--message", "y"],
        env={**BASE_ENV, "MY_KEY": "sk-mine"},
    )
    assert flagged.returncode == 2
    assert "OTHER_KEY (named by --api-key-env) is not set" in flagged.stderr.decode()
    assert ledger.read_bytes() == before and len(loopback.requests) == 1


async def test_switching_provider_on_resume_drops_the_recorded_provider_settings(
    loopback, tmp_path
):
    ledger = tmp_path / "p.jsonl"
    loopback.replies.append(Reply(body=text_stream("hi")))
    done = await cli(command(loopback, tmp_path, "run", "--ledger", str(ledger), "hello"))
    assert done.returncode == 0, done.stderr
    switched = await cli(
        [*TRIO_AGENT, "resume", str(ledger), "--provider", "anthropic", "--message", "x"],
        env={**ENV, "ANTHROPIC_API_KEY": "sk-ant"},
    )
    assert switched.returncode == 2
    assert "pass --model" in switched.stderr.decode()


async def test_resume_without_a_message_refuses_when_no_turn_was_cut(loopback, tmp_path):
    ledger = tmp_path / "done.jsonl"
    loopback.replies.append(Reply(body=text_stream("complete")))
    done = await cli(command(loopback, tmp_path, "run", "--ledger", str(ledger), "hello"))
    assert done.returncode == 0, done.stderr
    before = ledger.read_bytes()
    for env in (ENV, BASE_ENV):  # without a key too: that is not what is wrong
        refused = await cli([*TRIO_AGENT, "resume", str(ledger)], env=env)
        assert refused.returncode == 2
        error = refused.stderr.decode()
        assert error.startswith("usage: trio-agent resume")
        assert "nothing to continue in done (the model owes no reply)" in error
        assert "pass --message TEXT" in error and "API key" not in error
        assert ledger.read_bytes() == before  # nothing written, not even session/closed
    assert turn_starts(ledger) == 1 and len(loopback.requests) == 1


async def test_resume_without_a_message_refuses_a_turn_that_ended_without_interruption(
    loopback, tmp_path
):
    """A turn that ended max_steps after a call leaves the model owing a reply, but
    no interruption left it so: resume without --message refuses, writing nothing."""
    ledger = tmp_path / "steps.jsonl"
    loopback.replies.append(
        Reply(body=call_stream("c1", "write_file", {"path": "a.txt", "content": "a"}))
    )
    done = await cli(
        command(
            loopback,
            tmp_path,
            "run",
            "--approve",
            "auto",
            "--max-steps",
            "1",
            "--ledger",
            str(ledger),
            "go",
        )
    )
    assert done.returncode == 1, done.stderr
    assert type(derive(records(ledger)).messages[-1]).__name__ == "ToolResultMessage"
    before = ledger.read_bytes()
    refused = await cli([*TRIO_AGENT, "resume", str(ledger)])
    assert refused.returncode == 2
    error = refused.stderr.decode()
    assert "nothing to continue in steps (turn 1 ended max_steps, not by an interruption)" in (
        error
    )
    assert "pass --message TEXT" in error
    assert ledger.read_bytes() == before and len(loopback.requests) == 1


async def _run_cut_mid_stream(loopback, tmp_path, name: str, sig: int) -> tuple[Path, int]:
    """``run --ledger`` on a stream that hangs after its first text, sent ``sig`` once
    that text is printed; the ledger and the exit code."""
    import subprocess

    ledger = tmp_path / name
    body = text_stream("thinking", " very", " hard")
    loopback.replies.append(Reply(body=body, hang_after=body.index(b" very")))
    process = await trio.lowlevel.open_process(
        command(loopback, tmp_path, "run", "--ledger", str(ledger), "think about it"),
        stdout=subprocess.PIPE,
        env=ENV,
    )
    seen = b""
    with trio.fail_after(120):  # a hang guard: a CLI process takes seconds on a loaded machine
        while b"thinking" not in seen:
            seen += await process.stdout.receive_some()
        process.send_signal(sig)
        code = await process.wait()
    await process.stdout.aclose()
    return ledger, code


async def test_resume_without_a_message_continues_a_turn_cut_by_a_crash(loopback, tmp_path):
    import signal

    # SIGKILL: no cleanup, the turn is left open
    ledger, _ = await _run_cut_mid_stream(loopback, tmp_path, "crash.jsonl", signal.SIGKILL)
    assert derive(records(ledger)).open_turn == 1

    loopback.replies.append(Reply(body=text_stream("the answer")))
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger)])
    assert resumed.returncode == 0, resumed.stderr
    assert b"the answer" in resumed.stdout
    assert loopback.requests[-1].json()["messages"][-1]["content"] == "think about it"
    ends = [r.end.reason for r in records(ledger) if r.kind == "turn/end"]
    assert ends == ["interrupted", "completed"]


async def test_resume_without_a_message_continues_a_turn_cut_by_ctrl_c(loopback, tmp_path):
    import signal

    ledger, code = await _run_cut_mid_stream(loopback, tmp_path, "cut.jsonl", signal.SIGINT)
    assert code == 130

    loopback.replies.append(Reply(body=text_stream("the answer")))
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger)])  # no flags, no message
    assert resumed.returncode == 0, resumed.stderr
    assert b"the answer" in resumed.stdout
    sent = loopback.requests[-1].json()["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]  # no new (empty) user message
    assert sent[-1]["content"] == "think about it"
    kinds = [r.kind for r in records(ledger)]
    assert kinds.count("turn/start") == 2 and kinds.count("message") == 2  # user + answer


async def test_ca_file_trusts_a_private_ca_for_the_provider_and_is_recorded(tmp_path):
    """Issue 35 (item 4): only ``SSL_CERT_FILE`` could make the command line trust a
    provider behind a private CA. ``--ca-file PATH`` does (a loopback server behind
    TLS, its certificate from a throwaway CA): without it the certificate is refused;
    with it the run goes through, the absolute path is recorded and ``resume`` trusts
    it again; a missing file or one that is no PEM is a usage error naming it."""
    import ssl

    import trustme
    from loopback import Loopback

    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    pem = tmp_path / "private-ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    server = Loopback(tls=server_context)
    ledger = tmp_path / "tls.jsonl"
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        base = [*TRIO_AGENT, "run", "--provider", "openai", "--model", "m", "--workspace"]
        base += [str(tmp_path), "--base-url", f"{server.url}/v1", "--retries", "0"]
        refused = await cli([*base, "hello"])
        assert refused.returncode == 1 and b"CERTIFICATE_VERIFY_FAILED" in refused.stdout
        server.replies += [Reply(body=text_stream("trusted")), Reply(body=text_stream("again"))]
        trusted = await cli(
            [*base, "--ca-file", str(pem.relative_to(tmp_path)), "--ledger", str(ledger), "hello"],
            cwd=tmp_path,
        )
        assert trusted.returncode == 0, trusted.stderr
        assert "trusted" in trusted.stdout.decode() and len(server.requests) == 1
        config = records(ledger)[0].metadata["cli"]
        assert config["ca_file"] == str(pem)  # absolute, as given from tmp_path
        resumed = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "more"])
        assert resumed.returncode == 0, resumed.stderr
        assert len(server.requests) == 2
        nursery.cancel_scope.cancel()
    missing = await cli([*base, "--ca-file", str(tmp_path / "none.pem"), "x"])
    assert missing.returncode == 2
    assert f"--ca-file {tmp_path / 'none.pem'}: no such file" in missing.stderr.decode()
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    bad = await cli([*base, "--ca-file", str(junk), "x"])
    assert bad.returncode == 2
    assert f"--ca-file {junk}: not a PEM file of CA certificates" in bad.stderr.decode()
