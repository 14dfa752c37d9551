"""Long workspace work is visible (issue 14, item 16): ``run`` reports its output
lines while the command runs, ``read_file``, ``glob`` and ``grep`` report how far
they got, all through the call's ``ToolContext`` (``tool.updated``), rate-bounded."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import trio
from helpers import call, marked_processes, user

from trio_agent import run_agent_loop
from trio_agent.limits import cut_text
from trio_agent.messages import ToolCall
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.tools import ToolContext
from trio_agent.tools._context import MAX_PROGRESS_TEXT, PROGRESS_INTERVAL
from trio_agent.workspace import Workspace

pytestmark = pytest.mark.usefixtures("sandbox_mode")  # each test in both modes


WAIT = 60  # seconds a test waits for what must happen long before (holds on a loaded machine)


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root, run_seconds=WAIT, grace_seconds=0.5)


class Reports:
    """A real ``ToolContext`` (the rate bound included) whose reports land here."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[tuple[float, str, float | None]](
            math.inf
        )
        self.seen: list[tuple[float, str, float | None]] = []
        self.context = ToolContext(ToolCall("c1", "run", {}), self._sink)

    def _sink(self, message: str, fraction: float | None) -> None:
        report = (trio.current_time(), message, fraction)
        self.seen.append(report)
        self.send.send_nowait(report)

    async def lines_until(self, wanted: str) -> list[str]:
        """The output lines reported until one is ``wanted``."""
        lines: list[str] = []
        while wanted not in lines:
            _, message, _ = await self.receive.receive()
            lines += message.splitlines()
        return lines


class Recorder:
    """Stands in for a ``ToolContext`` with no rate bound: every report is kept."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float | None]] = []

    def report(self, message: object, fraction: float | None = None) -> None:
        self.seen.append((str(message), fraction))


async def test_run_reports_each_line_while_the_command_still_runs(workspace):
    reports = Reports()
    go = workspace.root / "go"
    command = "echo first; echo second >&2; while [ ! -e go ]; do sleep 0.01; done; echo third"
    result = None

    async def run() -> None:
        nonlocal result
        result = await workspace.run(command, progress=reports.context)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(WAIT):
            lines = await reports.lines_until("second")
        assert lines == ["first", "second"]  # stdout and stderr, in arrival order
        assert result is None and not go.exists()  # the command is still waiting
        go.touch()
    # the result is what it always was: all of the output, after the exit code
    assert result == "[exit code 0]\nfirst\nsecond\nthird\n"


async def test_run_reports_are_rate_bounded_and_lines_cut(workspace):
    reports = Reports()
    long_line = "x" * 5000
    command = f"seq 1 20000; echo {long_line}"
    with trio.fail_after(WAIT):
        result = await workspace.run(command, progress=reports.context)
    times = [when for when, _, _ in reports.seen]
    assert all(b - a >= PROGRESS_INTERVAL for a, b in itertools.pairwise(times))
    messages = [message for _, message, _ in reports.seen]
    assert messages and all(len(m) <= MAX_PROGRESS_TEXT for m in messages)
    lines = [line for m in messages for line in m.splitlines()]
    assert all(len(line) <= 200 for line in lines)
    # a burst is reported as its newest lines, the others counted
    assert any(line.startswith("[... ") and line.endswith(" more lines]") for line in lines)
    # the result is unchanged: the head and tail of the output within the limit
    output = "".join(f"{n}\n" for n in range(1, 20001)) + long_line + "\n"
    assert result == "[exit code 0]\n" + cut_text(output, workspace.max_output_chars)


async def test_a_long_line_is_cut_and_escapes_are_removed_in_reports(workspace):
    reports = Reports()
    command = "echo " + "y" * 5000 + "; sleep 0.2; printf 'a\\033[31m red\\033[0m \\377 \\a b\\n'"
    with trio.fail_after(WAIT):
        await workspace.run(command, progress=reports.context)
    lines = [line for _, m, _ in reports.seen for line in m.splitlines()]
    assert lines[0] == "y" * 199 + "…"
    assert lines[-1] == "a red \ufffd \ufffd b"


async def test_a_last_line_without_a_newline_is_reported(workspace):
    reports = Reports()
    with trio.fail_after(WAIT):
        result = await workspace.run("printf 'no newline'", progress=reports.context)
    assert [m for _, m, _ in reports.seen] == ["no newline"]
    assert result == "[exit code 0]\nno newline"


async def test_cancelling_a_reporting_command_ends_its_group(workspace):
    reports = Reports()
    with trio.move_on_after(WAIT) as timer:  # only a failure waits this long
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await workspace.run("echo started; sleep 307", progress=reports.context)

            nursery.start_soon(run)
            await reports.lines_until("started")
            nursery.cancel_scope.cancel()
    assert not timer.cancelled_caught
    assert marked_processes("sleep 307") == []  # ended and reaped before run() returned


async def test_the_run_tool_reports_tool_updated_events_in_an_agent_run(workspace):
    tools = workspace.tools()
    assert all(tools.get(name).progress for name in ("run", "read_file", "glob", "grep"))
    command = "echo one; while [ ! -e go ]; do sleep 0.01; done; echo two"
    script = [
        scripted_response("r1", [call("run", "c1", {"command": command})]),
        scripted_response("r2", "done"),
    ]
    run = run_agent_loop(messages=[user()], model=ScriptedModel(script), tools=tools, max_steps=2)
    kinds, updates = [], []
    with trio.fail_after(WAIT):
        async with run:
            async for event in run:
                kinds.append(event.type)
                if event.type == "tool.updated":
                    updates.append(event.message)
                    (workspace.root / "go").touch()  # seen while the command waits for it
    # "two" comes at the command's end: passed on only if the rate bound allows
    assert updates in (["one"], ["one", "two"])
    first = kinds.index("tool.updated")
    assert kinds.index("tool.started") < first < kinds.index("tool.finished")
    assert run.result.messages[2].content == "[exit code 0]\none\ntwo\n"


async def test_read_file_reports_the_bytes_read_of_a_large_file(tmp_path):
    workspace = Workspace(tmp_path, max_read_bytes=1 << 20, progress_seconds=0)
    (tmp_path / "big.txt").write_bytes(b"0123456789abcdef" * (1 << 16))  # 1 MiB
    recorder = Recorder()
    text = await workspace.read_file("big.txt", progress=recorder)
    assert recorder.seen[0] == ("256.0 KiB of 1.0 MiB read from 'big.txt'", 0.25)
    assert recorder.seen[-1] == ("1.0 MiB of 1.0 MiB read from 'big.txt'", 1.0)
    assert text.startswith("0123456789abcdef") and "read on with offset=16000" in text


async def test_quick_work_reports_nothing(tmp_path):
    workspace = Workspace(tmp_path)  # reports every 0.25 s, none in the first
    (tmp_path / "small.txt").write_text("hello\n")
    recorder = Recorder()
    assert await workspace.read_file("small.txt", progress=recorder) == "hello\n"
    assert await workspace.grep("hello", progress=recorder) == "small.txt:1: hello"
    assert await workspace.glob("*.txt", progress=recorder) == "small.txt"
    assert recorder.seen == []


def tree(root: Path, files: int) -> None:
    for n in range(files):
        folder = root / f"d{n % 3}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{n}.txt").write_text(f"line {n}\nneedle {n}\n")


@pytest.mark.parametrize("regex", [False, True])
async def test_grep_reports_files_walked_then_searched(tmp_path, regex):
    tree(tmp_path, 6)
    workspace = Workspace(tmp_path, progress_seconds=0)
    recorder = Recorder()
    found = await workspace.grep("needle", regex=regex, progress=recorder)
    assert found.count("needle") == 6
    messages = [m for m, _ in recorder.seen]
    walked = [m for m in messages if "entries walked" in m]
    searched = [(m, f) for m, f in recorder.seen if "files searched" in m]
    assert walked[0] == "1 entries walked, 0 files to search"
    assert walked[-1] == "9 entries walked, 6 files to search"
    assert searched[0] == ("1 of 6 files searched (16 B), 1 matching lines", 1 / 6)
    assert searched[-1] == ("6 of 6 files searched (96 B), 6 matching lines", 1.0)
    assert messages.index(walked[-1]) < messages.index(searched[0][0])


async def test_glob_reports_the_entries_walked(tmp_path):
    tree(tmp_path, 6)
    workspace = Workspace(tmp_path, progress_seconds=0)
    recorder = Recorder()
    assert (await workspace.glob("**/f1.txt", progress=recorder)) == "d1/f1.txt"
    assert recorder.seen[-1] == ("9 entries walked, 1 matching", None)


async def test_progress_of_read_file_and_grep_is_rate_bounded_in_an_agent_run(tmp_path):
    tree(tmp_path, 30)
    workspace = Workspace(tmp_path, progress_seconds=0)  # every file: the context bounds it
    script = [
        scripted_response("r1", [call("grep", "c1", {"pattern": "needle", "regex": True})]),
        scripted_response("r2", "done"),
    ]
    run = run_agent_loop(
        messages=[user()], model=ScriptedModel(script), tools=workspace.tools(), max_steps=2
    )
    updates, times = [], {}
    with trio.fail_after(WAIT):
        async with run:
            async for event in run:
                times[event.type] = trio.current_time()
                if event.type == "tool.updated":
                    updates.append(event.message)
    assert updates[0] == "1 entries walked, 0 files to search"  # at once
    # at most one report per interval while the call ran (it reported per entry and file)
    window = times["tool.finished"] - times["tool.started"]
    assert len(updates) <= 2 + window / PROGRESS_INTERVAL
    assert run.result.messages[2].content.count("needle") == 30


async def test_lines_split_across_pieces_are_joined_and_bursts_wait_for_the_bound(mock_clock):
    from trio_agent.workspace._progress import OutputLines  # the reader's half of `run`

    recorder = Recorder()
    lines = OutputLines(recorder)
    STEP = PROGRESS_INTERVAL * 1.01  # type: ignore[arg-type]
    lines.feed(b"ab")
    assert recorder.seen == [] and lines.due == math.inf  # no complete line yet
    lines.feed(b"c\r\nprogress 10%\rprogress 100%\n\n   \nd")
    assert recorder.seen == [("abc\nprogress 100%", None)]  # at once: the first report
    lines.feed(b"ef\n" + b"z" * 5000)
    assert len(recorder.seen) == 1 and lines.due > trio.current_time()  # waits for the bound
    mock_clock.jump(STEP)
    lines.flush()
    assert recorder.seen[-1] == ("def", None)
    lines.feed(b"z" * 5000 + b"\n")  # one line of 10000 characters
    mock_clock.jump(STEP)
    lines.flush()
    assert recorder.seen[-1] == ("z" * 199 + "…", None)
    lines.feed(b"".join(b"%d\n" % n for n in range(100)))
    mock_clock.jump(STEP)
    lines.feed(b"tail without newline")
    reported = recorder.seen[-1][0].splitlines()
    assert reported == ["[... 50 more lines]"] + [str(n) for n in range(50, 100)]
    mock_clock.jump(STEP)
    lines.end()
    assert recorder.seen[-1] == ("tail without newline", None)
