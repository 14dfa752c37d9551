"""The run tool's sandbox (bubblewrap): escape attempts made from inside must fail,
limits end runaway commands with a clear result, nothing outlives a command,
and the modes and options are checked. CI installs bubblewrap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from helpers import wait_unmarked

from trio_agent.workspace import Workspace, WorkspaceError, _sandbox


@pytest.fixture
def box(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("outside secret")
    return Workspace(root, sandbox="bwrap", run_seconds=20, grace_seconds=0.5)


def _failed(result: str) -> bool:
    return not result.startswith("[exit code 0]")


async def test_the_system_secrets_and_the_parent_are_out_of_reach(box, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret")
    home = Path.home()
    for command in (
        "cat /etc/shadow",
        f"ls {home}/.ssh",
        f"cat {home}/.ssh/id_rsa",
        f"cat /proc/{os.getpid()}/environ",  # the agent: not in the sandbox's pid namespace
        f"cat {box.root.parent}/outside.txt",
    ):
        result = await box.run(command)
        assert _failed(result), (command, result)
        assert "sk-parent-secret" not in result and "outside secret" not in result
    # pid 1 is the sandbox's own: its environment is the command's explicit one
    env = await box.run("env; cat /proc/1/environ; cat /proc/self/environ")
    assert "sk-parent-secret" not in env and "OPENAI_API_KEY" not in env
    listed = (await box.run("ls /")).split("\n", 1)[1].split()
    assert {"usr", "etc", "proc", "dev", "tmp", box.root.parts[1]} <= set(listed)
    assert not {"root", "home", "var", "srv", "mnt"} & set(listed) - {box.root.parts[1]}
    passwd = await box.run("cat /etc/passwd")
    assert passwd.count("\n") == 2  # the result's first line, and the one user


async def test_nothing_is_written_outside_the_workspace(box):
    out = box.root.parent
    attempts = [
        f"echo x > {out}/evil.txt",
        "echo x > ../evil.txt",
        f"ln -s {out} link && echo x > link/evil.txt",
        f"ln {out}/outside.txt hard",
        "echo x > /usr/evil.txt",
        "echo x > /etc/evil.txt",
    ]
    for command in attempts:
        await box.run(command)
    assert not (out / "evil.txt").exists() and not Path("/usr/evil.txt").exists()  # noqa: ASYNC240
    assert not (box.root / "hard").exists()
    assert (out / "outside.txt").read_text() == "outside secret"
    # inside the workspace, at its own path: what a command writes is there
    assert (await box.run("pwd; echo inside > made.txt")).split("\n")[1] == str(box.root)
    assert (box.root / "made.txt").read_text() == "inside\n"
    # its /tmp is its own, gone with the command
    await box.run("echo x > /tmp/trio-agent-sandbox-probe")
    assert not Path("/tmp/trio-agent-sandbox-probe").exists()  # noqa: ASYNC240


async def _serve_one(task_status=trio.TASK_STATUS_IGNORED):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    async with listeners[0]:
        while True:
            stream = await listeners[0].accept()
            async with stream:
                await stream.send_all(b"hello from outside\n")


async def test_the_network_is_off_unless_asked(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    probe = (
        'python3 -c "import socket, sys; print(socket.create_connection('
        "('127.0.0.1', int(sys.argv[1])), 2).recv(100))\""
    )
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_serve_one)
        closed = Workspace(root, sandbox="bwrap")
        result = await closed.run(f"{probe} {port}")
        assert _failed(result) and "hello from outside" not in result
        opened = Workspace(root, sandbox="bwrap", network=True)
        result = await opened.run(f"{probe} {port}")
        assert result.startswith("[exit code 0]") and "hello from outside" in result
        nursery.cancel_scope.cancel()


async def test_a_scrubbed_daemon_does_not_survive_the_command(box):
    result = await box.run("setsid env -i sh -c 'sleep 1311 &'; sleep 0.2; echo started")
    assert "started" in result
    assert await wait_unmarked("sleep 1311", seconds=3) == []


async def test_a_fork_bomb_ends_with_a_clear_result_and_the_agent_goes_on(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    box = Workspace(root, sandbox="bwrap", run_seconds=3, grace_seconds=0.2, max_processes=64)
    with trio.fail_after(30):
        result = await box.run("b() { b | b & }; b; sleep 1312")
    assert "process limit refused" in result, result[:300]
    assert await wait_unmarked("sleep 1312", seconds=3) == []
    assert (await box.run("echo still here")).startswith("[exit code 0]\nstill here")


async def test_a_4_gb_allocation_fails_clearly(box):
    result = await box.run("python3 -c 'x = bytearray(4 * 1024**3); print(len(x))'")
    assert result.startswith("[exit code 1]") and "MemoryError" in result
    assert (await box.run("echo still here")).startswith("[exit code 0]\nstill here")


async def test_killing_the_agent_leaves_no_sandboxed_process(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    script = (
        "import trio\n"
        "from trio_agent.workspace import Workspace\n"
        f"w = Workspace({str(root)!r}, sandbox='bwrap')\n"
        "trio.run(w.run, 'echo started > started; sleep 1313 & sleep 1313')\n"
    )
    agent = subprocess.Popen([sys.executable, "-c", script])  # noqa: ASYNC220 (killed below)
    try:
        with trio.fail_after(20):
            while not (root / "started").exists():  # noqa: ASYNC110 (a file)
                await trio.sleep(0.05)
        assert len(await wait_unmarked("sleep 1313", seconds=0.5)) >= 2
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait()
    assert await wait_unmarked("sleep 1313", seconds=5) == []  # --die-with-parent


async def test_extra_paths_are_bound_read_only_or_read_write(tmp_path):
    root, shared, scratch = tmp_path / "ws", tmp_path / "shared", tmp_path / "scratch"
    for directory in (root, shared, scratch):
        directory.mkdir()
    (shared / "data.txt").write_text("shared data")
    box = Workspace(root, sandbox="bwrap", ro_paths=[shared], rw_paths=[scratch])
    assert "shared data" in await box.run(f"cat {shared}/data.txt")
    assert _failed(await box.run(f"echo x > {shared}/new.txt"))
    assert (await box.run(f"echo x > {scratch}/new.txt")).startswith("[exit code 0]")
    assert (scratch / "new.txt").read_text() == "x\n" and not (shared / "new.txt").exists()


def test_the_modes_and_options_are_checked(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="sandbox must be one of auto, bwrap, none"):
        Workspace(tmp_path, sandbox="docker")
    for bad in (["relative"], [str(tmp_path / "missing")], ["/"], "/usr"):
        with pytest.raises((ValueError, TypeError)):
            Workspace(tmp_path, ro_paths=bad)
    for system in ("/usr", "/etc", "/"):
        with pytest.raises(ValueError):
            Workspace(tmp_path, rw_paths=[system])
    with pytest.raises(ValueError, match="max_processes"):
        Workspace(tmp_path, max_processes=1)
    assert Workspace(tmp_path, sandbox="none").sandbox == "none"
    assert Workspace(tmp_path).sandbox == "bwrap"  # auto: installed here (CI installs it)
    tools = Workspace(tmp_path, network=True).tools()
    assert "bubblewrap sandbox" in tools.get("run").description
    assert "with network access" in tools.get("run").description


def test_auto_falls_back_with_a_warning_and_bwrap_refuses(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(_sandbox, "_probe", lambda: ("", "bubblewrap (bwrap) is not installed"))
    with caplog.at_level("WARNING", logger="trio_agent.tools"):
        workspace = Workspace(tmp_path)
    assert workspace.sandbox == "none" and "not installed" in caplog.text
    assert "unconfined" in workspace.tools().get("run").description
    with pytest.raises(WorkspaceError, match="sandbox='bwrap': bubblewrap"):
        Workspace(tmp_path, sandbox="bwrap")


async def test_the_cli_says_which_sandbox_is_in_force_and_refuses_a_missing_one(loopback, tmp_path):
    from cli_runner import ENV, cli, command, text_stream
    from loopback import Reply

    loopback.replies.append(Reply(body=text_stream("ok")))
    done = await cli(command(loopback, tmp_path, "run", "--allow-network", "hi"))
    assert done.returncode == 0, done.stderr
    first = done.stdout.decode().splitlines()[0]
    assert first.startswith("sandbox: bwrap") and "with network access" in first
    loopback.replies.append(Reply(body=text_stream("ok")))
    done = await cli(command(loopback, tmp_path, "run", "--sandbox", "none", "hi"))
    assert done.stdout.decode().startswith("sandbox: none - Commands run unconfined")
    no_bwrap = {**ENV, "PATH": "/nonexistent"}
    refused = await cli(command(loopback, tmp_path, "run", "--sandbox", "bwrap", "hi"), no_bwrap)
    assert refused.returncode == 2 and b"apt-get install bubblewrap" in refused.stderr


async def test_a_command_asking_for_the_network_waits_for_approval_then_has_it(tmp_path):
    from helpers import call

    from trio_agent import Agent
    from trio_agent.testing import ScriptedModel, scripted_response

    root = tmp_path / "ws"
    root.mkdir()
    workspace = Workspace(root, sandbox="bwrap", network="ask")
    probe = (
        'python3 -c "import socket, sys; print(socket.create_connection('
        "('127.0.0.1', int(sys.argv[1])), 2).recv(100))\""
    )
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_serve_one)
        script = [
            scripted_response(
                "r1",
                [
                    call("run", "offline", {"command": f"{probe} {port}"}),
                    call("run", "online", {"command": f"{probe} {port}", "network": True}),
                ],
            ),
            scripted_response("r2", "waiting"),
            scripted_response("r3", "done"),
        ]
        agent = Agent(model=ScriptedModel(script), tools=workspace.tools())
        first = await agent.prompt("connect")
        assert [c.id for c in agent.pending_approvals] == ["online"]  # only it waits
        offline = next(m for m in first.messages if getattr(m, "tool_call_id", "") == "offline")
        assert "hello from outside" not in str(offline.content)
        await agent.approve("online")
        second = await agent.prompt()
        online = next(m for m in second.messages if getattr(m, "tool_call_id", "") == "online")
        assert "hello from outside" in str(online.content)
        nursery.cancel_scope.cancel()
    tools = workspace.tools()
    assert tools.get("run").needs_approval({"command": "ls", "network": True})
    assert not tools.get("run").needs_approval({"command": "ls"})
    assert (
        "network"
        not in Workspace(root, sandbox="bwrap", network=True)
        .tools()
        .get("run")
        .parameters["properties"]
    )


async def test_an_approval_rule_that_fails_ends_the_turn_as_a_hook_error():
    from helpers import call

    from trio_agent import Agent, tool
    from trio_agent.testing import ScriptedModel, scripted_response

    @tool(requires_approval=lambda arguments: "yes")
    async def odd(x: int) -> int:
        """Returns x."""
        return x

    with pytest.raises(TypeError, match="requires_approval"):
        tool(requires_approval="always")(odd.function)
    script = [scripted_response("r1", [call("odd", "c1", {"x": 1})]), scripted_response("r2", "")]
    result = await Agent(model=ScriptedModel(script), tools=[odd]).prompt("go")
    assert result.end.reason == "failed" and result.end.code == "HOOK_ERROR"
    assert "requires_approval" in result.end.detail
