"""What demo, run and resume print (issue 14, item 16): plain lines with no control
characters when stdout is not a terminal; on a terminal a spinner with the elapsed
time while a tool call runs, and the command's output lines as they come."""

from __future__ import annotations

import os
import pty
import re
import subprocess

import trio
from cli_runner import ENV, call_stream, cli, command, text_stream
from loopback import Reply

CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")  # anything but \t and \n


async def test_plain_output_has_no_control_characters(loopback, tmp_path):
    loopback.replies += [
        Reply(
            body=call_stream(
                "c1", "run", {"command": "printf 'a\\033[31mred\\033[0m\\rz\\n'; printf '\\007'"}
            )
        ),
        Reply(body=text_stream("clear \x1b[2J screen\r\n", "bell \x07 done")),
    ]
    done = await cli(command(loopback, tmp_path, "run", "--approve", "auto", "print colours"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert CONTROL.search(out) is None, out
    assert b"-> run(" in out and b"[ok]" in out
    assert b"clear \\x1b[2J screen\nbell \\x07 done" in out  # shown, never obeyed


async def read_until(stream, seen: bytearray, pattern: bytes) -> None:
    while not re.search(pattern, bytes(seen)):
        seen += await stream.receive_some(4096)


async def test_a_terminal_shows_a_spinner_and_output_lines_while_a_call_runs(loopback, tmp_path):
    gate = tmp_path / "go"
    script = f"echo started; while [ ! -f {gate} ]; do sleep 0.05; done; echo finished"
    loopback.replies += [
        Reply(body=call_stream("c1", "run", {"command": script})),
        Reply(body=text_stream("all done")),
    ]
    parent, child = pty.openpty()
    process = await trio.lowlevel.open_process(
        command(loopback, tmp_path, "run", "--approve", "auto", "wait for the gate"),
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=subprocess.PIPE,
        env={**ENV, "TERM": "xterm"},
    )
    os.close(child)
    terminal = trio.lowlevel.FdStream(parent)
    seen = bytearray()
    with trio.fail_after(30):
        # the command's first line arrives while it runs (it waits for the gate) ...
        await read_until(terminal, seen, rb"\.\.\. started")
        # ... and a spinner line is redrawn in place with the elapsed time
        await read_until(terminal, seen, rb"\r\x1b\[K[-|/\\] run running, [1-9]\.\d s")
        gate.touch()
        try:
            while data := await terminal.receive_some(4096):
                seen += data
        except trio.BrokenResourceError:  # EIO: the child closed the terminal
            pass
        code = await process.wait()
    await terminal.aclose()
    await process.stderr.aclose()
    assert code == 0
    out = bytes(seen).replace(b"\r\n", b"\n")
    times = [float(t) for t in re.findall(rb"run running, (\d+\.\d) s", out)]
    assert len(times) >= 5 and times == sorted(times)  # redrawn as time goes on
    # every spinner line was erased (or redrawn) before anything else was printed
    assert re.findall(rb"running, \d+\.\d s(?!\r\x1b\[K)", out) == []
    text = re.sub(rb"\r\x1b\[K([-|/\\] run running, \d+\.\d s)?", b"", out).decode()
    sandbox, *lines = text.splitlines()
    assert sandbox.startswith("sandbox: ")  # what the run tool's commands run in
    assert lines[0] == "user: wait for the gate"
    assert lines[1].startswith("-> run(")
    assert lines[2] == "   ... started"
    assert "   ... finished" in lines
    assert "   [ok] [exit code 0] started finished" in lines
    assert "all done" in lines


def test_a_tool_name_from_the_model_is_shown_never_obeyed():
    """The call's name is model text: in the ``->`` line, the spinner and a result
    line its controls are shown as \\xNN like any other model text."""
    import io

    from trio_agent.cli._output import Output, Printer
    from trio_agent.events import MessageAccepted, ToolStarted
    from trio_agent.messages import ToolCall
    from trio_agent.messages._ir import tool_result

    name = "\x1b[2J\x1b]0;PWNED\x07run"
    call = ToolCall(id="c1", name=name, arguments={"command": "echo hi"})
    out = Output(io.StringIO(), io.StringIO())
    printer = Printer(out, as_json=False, live=True)

    async def main() -> None:
        printer(ToolStarted(sequence=1, call=call))  # the line, then the spinner
        printer.draw_spinner()
        printer(MessageAccepted(sequence=2, message=tool_result(call, "closed", True)))
        printer.close()

    trio.run(main)
    out.flush_here()
    text = out.stdout.getvalue()
    assert "\\x1b[2J\\x1b]0;PWNED\\x07run" in text
    assert '-> \\x1b[2J\\x1b]0;PWNED\\x07run({"command":"echo hi"})' in text
    assert "\\x1b[2J\\x1b]0;PWNED\\x07run running, " in text  # the spinner
    assert "   [error] \\x1b[2J\\x1b]0;PWNED\\x07run: closed" in text
    assert CONTROL.search(text.replace("\r\x1b[K", "").encode()) is None, text
