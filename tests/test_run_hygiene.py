"""The test run itself: a run killed outright (``kill -9``, a CI time limit) leaves
no process behind (issue 33: the proxy tests' ``proxy.py`` helper outlived a
killed run by an hour, reparented to init; a throwaway PostgreSQL cluster
survived too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from helpers import alive
from paths import SUPPORT

_CONFTEST = """
import sys
sys.path.insert(0, {support!r})
import reaper
reaper.start()
"""

_TEST = """
import subprocess, sys, time

def test_leaves_children():
    # one child in a session of its own (as servers and daemons are), one that
    # forks a grandchild and exits (reparented to init, as pg_ctl's server is)
    alone = subprocess.Popen(["sleep", "600"], start_new_session=True)
    subprocess.run(["sh", "-c", "sleep 600 & echo $! > {pids}/orphan"], check=True)
    with open({pids!r} + "/alone", "w") as f:
        f.write(str(alone.pid))
    time.sleep(600)
"""


def _written(pids) -> list[int] | None:
    """The two children's pids, once both files hold one."""
    try:
        found = [int((pids / name).read_text()) for name in ("alone", "orphan")]
    except (OSError, ValueError):
        return None
    return found


def test_a_run_killed_outright_leaves_no_process_behind(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(_CONFTEST.format(support=str(SUPPORT)))
    (suite / "test_leave.py").write_text(textwrap.dedent(_TEST.format(pids=str(pids))))
    env = {k: v for k, v in os.environ.items() if k != "TRIO_AGENT_TEST_RUN"}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            str(suite),
        ],
        cwd=suite,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120  # a bound that holds on a loaded machine
    while (children := _written(pids)) is None:
        assert run.poll() is None and time.monotonic() < deadline, "the inner run did not start"
        time.sleep(0.05)
    assert all(alive(pid) for pid in children)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in children):
        assert time.monotonic() < deadline, f"left running: {children}"
        time.sleep(0.05)


def test_no_property_test_is_held_to_a_wall_clock_bound():
    """A property test drawing its inputs slowly on a loaded machine failed
    hypothesis's ``too_slow`` health check (``test_arguments.py``: one input in
    4 s), and each example had a 200 ms deadline: the suite's profile lifts both,
    and a test's own ``@settings`` keeps that unless it says otherwise."""
    from hypothesis import HealthCheck, settings

    for held in (settings(), settings(max_examples=5)):
        assert held.deadline is None
        assert HealthCheck.too_slow in held.suppress_health_check
