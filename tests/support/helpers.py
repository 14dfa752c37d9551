"""Small builders shared by the tests."""

from __future__ import annotations

import os
import ssl
from typing import Any

import msgspec
import trio
import trustme

from trio_agent import (
    Agent,
    AgentRun,
    Event,
    RunFinished,
    RunResult,
    ToolCall,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.testing import ScriptedModel, ScriptedResponse, assert_run_invariants


def user(content: str = "What is 20 + 22?", id: str = "user-001") -> UserMessage:
    return UserMessage(id=id, content=content)


def call(name: str, id: str, arguments: dict[str, Any] | None = None) -> ToolCall:
    return ToolCall(id=id, name=name, arguments={} if arguments is None else arguments)


@tool
async def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


def agent_with(script: list[Any], **options: Any) -> tuple[Agent, ScriptedModel]:
    """An ``Agent`` on a ``ScriptedModel`` of ``script`` (with ``add`` unless ``tools=``
    is given), and the model."""
    model = ScriptedModel(script)
    options.setdefault("tools", ToolRegistry([add]))
    return Agent(model=model, **options), model


def make_echo(log: list[str]):
    @tool
    async def echo(text: str) -> str:
        """Echo the text back."""
        log.append(text)
        return text

    return echo


async def settle(run: AgentRun) -> tuple[list[Event], RunResult]:
    """Consume every event of ``run``; return them and the result."""
    events: list[Event] = []
    async with run:
        async for event in run:
            events.append(event)
    assert run.result is not None
    return events, run.result


def start(
    script: list[ScriptedResponse | BaseException],
    *,
    messages: list | None = None,
    tools: ToolRegistry | None = None,
    max_steps: int = 8,
    **options: Any,
) -> tuple[AgentRun, ScriptedModel]:
    model = ScriptedModel(script)
    run = run_agent_loop(
        messages=[user()] if messages is None else messages,
        model=model,
        tools=ToolRegistry([add]) if tools is None else tools,
        max_steps=max_steps,
        **options,
    )
    return run, model


def assert_stream_shape(events: list[Event], result: RunResult) -> None:
    """Contiguous sequences from 0, one run.finished, last, equal to the result;
    and everything ``assert_run_invariants`` (our exported checker) promises."""
    assert_run_invariants(events, result)
    assert [e.sequence for e in events] == list(range(len(events)))
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert len(finished) == 1 and events[-1] is finished[0]
    assert finished[0].result == result
    # every event survives a JSON round trip unchanged
    for event in events:
        assert msgspec.json.decode(msgspec.json.encode(event), type=Event) == event


def tls_contexts(host: str = "localhost") -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A throwaway CA's server context (a certificate for ``host``) and a client
    context that trusts that CA and nothing else."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(host).configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return server_context, client_context


def marked_processes(marker: str) -> list[int]:
    """Live (not zombie) processes of this machine whose command line holds
    ``marker`` (a sandboxed command's processes too: they are visible outside)."""
    from trio_agent.workspace._process import live_processes

    wanted = marker.encode()
    return [
        pid
        for pid in live_processes("cmdline", lambda data: wanted in data.replace(b"\0", b" "))
        if pid != os.getpid()
    ]


def sleeping(seconds: str) -> list[int]:
    """Live processes of this machine whose whole command line is ``sleep SECONDS``
    (the sleeps themselves, not the shells or scripts that name them)."""
    from trio_agent.workspace._process import live_processes

    wanted = f"sleep\0{seconds}\0".encode()
    return live_processes("cmdline", lambda data: data == wanted)


async def wait_unmarked(marker: str, seconds: float = 60.0) -> list[int]:
    """The processes still marked with ``marker`` after waiting up to ``seconds``
    for them to end (a bound that holds on a loaded machine: only a failing test
    waits this long)."""
    import time

    import trio

    deadline = time.monotonic() + seconds
    while marked_processes(marker) and time.monotonic() < deadline:  # noqa: ASYNC110
        await trio.sleep(0.05)
    return marked_processes(marker)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


class TaskSteps(trio.abc.Instrument):
    """Counts the steps of one task (the times trio's scheduler ran it): a block of
    that task that adds none did not yield."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task, self.steps = task, 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def children_in_order(order: list[int], count: int) -> None:
    """Start ``count`` tasks in a nursery, each appending its number to ``order``
    after one checkpoint: the order trio's scheduler ran them in."""

    async def child(n: int) -> None:
        await trio.lowlevel.checkpoint()
        order.append(n)

    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(child, n)
