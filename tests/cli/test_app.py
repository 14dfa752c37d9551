"""``--agent MODULE:NAME`` (issue 35, item 4): ``trio-agent run`` and ``resume`` run an
application's own agent (an ``Agent``, or a session factory), imported from the
current directory, each a real ``trio-agent`` subprocess against the loopback
provider server."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from cli_runner import ENV, TRIO_AGENT, call_stream, cli, text_stream
from loopback import Reply

from trio_agent.ledger import derive
from trio_agent.stores import parse_jsonl

# The console script, as a user runs it: unlike ``python -m``, it does not put the
# current directory on the path, so finding the module there is the CLI's doing.
SCRIPT = [str(Path(sys.executable).parent / "trio-agent")]

APP = '''
import os

from trio_agent import Agent, tool
from trio_agent.providers.openai import OpenAIChatModel


@tool
async def shout(text: str) -> str:
    """Shout the text."""
    return text.upper()


@tool(requires_approval=True)
async def launch(target: str) -> str:
    """Launch at a target (needs a yes)."""
    with open("launched.txt", "a") as file:
        file.write(target + "\\n")
    return f"launched at {target}"


def model():
    return OpenAIChatModel("app-model", api_key="sk-app", base_url=os.environ["APP_BASE_URL"])


agent = Agent(
    model=model(), tools=[shout, launch], system="You are the app.", metadata={"app": "demo"}
)


def make(store, session_id, new):
    """A session factory: an Agent for a new session, an awaitable for a recorded one."""
    if new:
        return Agent(
            model=model(), tools=[shout], store=store, session_id=session_id,
            metadata={"made": "by make"},
        )
    return Agent.resume(store, session_id, model=model(), tools=[shout])


def bad(store, session_id, new):
    return 3


def two(a, b):
    return None


number = 42
'''


def write_app(where: Path, text: str = APP) -> None:
    (where / "app.py").write_text(textwrap.dedent(text))


def app_env(loopback) -> dict[str, str]:
    return {**ENV, "APP_BASE_URL": f"{loopback.url}/v1"}


def offered(request) -> set[str]:
    return {t["function"]["name"] for t in request.json().get("tools", [])}


def metadata(ledger: Path) -> dict:
    derived = derive(parse_jsonl(ledger.stem, ledger.read_bytes()).records)
    return dict(derived.metadata or {})


async def test_run_uses_the_agents_model_and_tools_and_resume_needs_the_agent_again(
    loopback, tmp_path
):
    """Issue 35 (item 4): ``run`` offered only the workspace tools, so an application's
    agent could not be run from the command line. ``--agent app:agent`` runs the
    agent as it is (its model, its tools, no workspace tool), records the session
    with ``MODULE:NAME`` beside the agent's own metadata, and a ``resume`` without
    it says exactly what to pass; with it, the session goes on with the agent's
    options and its recorded system prompt."""
    write_app(tmp_path)
    env = app_env(loopback)
    ledger = tmp_path / "sessions" / "s.jsonl"
    loopback.replies += [
        Reply(body=call_stream("call_1", "shout", {"text": "hello"})),
        Reply(body=text_stream("I shouted.")),
    ]
    done = await cli(
        [*SCRIPT, "run", "--agent", "app:agent", "--ledger", str(ledger), "say hello"],
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr.decode()
    first, second = loopback.requests
    assert offered(first) == {"shout", "launch"}  # the agent's tools, no workspace tool
    assert first.json()["model"] == "app-model"
    assert first.json()["messages"][0] == {"role": "system", "content": "You are the app."}
    assert second.json()["messages"][-1]["content"] == "HELLO"
    assert "I shouted." in done.stdout.decode()
    assert metadata(ledger) == {"app": "demo", "cli": {"format": 1, "agent": "app:agent"}}
    shown = await cli([*TRIO_AGENT, "show", str(ledger)])
    assert (
        "configuration (recorded by `trio-agent run`; `resume` uses it):\n  agent: app:agent\n"
        in (shown.stdout.decode())
    )

    before = ledger.read_bytes()
    refused = await cli(
        [*SCRIPT, "resume", str(ledger), "--message", "again"], env=env, cwd=tmp_path
    )
    assert refused.returncode == 2
    assert refused.stderr.decode().endswith(
        "error: this session was run with --agent app:agent; pass --agent app:agent\n"
    )
    assert ledger.read_bytes() == before and len(loopback.requests) == 2

    loopback.replies.append(Reply(body=text_stream("again, then")))
    resumed = await cli(
        [*SCRIPT, "resume", str(ledger), "--agent", "app:agent", "--message", "again"],
        env=env,
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    third = loopback.requests[2]
    assert offered(third) == {"shout", "launch"}
    assert third.json()["messages"][0]["content"] == "You are the app."
    assert [m["role"] for m in third.json()["messages"]][1:] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert derive(parse_jsonl("s", ledger.read_bytes()).records).turns == 2


async def test_the_agents_own_approvals_are_decided_as_approve_says(loopback, tmp_path):
    """With ``--agent``, ``--approve`` decides the calls the agent's own policy holds
    (here a tool with ``requires_approval=True``): ``deny`` rejects them; ``defer``
    leaves them for ``trio-agent approve`` and a ``resume --agent`` runs them."""
    write_app(tmp_path)
    env = app_env(loopback)
    loopback.replies += [
        Reply(body=call_stream("call_1", "launch", {"target": "moon"})),
        Reply(body=text_stream("not launched")),
    ]
    denied = await cli(
        [*SCRIPT, "run", "--agent", "app:agent", "--approve", "deny", "launch"],
        env=env,
        cwd=tmp_path,
    )
    assert denied.returncode == 0, denied.stderr.decode()
    answer = loopback.requests[1].json()["messages"][-1]
    assert answer["role"] == "tool" and "denied by the command line" in answer["content"]
    assert not (tmp_path / "launched.txt").exists()

    ledger = tmp_path / "held.jsonl"
    loopback.replies.append(Reply(body=call_stream("call_2", "launch", {"target": "mars"})))
    run = [*SCRIPT, "run", "--agent", "app:agent", "--approve", "defer"]
    deferred = await cli([*run, "--ledger", str(ledger), "launch"], env=env, cwd=tmp_path)
    assert deferred.returncode == 3, deferred.stderr.decode()
    approved = await cli([*SCRIPT, "approve", str(ledger), "call_2", "--by", "me"], cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr.decode()
    loopback.replies.append(Reply(body=text_stream("launched")))
    resumed = await cli(
        [*SCRIPT, "resume", str(ledger), "--agent", "app:agent"], env=env, cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert (tmp_path / "launched.txt").read_text() == "mars\n"
    assert loopback.requests[-1].json()["messages"][-1]["content"] == "launched at mars"


async def test_a_session_factory_makes_and_resumes_sessions_and_needs_a_ledger(loopback, tmp_path):
    """``--agent`` may name a session factory ``(store, session_id, new) -> Agent``
    (returning an Agent, or an awaitable of one): ``run`` calls it for a new
    session in the ledger's store, ``resume`` for the recorded one. Without a
    ledger there is no store to give it: a usage error says so; one that returns
    something else is named."""
    write_app(tmp_path)
    env = app_env(loopback)
    alone = await cli([*SCRIPT, "run", "--agent", "app:make", "x"], env=env, cwd=tmp_path)
    assert alone.returncode == 2
    assert (
        "--agent app:make is a session factory (store, session_id, new): it makes sessions "
        "recorded in the store it is given, so `run` needs --ledger FILE.jsonl (or name an "
        "Agent)"
    ) in " ".join(alone.stderr.decode().split())
    ledger = tmp_path / "f.jsonl"
    loopback.replies += [Reply(body=text_stream("made")), Reply(body=text_stream("again"))]
    made = await cli(
        [*SCRIPT, "run", "--agent", "app:make", "--ledger", str(ledger), "hi"],
        env=env,
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr.decode()
    assert offered(loopback.requests[0]) == {"shout"}
    assert metadata(ledger) == {"made": "by make"}  # the factory's own session
    resumed = await cli(
        [*SCRIPT, "resume", str(ledger), "--agent", "app:make", "--message", "more"],
        env=env,
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert [m["content"] for m in loopback.requests[1].json()["messages"]] == [
        "hi",
        "made",
        "more",
    ]
    other = tmp_path / "g.jsonl"
    bad = await cli(
        [*SCRIPT, "run", "--agent", "app:bad", "--ledger", str(other), "hi"],
        env=env,
        cwd=tmp_path,
    )
    assert bad.returncode == 2
    assert b"--agent app:bad returned an int, not an Agent, for session g" in bad.stderr
    assert not other.exists() and len(loopback.requests) == 2


async def test_a_wrong_agent_reference_is_a_usage_error_saying_what_to_write(tmp_path):
    """Each way ``--agent`` can be wrong is a usage error (exit 2, no traceback)
    that says what is wrong and what to write, before anything runs; an error the
    module raises as it is imported is named with where the module raised it."""
    write_app(tmp_path)
    env = {**ENV, "APP_BASE_URL": "http://127.0.0.1:9/v1"}  # never reached
    (tmp_path / "broken.py").write_text("x = 1\nraise RuntimeError('no config file')\n")
    (tmp_path / "needy.py").write_text("import not_installed_anywhere\n")
    (tmp_path / "settings.py").write_text("import os\nHOME = os.environ['APP_HOME']\n")
    cases = {
        "nowhere:agent": f"--agent nowhere:agent: no module named 'nowhere' in {tmp_path} or "
        "on the Python path",
        "app:missing": f"--agent app:missing: module app ({tmp_path / 'app.py'}) has no "
        "'missing' (its Agents: agent)",
        "app:number": "--agent app:number is an int: it must be an Agent, or a session "
        "factory taking (store, session_id, new) and returning one",
        "app:two": "--agent app:two is a function: it must be an Agent",
        "app:Agent": "--agent app:Agent is the class Agent: it must be an Agent",
        "broken:agent": "--agent broken:agent: importing broken raised RuntimeError: no "
        f"config file (at {tmp_path / 'broken.py'}:2)",
        "needy:agent": "--agent needy:agent: importing needy failed: No module named "
        "'not_installed_anywhere' (at",
        "settings:agent": "--agent settings:agent: importing settings raised KeyError: "
        f"'APP_HOME' (at {tmp_path / 'settings.py'}:2)",
        "app.py:agent": "argument --agent: 'app.py:agent' is not MODULE:NAME (the module's "
        "name, not its file: app:agent for app.py)",
        "app": "argument --agent: 'app' is not MODULE:NAME",
    }
    for reference, says in cases.items():
        done = await cli([*SCRIPT, "run", "--agent", reference, "x"], env=env, cwd=tmp_path)
        error = " ".join(done.stderr.decode().split())
        assert done.returncode == 2, (reference, error)
        assert says in error, (reference, error)
        assert "Traceback" not in error
    run = [*SCRIPT, "run", "--agent", "app:agent", "--provider", "openai", "--model", "m"]
    flags = await cli(
        [*run, "--workspace", ".", "--mcp", "x", "--system", "s", "task"], cwd=tmp_path
    )
    assert flags.returncode == 2
    assert (
        "--agent app:agent brings its own model, tools and options, so --provider, --model, "
        "--system, --workspace, --mcp/--mcp-http cannot be used beside it (drop them, or set "
        "this in the agent)"
    ) in " ".join(flags.stderr.decode().split())
    resumed = await cli(
        [*SCRIPT, "resume", "x.jsonl", "--agent", "app:agent", "--model", "m"], cwd=tmp_path
    )
    assert resumed.returncode == 2 and b"so --model cannot be used beside it" in resumed.stderr
    needed = await cli([*SCRIPT, "run", "task"], cwd=tmp_path)
    assert needed.returncode == 2
    assert (
        "run needs a model and a workspace, or your own agent (--agent MODULE:NAME): pass "
        "--provider, --model, --workspace"
    ) in " ".join(needed.stderr.decode().split())


def test_the_help_says_what_agent_takes():
    """The help of run, resume and worker describes ``--agent``."""
    from trio_agent.cli._parser import build_parser

    parsers = build_parser("0")
    for name in ("run", "resume", "worker"):
        text = " ".join(parsers.commands[name].format_help().split())
        assert "--agent MODULE:NAME run your own agent instead of a model" in text, name
        assert "(store, session_id, new) -> Agent" in text, name
    resume = " ".join(parsers.commands["resume"].format_help().split())
    assert "A ledger `run` did not write (an application's) records no configuration" in resume


async def test_a_factory_that_raises_is_named_as_the_applications_failure(tmp_path):
    """Issue 35 (a review after it): a session factory raising ``ValueError`` printed
    only "trio-agent: factory failed" with the usage error's exit 2, naming neither
    the factory nor where it raised, while one raising ``TypeError`` printed a
    traceback. Every error of the factory is the application's: exit 1, named with
    its type and the file and line it came from."""
    (tmp_path / "factories.py").write_text(
        "def by_value(store, session_id, new):\n"
        "    raise ValueError('no tenant for this session')\n"
        "\n"
        "async def by_type(store, session_id, new):\n"
        "    raise TypeError('bad settings')\n"
    )
    for name, error, line in (
        ("by_value", "ValueError: no tenant for this session", 2),
        ("by_type", "TypeError: bad settings", 5),
    ):
        done = await cli(
            [*SCRIPT, "run", "--agent", f"factories:{name}", "--ledger", "s.jsonl", "x"],
            cwd=tmp_path,
        )
        said = " ".join(done.stderr.decode().split())
        assert done.returncode == 1, said
        assert (
            f"trio-agent: --agent factories:{name} raised {error} "
            f"(at {tmp_path / 'factories.py'}:{line}), making the agent of session"
        ) in said
        assert "Traceback" not in said
