"""The run tool's sandbox (bubblewrap): escape attempts made from inside must fail,
limits end runaway commands with a clear result, nothing outlives a command, and the
modes and options are checked. CI installs bubblewrap and runs the suite as root,
where most of issue 23's review mattered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from helpers import sleeping, wait_unmarked
from waiting import WAIT, wait_until

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
    assert await wait_unmarked("sleep 1311") == []


async def test_a_fork_bomb_ends_with_a_clear_result_and_the_agent_goes_on(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    box = Workspace(root, sandbox="bwrap", run_seconds=3, grace_seconds=0.2, max_processes=64)
    with trio.fail_after(WAIT):
        result = await box.run("b() { b | b & }; b; sleep 1312")
    assert "process limit refused" in result, result[:300]
    assert await wait_unmarked("sleep 1312") == []
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
        await wait_until(lambda: len(sleeping("1313")) >= 2)  # both run, sandboxed
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait()
    assert await wait_unmarked("sleep 1313") == []  # --die-with-parent


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


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def test_a_command_has_no_capabilities_and_cannot_remount_or_tune_the_kernel(root):
    """Issue 23 (review of the sandbox): a command kept capabilities (the suite runs as root in CI):
    it could remount /usr read-write or write kernel settings under /proc/sys."""
    box = Workspace(root, sandbox="bwrap")
    caps = await box.run("grep CapEff /proc/self/status")
    assert "0000000000000000" in caps
    assert "[exit code 0]" not in await box.run("mount -o remount,rw,bind /usr")
    # writing the value it has: the host is unchanged even if the write got through
    write = await box.run(
        "v=$(cat /proc/sys/kernel/printk_ratelimit_burst); "
        "echo $v > /proc/sys/kernel/printk_ratelimit_burst"
    )
    assert "Read-only file system" in write
    assert "[exit code 0]" not in await box.run("echo x > /usr/trio-agent-review-escape")


async def test_a_read_only_path_inside_the_workspace_stays_read_only(root):
    """Issue 23 (review of the sandbox): an ``ro_paths`` entry inside the workspace was writable,
    under the workspace's own read-write bind."""
    (root / "vendor").mkdir()
    (root / "vendor" / "lib.txt").write_text("pristine")
    box = Workspace(root, sandbox="bwrap", ro_paths=[root / "vendor"])
    assert "[exit code 0]" not in await box.run("echo TAMPERED > vendor/lib.txt")
    assert (root / "vendor" / "lib.txt").read_text() == "pristine"
    assert (await box.run("echo fine > other.txt")).startswith("[exit code 0]")


@pytest.mark.parametrize("path", ["/proc", "/sys", "/dev", "/run", "/proc/1"])
def test_the_machine_itself_is_never_bound(root, path):
    """Issue 23 (review of the sandbox): /proc, /sys, /dev or /run could be bound into the sandbox,
    which exposes the machine."""
    with pytest.raises(ValueError, match="would expose the machine"):
        Workspace(root, ro_paths=[path])


@pytest.mark.parametrize("path", ["/usr/local/bin", "/etc/cron.d", "/var", "/usr", "/home"])
def test_no_system_tree_is_made_writable(root, path):
    """Issue 23 (review of the sandbox): a system tree (/usr, /var, /etc/cron.d, /home) could be
    made writable with ``rw_paths``."""
    with pytest.raises(ValueError):
        Workspace(root, rw_paths=[path])


async def test_the_memory_limit_covers_tmp_and_the_whole_command(root):
    """Issue 23 (review of the sandbox): the memory limit did not cover the sandbox's /tmp and the
    whole command: a big file written there went past it."""
    # "wrote" only if the 300 MB reached /tmp whole. (Not "; echo wrote": which process the
    # kernel's OOM killer ends is its choice; a shell left alive echoes, as one did under load.)
    box = Workspace(root, sandbox="bwrap", max_memory_bytes=64 * 1024**2, run_seconds=60)
    result = await box.run("head -c 300000000 /dev/zero > /tmp/big && echo wrote")
    assert "memory limit ended" in result and "wrote" not in result
    assert (await box.run("echo still here")).startswith("[exit code 0]\nstill here")


def test_the_commands_cgroups_are_made_below_the_agents_own():
    """Issue 23 (review of the sandbox): the commands' cgroups were not made below the agent's own
    cgroup."""
    made = _sandbox.make_cgroups(_sandbox.Limits(64 * 1024**2, 32))
    assert made is not None  # CI runs as root: cgroups can be made
    try:
        for controller, group in (("pids", made.pids), ("memory", made.memory)):
            if group is not None:
                assert group.parent == _sandbox._own_cgroup(controller)
    finally:
        _sandbox.remove_cgroups(made)
    assert all(not group.exists() for group in made.groups)


def test_the_sweep_leaves_a_live_agents_empty_cgroup_and_removes_a_dead_ones():
    """An agent starting up swept every empty ``trio-agent-*`` cgroup, among them
    one another live agent had just made for a command not yet in it: that
    command failed with exit 125 (``cgroup.procs: Directory nonexistent``), about
    3 commands in 300 while agents started beside each other, and the sandbox
    tests failed now and then on a loaded machine. Only a dead maker's groups go."""
    live = _sandbox.make_cgroups(_sandbox.Limits(64 * 1024**2, 32))
    assert live is not None  # CI runs as root: cgroups can be made
    dead_pid = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    orphans = []
    for group in live.groups:
        orphan = group.parent / f"trio-agent-{dead_pid}-{'0' * 12}"
        orphan.mkdir()
        orphans.append(orphan)
    try:
        _sandbox._sweep_cgroups()
        assert all(group.exists() for group in live.groups)
        assert not any(orphan.exists() for orphan in orphans)
    finally:
        _sandbox.remove_cgroups(live)
        for orphan in orphans:
            if orphan.exists():
                orphan.rmdir()


def test_a_forked_child_that_exits_leaves_the_identity_files(root):
    """Issue 23 (review of the sandbox): a forked child that exited ran the atexit hook that removed
    the sandbox's identity files, and the parent's next command failed."""
    script = (
        "import os, sys, trio\n"
        "from trio_agent.workspace import Workspace\n"
        f"w = Workspace({str(root)!r}, sandbox='bwrap')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(0)  # runs the atexit hooks, in the child\n"
        "os.waitpid(pid, 0)\n"
        "print(trio.run(w.run, 'echo ok'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "[exit code 0]\nok" in done.stdout


async def test_regression_a_command_whose_namespace_is_being_ended_costs_no_grace(root):
    """Issue 23 (review of the sandbox): the marker scan found a sandboxed process that its pid
    namespace was still ending, signalled it, then slept the whole grace period: about one command
    in 20 with a background child took 60 s (``grace_seconds=60``)."""
    box = Workspace(root, sandbox="bwrap", grace_seconds=300)
    for _ in range(40):
        with trio.fail_after(WAIT):  # each well under a second; a fifth of the grace
            assert await box.run("sleep 1314 & echo done") == "[exit code 0]\ndone\n"
