"""The offline demo, run through the real entry points in a subprocess: it prints
what ``run`` prints, through the same printer and the same --json lines."""

from __future__ import annotations

import re
import subprocess
import sys

import msgspec
from cli_runner import EventLine


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_agent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_demo_reads_like_run():
    done = run_cli("demo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "user: A box holds 12 eggs. How many eggs are in 7 boxes, plus the 5 loose ones?",
        "First, eggs in the boxes: 7 x 12.",  # streamed in 6 pieces, printed as text
        '-> multiply({"left":7,"right":12})',
        '   [ok] {"product":84}',
        "Now add the loose eggs.",
        '-> add({"left":84,"right":5})',
        '   [ok] {"sum":89}',
        "There are 89 eggs in total: 84 in the boxes and 5 loose.",
        "[turn 1 completed; 3 step(s), 0 in / 0 out tokens]",
    ]
    assert re.search(r"[\x00-\x08\x0b-\x1f\x7f]", done.stdout) is None
    assert done.stderr == ""


def test_demo_json_prints_the_event_lines_run_prints():
    done = run_cli("demo", "--json")
    assert done.returncode == 0, done.stderr
    events = [msgspec.json.decode(line, type=EventLine).event for line in done.stdout.splitlines()]
    assert [e.sequence for e in events] == list(range(len(events)))
    assert events[0].type == "turn.started"
    last = events[-1]
    assert last.type == "turn.finished"
    assert last.result.end.reason == "completed" and last.result.steps == 3
    assert sum(e.type == "tool.finished" for e in events) == 2


def test_unknown_command_is_a_usage_error():
    done = run_cli("fly")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr
