"""Workspace tools: files and processes confined to one root directory.

Every path is opened one component at a time from the root's directory
descriptor with ``O_NOFOLLOW``: ``..``, absolute paths outside the root,
symlinks (also ones a command created) and anything but regular files and
directories are refused, with no window between a check and the open.
Reads, writes, output and time are bounded. File work runs in a worker
thread; commands run in a session of their own, and cancellation or a time
limit ends the whole process group (SIGTERM, a grace period, SIGKILL), which
is reaped before the result is recorded.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar, final

import msgspec
import trio

from ._glob import Glob
from .limits import cut_text, without_lone_surrogates
from .tools import Tool, ToolError, ToolRegistry, tool

__all__ = ["Workspace", "WorkspaceError"]

T = TypeVar("T")
_NUL = "\x00"


class WorkspaceError(ToolError):
    """A refused or failed workspace operation; the model sees the reason."""


_Check = Callable[[], None]
"""Called by a worker thread per entry; raises to stop the work."""


@final
class Workspace:
    """Tools confined to ``root``: ``read_file``, ``write_file``, ``edit_file``,
    ``list_dir``, ``glob``, ``grep`` and ``run``; get them with ``tools()``.

    Limits: ``max_path_chars`` per path, ``max_read_bytes`` per read,
    ``max_write_bytes`` per write, ``max_output_chars`` of any result (head
    and tail kept), ``max_entries`` listed or matched, ``run_seconds`` per
    command (``grace_seconds`` between SIGTERM and SIGKILL). Commands get
    only ``env`` (default: a minimal PATH, HOME=root, LANG), never the
    parent's environment wholesale.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_path_chars: int = 1024,
        max_read_bytes: int = 256 * 1024,
        max_write_bytes: int = 1024 * 1024,
        max_output_chars: int = 16_000,
        max_entries: int = 500,
        run_seconds: float = 60.0,
        grace_seconds: float = 2.0,
        env: dict[str, str] | None = None,
    ) -> None:
        root_path = Path(root).resolve()
        if not root_path.is_dir():
            raise ValueError(f"workspace root {root_path} is not a directory")
        self.root = root_path
        # Opened once: every path is resolved from this descriptor, so renaming or
        # replacing the root directory (a command can) never redirects the tools.
        self._root_fd = os.open(root_path, os.O_RDONLY | os.O_DIRECTORY)
        weakref.finalize(self, os.close, self._root_fd)  # closed with the workspace
        self.max_path_chars = max_path_chars
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_output_chars = max_output_chars
        self.max_entries = max_entries
        self.run_seconds = run_seconds
        self.grace_seconds = grace_seconds
        self.env = (
            dict(env)
            if env is not None
            else {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(root_path), "LANG": "C.UTF-8"}
        )

    # ------------------------------------------------------------- paths

    def _parts(self, path: object) -> list[str]:
        """The path's components below the root, or a ``WorkspaceError`` saying why not."""
        if type(path) is not str:
            raise WorkspaceError(f"path must be a string, got {type(path).__name__}")
        if len(path) > self.max_path_chars:
            raise WorkspaceError(f"path is longer than {self.max_path_chars} characters")
        if _NUL in path:
            raise WorkspaceError("path contains a NUL character")
        if os.path.isabs(path):
            root = str(self.root)
            if path != root and not path.startswith(root + os.sep):
                raise WorkspaceError(f"{path!r} is outside the workspace")
            path = path[len(root) :].lstrip(os.sep)
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise WorkspaceError(f"{path!r} uses '..'; paths stay inside the workspace")
        return parts

    def _open(self, parts: Sequence[str], flags: int, *, create_dirs: bool = False) -> int:
        """Open ``parts`` under the root, never following a symlink on the way."""
        fd = os.dup(self._root_fd)
        try:
            for part in parts[:-1]:
                try:
                    next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create_dirs:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = next_fd
            if not parts:
                return fd
            # O_NONBLOCK: opening a FIFO or a device must never block; only regular
            # files and directories are used, checked with fstat before any I/O.
            last = os.open(
                parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, 0o644, dir_fd=fd
            )
            info = os.fstat(last)
            if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                os.close(last)
                raise WorkspaceError(f"{'/'.join(parts)!r} is not a regular file or directory")
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                os.close(last)
                raise WorkspaceError(
                    f"{'/'.join(parts)!r} has other hard links (it may be a file outside)"
                )
            os.set_blocking(last, True)
            return last
        finally:
            if parts:
                os.close(fd)

    def _explain(self, path: str, exc: OSError) -> WorkspaceError:
        import errno

        reasons = {
            errno.ELOOP: "is a symlink (symlinks are not followed)",
            errno.ENOTDIR: "goes through something that is not a directory, or a symlink",
            errno.ENOENT: "does not exist",
            errno.EISDIR: "is a directory",
            errno.EACCES: "is not accessible",
            errno.EEXIST: "already exists",
        }
        return WorkspaceError(f"{path!r} {reasons.get(exc.errno, exc.strerror or str(exc))}")

    async def _in_thread(self, path: str, work: Callable[[], T]) -> T:
        try:
            return await trio.to_thread.run_sync(work)
        except OSError as exc:
            raise self._explain(path, exc) from None

    async def _abandonable(self, path: str, what: str, work: Callable[[_Check], T]) -> T:
        """``work(check)`` in a worker thread that calls ``check()`` per entry; past
        ``run_seconds``, ``check()`` raises a ``WorkspaceError`` naming ``what``.

        Cancellation raises at once: the thread is abandoned, and its next
        ``check()`` raises ``trio.Cancelled`` there, so it ends soon, closing its
        own descriptors on the way out. ``work`` must return plain data
        (nothing to release): an abandoned thread's result is dropped.
        """
        seconds = self.run_seconds
        deadline = time.monotonic() + seconds

        def check() -> None:
            trio.from_thread.check_cancelled()
            if time.monotonic() > deadline:
                raise WorkspaceError(f"{what} took longer than {seconds} s")

        try:
            return await trio.to_thread.run_sync(work, check, abandon_on_cancel=True)
        except OSError as exc:
            raise self._explain(path, exc) from None

    # ------------------------------------------------------------- files

    def _regular(self, fd: int, path: str) -> os.stat_result:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"{path!r} is not a regular file")
        return info

    async def read_file(self, path: str, offset: int = 0) -> str:
        """The text of a file (UTF-8), from ``offset``, at most ``max_read_bytes``."""
        parts = self._parts(path)
        if type(offset) is not int or not 0 <= offset < 2**62:
            raise WorkspaceError(f"offset must be an int in [0, 2**62), got {offset!r}")

        def work() -> str:
            fd = self._open(parts, os.O_RDONLY)
            try:
                info = self._regular(fd, path)
                data = os.pread(fd, self.max_read_bytes + 1, offset)
            finally:
                os.close(fd)
            if b"\x00" in data[:8192]:
                raise WorkspaceError(f"{path!r} is a binary file ({info.st_size} bytes)")
            # keep only what fits in one result, and say exactly where to read on
            limit = min(self.max_read_bytes, self.max_output_chars)
            kept = data[:limit]
            text = kept.decode("utf-8", "replace")
            if len(data) > limit:
                end = offset + len(kept)
                text += f"\n[... {info.st_size - end} more bytes; read on with offset={end}]"
            return text

        return await self._in_thread(path, work)

    async def write_file(self, path: str, content: str) -> str:
        """Write ``content`` to a file (created with its directories), replacing it."""
        parts = self._parts(path)
        if not parts:
            raise WorkspaceError("write_file needs a file path")
        data = content.encode("utf-8", "surrogateescape")
        if len(data) > self.max_write_bytes:
            raise WorkspaceError(f"content is {len(data)} bytes, more than {self.max_write_bytes}")

        def work() -> str:
            fd = self._open(parts, os.O_WRONLY | os.O_CREAT, create_dirs=True)
            try:
                self._regular(fd, path)
                os.ftruncate(fd, 0)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            return without_lone_surrogates(f"wrote {len(data)} bytes to {'/'.join(parts)}")

        return await self._in_thread(path, work)

    async def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of ``old`` with ``new``; refuse 0 or several."""
        if not old:
            raise WorkspaceError("old must not be empty")
        parts = self._parts(path)

        def work() -> str:
            fd = self._open(parts, os.O_RDWR)
            try:
                info = self._regular(fd, path)
                if info.st_size > self.max_write_bytes:
                    raise WorkspaceError(f"{path!r} is larger than {self.max_write_bytes} bytes")
                text = os.pread(fd, info.st_size + 1, 0).decode("utf-8", "surrogateescape")
                count = text.count(old)
                if count != 1:
                    raise WorkspaceError(
                        f"old text found {count} times in {path!r}; it must be found exactly once"
                        + (" (add surrounding lines to make it unique)" if count > 1 else "")
                    )
                data = text.replace(old, new, 1).encode("utf-8", "surrogateescape")
                if len(data) > self.max_write_bytes:
                    raise WorkspaceError(f"the edit makes {path!r} larger than allowed")
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
            finally:
                os.close(fd)
            return without_lone_surrogates(f"edited {'/'.join(parts)}")

        return await self._in_thread(path, work)

    def _walk(self, parts: Sequence[str], check: _Check) -> Iterator[tuple[str, int]]:
        """(relative path, mode) of everything below ``parts``, depth first in name
        order, symlinks not followed, ``check()`` per entry. One descriptor per open
        level, all closed when the walk ends or is closed; a directory whose path is
        already ``max_path_chars`` long is listed, not entered (no tool could use
        what is below it)."""
        levels: list[tuple[int, str, list[str]]] = []  # (fd, path, subdirectories left)
        try:
            levels.append((self._open(parts, os.O_RDONLY | os.O_DIRECTORY), "/".join(parts), []))
            while True:
                fd, rel, subdirs = levels[-1]
                for name in _names(fd, check):
                    check()
                    mode = _mode(name, fd)
                    if mode is None:
                        continue
                    path = f"{rel}/{name}" if rel else name
                    yield path, mode
                    if stat.S_ISDIR(mode) and len(path) < self.max_path_chars:
                        subdirs.append(name)
                subdirs.reverse()  # popped from the end: in name order
                if not _descend(levels):
                    return
        finally:
            for fd, _, _ in levels:
                os.close(fd)

    async def list_dir(self, path: str = ".") -> str:
        """The entries of a directory (``/`` after directories, ``@`` after symlinks).

        Cancellation returns at once; the listing thread stops at its next entry.
        """
        parts = self._parts(path)
        limit = self.max_entries

        def work(check: _Check) -> tuple[list[str], int]:
            fd = self._open(parts, os.O_RDONLY | os.O_DIRECTORY)
            try:
                names = _names(fd, check)
                lines = []
                for name in names[:limit]:
                    check()
                    mode = _mode(name, fd)
                    if mode is not None:  # None: gone since it was listed
                        mark = "/" if stat.S_ISDIR(mode) else "@" if stat.S_ISLNK(mode) else ""
                        lines.append(name + mark)
            finally:
                os.close(fd)
            return lines, len(names)

        lines, total = await self._abandonable(path, f"listing {path!r}", work)
        if total > limit:
            lines.append(f"[... {total - limit} more entries]")
        return _text(lines, self.max_output_chars) or "(empty)"

    async def glob(self, pattern: str) -> str:
        """Paths under the root matching a glob (``**`` crosses directories; see
        ``_glob``), matched in linear time.

        Cancellation returns at once; the walk's thread stops at its next entry.
        """
        self._parts(pattern.replace("*", "x").replace("?", "x"))  # same rules as a path
        matcher = Glob(pattern)
        limit = self.max_entries

        def work(check: _Check) -> list[str]:
            found = []
            walk = self._walk([], check)
            try:
                for rel, _ in walk:
                    if matcher.match(rel):
                        found.append(rel)
                        if len(found) > limit:
                            break
            finally:
                walk.close()
            return found

        found = await self._abandonable(pattern, "the walk", work)
        more = [f"[... more than {limit}]"] if len(found) > limit else []
        return _text(found[:limit] + more, self.max_output_chars) or "(no match)"

    async def grep(self, pattern: str, path: str = ".", regex: bool = False) -> str:
        """``file:line: text`` for lines containing ``pattern`` (a regex if ``regex``).

        A literal pattern is matched here. A regex is matched in a child process
        on the files opened here (their descriptors are passed on), so a pattern
        that backtracks catastrophically is ended at ``run_seconds`` instead of
        holding this process. Cancellation while the files are found returns at
        once (the walk's thread stops at its next entry).
        """
        parts = self._parts(path)
        if type(pattern) is not str or not pattern or len(pattern) > 1000:
            raise WorkspaceError("pattern must be a non-empty string of at most 1000 characters")
        try:
            re.compile(pattern if regex else re.escape(pattern))
        except re.error as exc:
            raise WorkspaceError(f"bad regex: {exc}") from None

        limit = self.max_entries * 4

        def find_files(check: _Check) -> list[str]:
            top = self._open(parts, os.O_RDONLY)  # checked by descriptor, never by path
            try:
                is_dir = stat.S_ISDIR(os.fstat(top).st_mode)
            finally:
                os.close(top)
            if not is_dir:
                return ["/".join(parts)]
            walk = self._walk(parts, check)  # paths from the root
            try:
                return list(itertools.islice((r for r, m in walk if stat.S_ISREG(m)), limit))
            finally:
                walk.close()

        def open_files() -> list[tuple[str, int]]:
            """(name to show, descriptor) of each file; not abandoned: it holds descriptors."""
            opened = []
            for rel in names:
                try:
                    fd = self._open(self._parts(rel), os.O_RDONLY)
                except (OSError, WorkspaceError):
                    continue
                opened.append((without_lone_surrogates(rel), fd))
            return opened

        names = await self._abandonable(path, "the walk", find_files)
        opened = await self._in_thread(path, open_files)
        try:
            lines = await self._grep_child(pattern, regex, opened)
        finally:
            for _, fd in opened:
                os.close(fd)
        if len(lines) > self.max_entries:
            lines = [*lines[: self.max_entries], "[... more matches]"]
        return _text(lines, self.max_output_chars) or "(no match)"

    async def _grep_child(
        self, pattern: str, regex: bool, opened: list[tuple[str, int]]
    ) -> list[str]:
        if not opened:
            return []
        if not regex:  # a literal cannot backtrack: match it here, in a thread
            return await trio.to_thread.run_sync(
                _grep_fds, re.escape(pattern), opened, self.max_read_bytes, self.max_entries + 1
            )
        request = msgspec.json.encode(
            {
                "pattern": pattern,
                "files": opened,
                "max_bytes": self.max_read_bytes,
                "max_lines": self.max_entries + 1,
            }
        )
        try:
            with trio.fail_after(self.run_seconds):
                done = await trio.run_process(
                    [sys.executable, "-c", _GREP_CHILD],
                    stdin=request,
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    pass_fds=[fd for _, fd in opened],
                    env={},
                    cwd=self.root,
                )
        except trio.TooSlowError:
            raise WorkspaceError(
                f"the regex took longer than {self.run_seconds} s (it may backtrack too much)"
            ) from None
        if done.returncode != 0:
            raise WorkspaceError(f"grep failed: {done.stderr.decode(errors='replace')[-300:]}")
        return msgspec.json.decode(done.stdout)

    # ----------------------------------------------------------- commands

    async def run(self, command: str, seconds: float | None = None) -> str:
        """Run ``command`` with ``sh -c`` in the workspace; the exit code and output
        (stdout and stderr together, head and tail kept). The whole process group
        is ended when it finishes, fails its time limit, or is cancelled."""
        if type(command) is not str or not command.strip():
            raise WorkspaceError("command must be a non-empty string")
        if len(command) > 16_384:
            raise WorkspaceError("command is longer than 16384 characters")
        if seconds is not None and not (type(seconds) in (int, float) and seconds > 0):
            raise WorkspaceError(f"seconds must be a number > 0, got {seconds!r}")
        limit = self.run_seconds if seconds is None else min(float(seconds), self.run_seconds)
        # A marker every descendant inherits, even one that leaves the process
        # group (setsid, double fork): cleanup finds those by it.
        marker = f"{_MARKER}={uuid.uuid4().hex}"
        process = await trio.lowlevel.open_process(
            ["/bin/sh", "-c", command],
            cwd=self.root,
            env={**self.env, _MARKER: marker.split("=", 1)[1]},
            start_new_session=True,  # its own process group: we can end all of it
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        output = bytearray()
        budget = self.max_output_chars * 4
        drained = trio.Event()

        async def drain() -> None:
            assert process.stdout is not None
            async with process.stdout:
                while True:
                    data = await process.stdout.receive_some(65536)
                    if not data:
                        drained.set()
                        return
                    if len(output) < budget * 2:
                        output.extend(data)
                    else:  # keep the head and the latest tail
                        output[budget:] = output[-budget:] + data[-budget:]

        ended = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain)
                with trio.move_on_after(limit) as timer:  # only the command is timed
                    await process.wait()
                # The leader is done (or out of time), but what the group writes
                # last may still be on its way. End the rest of the group first
                # (background children hold the pipe open), then read to EOF; a
                # stray that escaped both the group and the marker gets no more
                # than the grace period.
                ended = True
                await self._end_group(process, marker.encode())
                with trio.move_on_after(self.grace_seconds):
                    await drained.wait()
                nursery.cancel_scope.cancel()
        finally:
            if not ended:  # cancelled from outside while the command ran
                await self._end_group(process, marker.encode())
        timed_out = timer.cancelled_caught
        text = cut_text(output.decode("utf-8", "replace"), self.max_output_chars)
        if timed_out:
            return f"[timed out after {limit} s; the process group was ended]\n{text}"
        return f"[exit code {process.returncode}]\n{text}"

    async def _end_group(self, process: trio.Process, marker: bytes) -> None:
        """SIGTERM the group, wait the grace period, SIGKILL, reap; then end any
        descendant that left the group but still carries the run's marker.
        Shielded: it finishes even when the caller is being cancelled."""
        with trio.CancelScope(shield=True):
            await self._end_process_group(process)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                strays = await trio.to_thread.run_sync(_marked, marker)
                if not strays:
                    break
                for pid in strays:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                await trio.sleep(self.grace_seconds if sig == signal.SIGTERM else 0)

    async def _end_process_group(self, process: trio.Process) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            if sig == signal.SIGTERM:
                with trio.move_on_after(self.grace_seconds):
                    await process.wait()
                    # the leader is gone; give the rest of the group the same grace
                    while await trio.to_thread.run_sync(_group_alive, process.pid):  # noqa: ASYNC110 - no event for it
                        await trio.sleep(0.01)
                    break
        await process.wait()

    # --------------------------------------------------------------- tools

    def tools(self) -> ToolRegistry:
        """The workspace's tools, ready for ``run_agent_loop`` or ``Agent``."""
        workspace = self

        @tool(name="read_file")
        async def read_file(path: str, offset: int = 0) -> str:
            """Read a text file of the workspace (from a byte offset)."""
            return await workspace.read_file(path, offset)

        @tool(name="write_file")
        async def write_file(path: str, content: str) -> str:
            """Write a text file in the workspace, creating directories as needed."""
            return await workspace.write_file(path, content)

        @tool(name="edit_file")
        async def edit_file(path: str, old: str, new: str) -> str:
            """Replace the one exact occurrence of old with new in a file."""
            return await workspace.edit_file(path, old, new)

        @tool(name="list_dir")
        async def list_dir(path: str = ".") -> str:
            """List a directory of the workspace."""
            return await workspace.list_dir(path)

        @tool(name="glob")
        async def glob_tool(pattern: str) -> str:
            """Find workspace paths matching a glob pattern (** crosses directories)."""
            return await workspace.glob(pattern)

        @tool(name="grep")
        async def grep(pattern: str, path: str = ".", regex: bool = False) -> str:
            """Find lines containing a text (or a regex) in workspace files."""
            return await workspace.grep(pattern, path, regex)

        @tool(name="run", exclusive=True)
        async def run(command: str, seconds: float | None = None) -> str:
            """Run a shell command in the workspace and return its exit code and output."""
            return await workspace.run(command, seconds)

        tools: list[Tool] = [read_file, write_file, edit_file, list_dir, glob_tool, grep, run]
        return ToolRegistry(tools)


def _text(lines: list[str], max_chars: int) -> str:
    """Result lines as one text, cut to ``max_chars``; lone surrogates (from names
    that are not UTF-8) replaced by U+FFFD, so it encodes, as a tool result does."""
    return without_lone_surrogates(cut_text("\n".join(lines), max_chars))


def _names(dir_fd: int, check: _Check) -> list[str]:
    """The names in a directory, sorted; ``check()`` per entry (a directory may be huge)."""
    names = []
    with os.scandir(dir_fd) as entries:  # scans a duplicate of the descriptor
        for entry in entries:
            check()
            names.append(entry.name)
    names.sort()
    return names


def _mode(name: str, dir_fd: int) -> int | None:
    """The mode of ``name`` in a directory (a symlink's own), or None if it is gone."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def _descend(levels: list[tuple[int, str, list[str]]]) -> bool:
    """Open and push the next directory of a depth-first walk, closing the levels
    that are done; False when the walk is over."""
    while levels:
        fd, rel, left = levels[-1]
        if not left:
            levels.pop()
            os.close(fd)
            continue
        name = left.pop()
        try:
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:  # gone, or replaced (by a symlink too) since it was listed
            continue
        levels.append((child, f"{rel}/{name}" if rel else name, []))
        return True
    return False


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

_MARKER = "TRIO_AGENT_RUN"


def _marked(marker: bytes) -> list[int]:
    """Live processes (not zombies) whose environment holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
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
