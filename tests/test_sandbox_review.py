"""Regressions from the review of the run tool's sandbox (issue 23), each named
after what it pins. The suite runs as root in CI, where most of them mattered."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio

from trio_agent.workspace import Workspace, _sandbox


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def test_a_command_has_no_capabilities_and_cannot_remount_or_tune_the_kernel(root):
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
    (root / "vendor").mkdir()
    (root / "vendor" / "lib.txt").write_text("pristine")
    box = Workspace(root, sandbox="bwrap", ro_paths=[root / "vendor"])
    assert "[exit code 0]" not in await box.run("echo TAMPERED > vendor/lib.txt")
    assert (root / "vendor" / "lib.txt").read_text() == "pristine"
    assert (await box.run("echo fine > other.txt")).startswith("[exit code 0]")


@pytest.mark.parametrize("path", ["/proc", "/sys", "/dev", "/run", "/proc/1"])
def test_the_machine_itself_is_never_bound(root, path):
    with pytest.raises(ValueError, match="would expose the machine"):
        Workspace(root, ro_paths=[path])


@pytest.mark.parametrize("path", ["/usr/local/bin", "/etc/cron.d", "/var", "/usr", "/home"])
def test_no_system_tree_is_made_writable(root, path):
    with pytest.raises(ValueError):
        Workspace(root, rw_paths=[path])


async def test_the_memory_limit_covers_tmp_and_the_whole_command(root):
    box = Workspace(root, sandbox="bwrap", max_memory_bytes=64 * 1024**2, run_seconds=20)
    result = await box.run("head -c 300000000 /dev/zero > /tmp/big; echo wrote")
    assert "memory limit ended" in result and "wrote" not in result
    assert (await box.run("echo still here")).startswith("[exit code 0]\nstill here")


def test_the_commands_cgroups_are_made_below_the_agents_own():
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
    # The marker scan found a sandboxed process that its pid namespace was still
    # ending, signalled it, then slept the whole grace period: about one command
    # in 20 with a background child took 60 s (grace_seconds=60).
    box = Workspace(root, sandbox="bwrap", grace_seconds=60)
    with trio.fail_after(30):  # 40 commands: each well under a second
        for _ in range(40):
            assert await box.run("sleep 1314 & echo done") == "[exit code 0]\ndone\n"
