"""No process of a test run outlives it, even when the run is killed (``kill -9``,
a CI time limit): every process the run starts carries ``RUN_MARKER`` in its
environment (set before the first child), and a small watchdog, started in a
session of its own, waits for the run to end (its pipe closes, however the run
died), then ends every live process that still carries the marker: servers
that daemonized (PostgreSQL through ``pg_ctl``), helpers in sessions of their
own (the proxy, MCP servers), children of killed children. The run's own
process never carries the marker; the watchdog takes it off itself.
"""

from __future__ import annotations

import os
import sys
import uuid

__all__ = ["RUN_MARKER", "start"]

RUN_MARKER = "TRIO_AGENT_TEST_RUN"

_WATCHDOG = r"""
import os, signal, sys, time
marker = sys.argv[1].encode()
mine = {os.getpid()}
sys.stdin.buffer.read()  # EOF: the run ended, cleanly or not
def marked():
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            pass
    return found
for attempt in range(50):  # a process may be forking while we look: look again
    left = marked()
    if not left:
        break
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.1)
"""


def start() -> str:
    """Mark this run's children and start its watchdog (once per run: pytest's
    xdist workers inherit the marker of the run that started them, and the
    first process to call this starts the one watchdog). The marker's value."""
    value = os.environ.get(RUN_MARKER)
    if value is not None:
        return value
    value = uuid.uuid4().hex
    entry = f"{RUN_MARKER}={value}"
    watchdog_env = {k: v for k, v in os.environ.items() if k != RUN_MARKER}
    read, write = os.pipe()
    # spawned, not a Popen: nothing waits for it, and it outlives this process
    os.posix_spawn(
        sys.executable,
        [sys.executable, "-I", "-S", "-c", _WATCHDOG, entry],
        watchdog_env,
        file_actions=[(os.POSIX_SPAWN_DUP2, read, 0), (os.POSIX_SPAWN_CLOSE, write)],
        setsid=True,  # a signal to the run's group does not reach it
    )
    os.close(read)
    os.set_inheritable(write, False)  # only this process holds the pipe: its end is ours
    _keep.append(write)
    os.environ[RUN_MARKER] = value
    return value


_keep: list[int] = []
"""The pipe's write end, open until this process ends."""
