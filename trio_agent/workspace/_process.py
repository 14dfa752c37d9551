"""Commands run in a process group of their own, and the whole group ended.

A command runs with ``sh -c`` in a new session, so that ending it can reach
every process it started: SIGTERM to the group, a grace period, SIGKILL, and
the leader reaped before the result is recorded. Every descendant also
inherits a marker in its environment, so one that left the group (``setsid``,
a double fork) is found in ``/proc`` and ended too. Output is drained while
the command runs, its head and latest tail kept within a budget, and its
lines are reported as progress as they come.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import final

import trio

from ..limits import cut_text
from ..tools._context import ToolContext
from ._progress import OutputLines
from ._sandbox import Cgroups

__all__ = ["live_processes", "run_command"]

_MARKER = "TRIO_AGENT_RUN"


@final
class _Output:
    """What a command writes: all of it up to twice ``budget`` bytes, then the
    first ``budget`` bytes and the latest ``budget`` bytes."""

    def __init__(self, budget: int) -> None:
        self.data = bytearray()
        self.budget = budget
        self.drained = trio.Event()

    async def drain(self, stream: trio.abc.ReceiveStream, lines: OutputLines) -> None:
        """Read ``stream`` to its end (then set ``drained``), keeping what fits and
        passing each piece to ``lines`` (waking up when its waiting lines are due)."""
        budget = self.budget
        async with stream:
            while True:
                data = None
                with trio.move_on_at(lines.due):
                    data = await stream.receive_some(65536)
                if data is None:  # lines are due and no output came meanwhile
                    lines.flush()
                    continue
                if not data:
                    lines.end()
                    self.drained.set()
                    return
                lines.feed(data)
                if len(self.data) < budget * 2:
                    self.data.extend(data)
                else:  # keep the head and the latest tail
                    self.data[budget:] = self.data[-budget:] + data[-budget:]


async def run_command(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limit: float,
    grace_seconds: float,
    max_output_chars: int,
    progress: ToolContext,
    cgroups: Cgroups | None = None,
    pass_fds: Sequence[int] = (),
    started: Callable[[], None] | None = None,
) -> str:
    """Run ``argv`` (a command with ``sh -c``, sandboxed or not) in ``cwd``; the exit
    code and output (stdout and stderr together, cut to ``max_output_chars``,
    head and tail kept). While it runs, its output lines go to ``progress`` as
    they come (``OutputLines``). The whole process group is ended when it
    finishes, runs past ``limit`` seconds, or is cancelled (then ``Cancelled``
    propagates once it is reaped). ``cgroups``: those its processes are born
    in; the result says what their limits did (forks refused, processes ended).
    ``pass_fds`` are inherited by the command (the sandbox's binds); ``started()``
    is called once its process exists (to close them here)."""
    # A marker every descendant inherits, even one that leaves the process
    # group (setsid, double fork): cleanup finds those by it.
    marker = f"{_MARKER}={uuid.uuid4().hex}"
    process = await trio.lowlevel.open_process(
        argv,
        cwd=cwd,
        env={**env, _MARKER: marker.split("=", 1)[1]},
        start_new_session=True,  # its own process group: we can end all of it
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=pass_fds,
    )
    if started is not None:
        started()
    output = _Output(max_output_chars * 4)
    ended = False
    try:
        assert process.stdout is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(output.drain, process.stdout, OutputLines(progress))
            with trio.move_on_after(limit) as timer:  # only the command is timed
                await process.wait()
            # The leader is done (or out of time), but what the group writes
            # last may still be on its way. End the rest of the group first
            # (background children hold the pipe open), then read to EOF; a
            # stray that escaped both the group and the marker gets no more
            # than the grace period.
            ended = True
            await _end_group(process, marker.encode(), grace_seconds)
            with trio.move_on_after(grace_seconds):
                await output.drained.wait()
            nursery.cancel_scope.cancel()
    finally:
        if not ended:  # cancelled from outside while the command ran
            await _end_group(process, marker.encode(), grace_seconds)
    text = cut_text(output.data.decode("utf-8", "replace"), max_output_chars)
    notes = [] if cgroups is None else await trio.to_thread.run_sync(cgroups.notes)
    text = "".join(f"{note}\n" for note in notes) + text
    if timer.cancelled_caught:
        return f"[timed out after {limit} s; the process group was ended]\n{text}"
    return f"[exit code {process.returncode}]\n{text}"


async def _end_group(process: trio.Process, marker: bytes, grace_seconds: float) -> None:
    """SIGTERM the group, wait the grace period, SIGKILL, reap; then end any
    descendant that left the group but still carries the run's marker.
    Shielded: it finishes even when the caller is being cancelled."""
    with trio.CancelScope(shield=True):
        await _end_process_group(process, grace_seconds)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            strays = await trio.to_thread.run_sync(_marked, marker)
            if not strays:
                break
            for pid in strays:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            if sig == signal.SIGTERM:  # the grace period at most: most are gone at once
                with trio.move_on_after(grace_seconds):
                    await _until_gone(marker)


async def _until_gone(marker: bytes) -> None:
    """Until no live process carries ``marker`` (looked at after 1 ms, then less
    often). A sandboxed command's processes are being ended by their pid
    namespace as its first process exits: waiting the whole grace period for
    them would stall every such command."""
    pause = 0.001
    while await trio.to_thread.run_sync(_marked, marker):  # no event for it
        await trio.sleep(pause)
        pause = min(pause * 2, 0.05)


async def _end_process_group(process: trio.Process, grace_seconds: float) -> None:
    """SIGTERM the process group, give it the grace period, SIGKILL; reap the leader."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        if sig == signal.SIGTERM:
            with trio.move_on_after(grace_seconds):
                await process.wait()
                # the leader is gone; give the rest of the group the same grace
                # (looked at after 1 ms, then less often: most groups end at once)
                pause = 0.001
                while await trio.to_thread.run_sync(_group_alive, process.pid):  # no event for it
                    await trio.sleep(pause)
                    pause = min(pause * 2, 0.01)
                break
    await process.wait()


def _marked(marker: bytes) -> list[int]:
    """Live processes (not zombies) whose environment holds ``marker``."""
    return live_processes("environ", lambda data: marker in data.split(b"\0"))


def live_processes(file: str, wanted: Callable[[bytes], bool]) -> list[int]:
    """Live processes (not zombies) whose ``/proc/<pid>/<file>`` is ``wanted``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/{file}", "rb") as f:
                if not wanted(f.read()):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:
            continue
        found.append(int(entry))
    return found


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs. Zombies do not count:
    where PID 1 reaps slowly (containers), orphans stay zombies for a while,
    and ``killpg(pgid, 0)`` would call the group alive until the grace ends."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                state, _ppid, group = f.read().rsplit(b")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != b"Z":
            return True
    return False
