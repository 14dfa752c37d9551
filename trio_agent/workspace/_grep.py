"""Matching lines in files opened a batch at a time, a regex in a child process.

The caller opens the files (without following symlinks), ``BATCH`` at a time,
so a search never holds more descriptors than that (a tree of 2000 files
would pass the usual limit of 1024); nothing here opens a path. A literal
cannot backtrack, so it is matched in a worker thread. A regex is matched by
a child Python process per batch that inherits the descriptors: a pattern
that backtracks catastrophically is ended at the time limit instead of
holding this process (a thread cannot be stopped). Either way reports how far
it got, paced (``Meter``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import trio

from ._errors import WorkspaceError
from ._progress import Meter

__all__ = ["BATCH", "Progress", "grep_opened"]

BATCH = 128
"""Files open at once during a search (each batch is closed before the next is opened)."""

Progress = Callable[[int, int, int], None]
"""Called with (files searched, bytes read, matching lines) as a grep goes on."""


async def grep_opened(
    pattern: str,
    regex: bool,
    names: list[str],
    open_batch: Callable[[list[str]], Awaitable[list[tuple[str, int]]]],
    *,
    max_bytes: int,
    max_lines: int,
    seconds: float,
    cwd: Path,
    progress: Progress,
    every: float,
) -> list[str]:
    """``name:line: text`` for lines matching ``pattern`` (a regex if ``regex``) in
    the files ``names``, the first ``max_bytes`` of each; at most ``max_lines``
    lines. ``open_batch`` opens up to ``BATCH`` of them, giving (name to show,
    descriptor) of each it could open; they are closed here. The whole search
    gets ``seconds``. ``progress`` gets the counts so far every ``every`` seconds
    (none in the first ones).

    Cancellation: a literal search stops at its next file; a regex child is
    killed and reaped, then ``Cancelled`` propagates; the batch's descriptors
    are closed either way."""
    meter = Meter(every)
    found: list[str] = []
    base = [0, 0]  # files searched and bytes read in the batches before
    last = [0, 0]  # the same in this batch, so far

    def searched(files: int, read: int, matches: int) -> None:  # after each file
        last[:] = [files, read]
        if meter.due():
            progress(base[0] + files, base[1] + read, len(found) + matches)

    try:
        with trio.fail_after(seconds):
            for start in range(0, len(names), BATCH):
                opened = await open_batch(names[start : start + BATCH])
                try:
                    found += await _grep_batch(
                        pattern, regex, opened, max_bytes, max_lines - len(found), cwd, searched
                    )
                finally:
                    for _, fd in opened:
                        os.close(fd)
                base[0], base[1] = base[0] + last[0], base[1] + last[1]
                last[:] = [0, 0]
                if len(found) >= max_lines:
                    break
    except trio.TooSlowError:
        what = "the regex" if regex else "the search"
        raise WorkspaceError(
            f"{what} took longer than {seconds} s"
            + (" (it may backtrack too much)" if regex else "")
        ) from None
    return found


async def _grep_batch(
    pattern: str,
    regex: bool,
    opened: list[tuple[str, int]],
    max_bytes: int,
    max_lines: int,
    cwd: Path,
    searched: Progress,
) -> list[str]:
    """The matching lines of one batch of opened files; ``searched`` after each file."""
    if not opened:
        return []
    if not regex:  # a literal cannot backtrack: match it here, in a thread

        def checked(files: int, read: int, matches: int) -> None:
            trio.from_thread.check_cancelled()
            searched(files, read, matches)

        return await trio.to_thread.run_sync(
            _grep_fds, re.escape(pattern), opened, max_bytes, max_lines, checked
        )
    request = msgspec.json.encode(
        {"pattern": pattern, "files": opened, "max_bytes": max_bytes, "max_lines": max_lines}
    )
    return await _run_child(request, [fd for _, fd in opened], cwd, searched)


async def _run_child(request: bytes, fds: list[int], cwd: Path, progress: Progress) -> list[str]:
    """Run the grep child on ``request``, passing ``fds``; its progress lines go to
    ``progress`` as they come. Cancelled: the child is killed and reaped."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-I", "-c", _GREP_CHILD],  # -I: never import from the root
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=fds,
        env={},
        cwd=cwd,
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    errors = bytearray()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send, process.stdin, request)
            nursery.start_soon(_keep_tail, process.stderr, errors)
            found = await _read_child(process.stdout, progress)
            code = await process.wait()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                await stream.aclose()
    if code != 0 or found is None:
        raise WorkspaceError(f"grep failed: {errors.decode(errors='replace')[-300:]}")
    return found


async def _send(stream: trio.abc.SendStream, data: bytes) -> None:
    """Write ``data`` and close ``stream``; a child that is gone just misses it."""
    try:
        async with stream:
            await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _keep_tail(stream: trio.abc.ReceiveStream, tail: bytearray) -> None:
    """Read ``stream`` to its end, keeping its last 4096 bytes in ``tail``."""
    while data := await stream.receive_some(65536):
        tail += data
        del tail[:-4096]


async def _read_child(stream: trio.abc.ReceiveStream, progress: Progress) -> list[str] | None:
    """The child's result (its ``R`` line), passing its ``P`` lines to ``progress``
    as they come; None if it gave no result or wrote anything else. Read to the
    end, so the child never blocks on a full pipe."""
    found: list[str] | None = None
    broken = False
    buffer = b""
    while data := await stream.receive_some(65536):
        *lines, buffer = (buffer + data).split(b"\n")
        for line in lines:
            try:
                if line.startswith(b"P ") and not broken:
                    progress(*msgspec.json.decode(line[2:], type=tuple[int, int, int]))
                elif line.startswith(b"R ") and not broken:
                    found = msgspec.json.decode(line[2:], type=list[str])
                else:
                    broken = True
            except msgspec.DecodeError:
                broken = True
    return None if broken or buffer else found


def _grep_fds(
    pattern: str,
    opened: list[tuple[str, int]],
    max_bytes: int,
    max_lines: int,
    searched: Progress,
) -> list[str]:
    """Lines matching ``pattern`` in already opened files (text files only);
    ``searched`` is called after each file."""
    matcher = re.compile(pattern)
    out: list[str] = []
    read = 0
    for done, (rel, fd) in enumerate(opened, 1):
        data = os.pread(fd, max_bytes, 0)
        read += len(data)
        if b"\x00" not in data[:8192]:
            for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if matcher.search(line):
                    out.append(f"{rel}:{number}: {line[:300]}")
                    if len(out) >= max_lines:
                        return out
        searched(done, read, len(out))
    return out


# The child process of a regex grep: it reads a JSON request on stdin and matches
# in the descriptors it inherited; it never opens a path itself. Its stdout is
# lines: "P [files, bytes, matches]" after each file (a batch has at most BATCH;
# the parent paces the reports) and, last, "R [lines...]" (the result).
_GREP_CHILD = """
import json, os, re, sys
request = json.load(sys.stdin)
matcher = re.compile(request["pattern"])
out = []
read = 0
for done, (rel, fd) in enumerate(request["files"], 1):
    data = os.pread(fd, request["max_bytes"], 0)
    read += len(data)
    if b"\\x00" not in data[:8192]:
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if matcher.search(line):
                out.append(f"{rel}:{number}: {line[:300]}")
                if len(out) >= request["max_lines"]:
                    break
    if len(out) >= request["max_lines"]:
        break
    print("P", json.dumps([done, read, len(out)]), flush=True)
print("R", json.dumps(out), flush=True)
"""
