"""The offline demo, run through the real entry points in a subprocess."""

from __future__ import annotations

import subprocess
import sys

import msgspec

from trio_agent import Event, RunFinished


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_agent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_demo_prints_a_live_multi_step_run_and_its_result():
    done = run_cli("demo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("#0   message.accepted  user-1:")
    assert any("tool.started      multiply" in line for line in lines)
    assert any('tool.finished     add -> {"sum":89} [ok]' in line for line in lines)
    assert any("run.finished      completed after 3 step(s)" in line for line in lines)
    assert "final text: There are 89 eggs in total: 84 in the boxes and 5 loose." in lines
    assert done.stderr == ""


def test_demo_json_prints_events_that_decode():
    done = run_cli("demo", "--json")
    assert done.returncode == 0, done.stderr
    events = [msgspec.json.decode(line, type=Event) for line in done.stdout.splitlines()]
    assert [e.sequence for e in events] == list(range(len(events)))
    assert isinstance(events[-1], RunFinished) and events[-1].result.status == "completed"
    assert events[-1].result.steps == 3


def test_unknown_command_is_a_usage_error():
    done = run_cli("fly")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr
