"""Walks and listings that a cancelled caller does not wait for (issue 12, item 14):
the walk's thread is abandoned and stops at its next entry, and the time limit holds
inside one big directory."""

from __future__ import annotations

import os
import time

import pytest
import trio
from helpers import call, user

import trio_agent.workspace._walk as workspace_module  # where walks and listings stat entries
from trio_agent import run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.workspace import Workspace, WorkspaceError

pytestmark = pytest.mark.usefixtures("sandbox_mode")  # each test in both modes


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root, run_seconds=10, grace_seconds=0.5)


def slow_entries(monkeypatch, seconds: float) -> list[float]:
    """Make the per-entry step of a walk or listing slow; returns the times it ran."""
    calls: list[float] = []
    real = workspace_module._mode

    def slow(name: str, dir_fd: int) -> int | None:
        calls.append(time.monotonic())
        time.sleep(seconds)
        return real(name, dir_fd)

    monkeypatch.setattr(workspace_module, "_mode", slow)
    return calls


def open_fds(workspace) -> int:
    """Descriptors of this process open on the workspace root or below it."""
    root, count = str(workspace.root), 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        count += target == root or target.startswith(root + "/")
    return count


async def wait_until_quiet(workspace, calls: list[float], fds: int) -> None:
    """Wait (at most 5 s) for the abandoned thread to stop and close its descriptors."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if open_fds(workspace) == fds and time.monotonic() - calls[-1] > 0.2:
            return
        await trio.sleep(0.02)


def many_files(workspace, count: int = 300) -> None:
    (workspace.root / "many").mkdir()
    for i in range(count):
        (workspace.root / "many" / f"f{i:03d}.txt").write_text("needle\n")


CANCELLABLE = [
    ("glob", lambda w: w.glob("**/*.py")),
    ("list_dir", lambda w: w.list_dir("many")),
    ("grep", lambda w: w.grep("needle")),
    ("regex grep", lambda w: w.grep("need+le", regex=True)),
]


@pytest.mark.parametrize("operation", [c[1] for c in CANCELLABLE], ids=[c[0] for c in CANCELLABLE])
async def test_regression_cancelling_a_slow_walk_returns_at_once_and_the_thread_stops(
    workspace, monkeypatch, operation
):
    """Issue 12 item 14: the walk ran in ``trio.to_thread.run_sync``, which cancellation cannot
    interrupt: a cancelled turn waited for the whole walk (here 300 entries x 20 ms). The thread is
    abandoned; it stops at its next entry and closes what it opened."""
    many_files(workspace)
    fds = open_fds(workspace)
    calls = slow_entries(monkeypatch, 0.02)
    started = time.monotonic()
    with trio.move_on_after(0.2) as scope:
        await operation(workspace)
    elapsed = time.monotonic() - started
    assert scope.cancelled_caught and elapsed < 2  # not the 6 s of the whole walk
    at_cancel = len(calls)
    await wait_until_quiet(workspace, calls, fds)
    assert len(calls) <= at_cancel + 2  # the abandoned thread stopped at its next entry
    assert open_fds(workspace) == fds  # ... and closed what it had opened


@pytest.mark.parametrize(
    "operation", [c[1] for c in CANCELLABLE[:2]], ids=[c[0] for c in CANCELLABLE[:2]]
)
async def test_regression_cancelling_during_one_slow_entry_returns_at_once(
    workspace, monkeypatch, operation
):
    """Issue 12 item 14: a per-entry check alone would still wait for the step in progress (a stat
    on a hung file system): the thread is abandoned instead, and stops after it."""
    many_files(workspace, 3)
    fds = open_fds(workspace)
    calls = slow_entries(monkeypatch, 1.5)
    started = time.monotonic()
    with trio.move_on_after(0.2) as scope:
        await operation(workspace)
    assert scope.cancelled_caught and time.monotonic() - started < 1.0
    await wait_until_quiet(workspace, calls, fds)
    assert len(calls) == 1 and open_fds(workspace) == fds


async def test_regression_cancelling_a_turn_during_a_slow_glob_returns_at_once(
    workspace, monkeypatch
):
    """Issue 12 item 14: a turn cancelled during a slow glob waited for the whole walk; it returns
    at once, and the walk's thread lets its descriptors go."""
    many_files(workspace)
    fds = open_fds(workspace)
    calls = slow_entries(monkeypatch, 0.02)
    model = ScriptedModel(
        [
            scripted_response("r1", [call("glob", "c1", {"pattern": "**/*.txt"})]),
            scripted_response("r2", "unreachable"),
        ]
    )
    run = run_agent_loop(messages=[user()], model=model, tools=workspace.tools(), max_steps=4)
    started = time.monotonic()
    with trio.move_on_after(0.3):
        await run.wait()
    assert time.monotonic() - started < 2
    assert model.call_count == 1
    await wait_until_quiet(workspace, calls, fds)
    assert open_fds(workspace) == fds


async def test_regression_the_walk_time_limit_holds_inside_one_big_directory(
    workspace, monkeypatch
):
    """Issue 12 item 14: the time limit was checked once per directory: one directory of slow
    entries ran on past it."""
    many_files(workspace)
    workspace.run_seconds = 0.3
    slow_entries(monkeypatch, 0.02)
    with trio.fail_after(5):
        with pytest.raises(WorkspaceError, match=r"the walk took longer than 0.3 s"):
            await workspace.glob("**")
        with pytest.raises(WorkspaceError, match=r"listing 'many' took longer than 0.3 s"):
            await workspace.list_dir("many")
