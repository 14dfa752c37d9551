"""Matching lines in files that are already open, a regex in a child process.

Both ways read only descriptors opened (without following symlinks) by the
caller; nothing here opens a path. A literal cannot backtrack, so it is
matched in a worker thread. A regex is matched by a child Python process that
inherits the descriptors: a pattern that backtracks catastrophically is ended
at the time limit instead of holding this process (a thread cannot be
stopped).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import msgspec
import trio

from ._errors import WorkspaceError

__all__ = ["grep_opened"]


async def grep_opened(
    pattern: str,
    regex: bool,
    opened: list[tuple[str, int]],
    *,
    max_bytes: int,
    max_lines: int,
    seconds: float,
    cwd: Path,
) -> list[str]:
    """``name:line: text`` for lines matching ``pattern`` (a regex if ``regex``) in
    ``opened`` (name to show, descriptor), the first ``max_bytes`` of each file;
    at most ``max_lines`` lines. A regex child gets ``seconds``."""
    if not opened:
        return []
    if not regex:  # a literal cannot backtrack: match it here, in a thread
        return await trio.to_thread.run_sync(
            _grep_fds, re.escape(pattern), opened, max_bytes, max_lines
        )
    request = msgspec.json.encode(
        {"pattern": pattern, "files": opened, "max_bytes": max_bytes, "max_lines": max_lines}
    )
    try:
        with trio.fail_after(seconds):
            done = await trio.run_process(
                [sys.executable, "-I", "-c", _GREP_CHILD],  # -I: never import from the root
                stdin=request,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                pass_fds=[fd for _, fd in opened],
                env={},
                cwd=cwd,
            )
    except trio.TooSlowError:
        raise WorkspaceError(
            f"the regex took longer than {seconds} s (it may backtrack too much)"
        ) from None
    if done.returncode != 0:
        raise WorkspaceError(f"grep failed: {done.stderr.decode(errors='replace')[-300:]}")
    return msgspec.json.decode(done.stdout)


def _grep_fds(
    pattern: str, opened: list[tuple[str, int]], max_bytes: int, max_lines: int
) -> list[str]:
    """Lines matching ``pattern`` in already opened files (text files only)."""
    matcher = re.compile(pattern)
    out: list[str] = []
    for rel, fd in opened:
        data = os.pread(fd, max_bytes, 0)
        if b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if matcher.search(line):
                out.append(f"{rel}:{number}: {line[:300]}")
                if len(out) >= max_lines:
                    return out
    return out


# The child process of a regex grep: it reads a JSON request on stdin and matches
# in the descriptors it inherited; it never opens a path itself.
_GREP_CHILD = """
import json, os, re, sys
request = json.load(sys.stdin)
matcher = re.compile(request["pattern"])
out = []
for rel, fd in request["files"]:
    data = os.pread(fd, request["max_bytes"], 0)
    if b"\\x00" in data[:8192]:
        continue
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if matcher.search(line):
            out.append(f"{rel}:{number}: {line[:300]}")
            if len(out) >= request["max_lines"]:
                break
    if len(out) >= request["max_lines"]:
        break
json.dump(out, sys.stdout)
"""
