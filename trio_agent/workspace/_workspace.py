"""The ``Workspace``: its limits, its eight tools, and the checks on their arguments.

Each tool checks what the model passed and composes the package's parts:
paths opened from the held root descriptor (``_paths``), cancellable walks
(``_walk``), grep on opened files (``_grep``) and commands ended as a whole
process group (``_process``). It is the one place that knows the limits, so
a caller can change them on the instance between calls.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, final

import trio

from ..limits import MAX_MEDIA_BYTES, cut_text, without_lone_surrogates
from ..messages import ImageBlock, TextBlock
from ..tools import Tool, ToolContext, ToolRegistry, ToolResult, tool, tool_context
from ._binds import pin_binds
from ._errors import WorkspaceError
from ._glob import Glob
from ._grep import grep_opened
from ._paths import in_thread, open_parts, path_parts, regular, shown
from ._process import run_command
from ._progress import Meter, size_text
from ._sandbox import (
    Confinement,
    Limits,
    SandboxMode,
    checked_paths,
    choose_sandbox,
    remove_cgroups,
)
from ._walk import Check, abandonable, list_entries, walk

__all__ = ["Workspace", "image_type"]

_PIECE = 256 * 1024
"""Bytes ``read_file`` reads at a time: it can stop, and report, between pieces."""


@final
class Workspace:
    """Tools confined to ``root``: ``read_file``, ``read_image``, ``write_file``,
    ``edit_file``, ``list_dir``, ``glob``, ``grep`` and ``run``; get them with
    ``tools()``.

    Limits: ``max_path_chars`` per path, ``max_read_bytes`` per read,
    ``max_image_bytes`` per image (at most ``MAX_MEDIA_BYTES``),
    ``max_write_bytes`` per write, ``max_output_chars`` of any result (head
    and tail kept), ``max_entries`` listed or matched, ``run_seconds`` per
    command (``grace_seconds`` between SIGTERM and SIGKILL). Commands get
    only ``env`` (default: a minimal PATH, HOME=root, LANG), never the
    parent's environment wholesale.

    Sandbox (``run``; the file tools are confined by the root descriptor):
    ``sandbox="auto"`` runs each command in bubblewrap when ``bwrap`` is
    installed and works (probed once per process, a few milliseconds), else
    unconfined with a warning in ``logging`` and in the tool's description;
    ``"bwrap"`` raises ``WorkspaceError`` without it (naming the package to
    install); ``"none"`` runs commands as the user. Inside: the workspace
    read-write at its own path, the system read-only, no network unless
    ``network=True`` (``"ask"``: the ``run`` tool takes ``network=true``, and
    such a call waits for a person's approval in an ``Agent``; ``run_agent_loop``
    has no approvals and would run it: use ``"ask"`` with an ``Agent`` only),
    ``ro_paths``/``rw_paths`` bound as asked (checked:
    absolute, existing, never ``/`` nor a system directory writable; these and
    the root checked again before every command and bound by descriptor, see
    ``_binds``), at most
    ``max_memory_bytes`` of address space and ``max_processes`` processes,
    and nothing left running afterwards (see ``_sandbox``). ``sandbox`` says
    the mode in force.

    Progress: ``run`` reports its command's output lines as they come;
    ``read_file``, ``glob`` and ``grep`` report how far they got every
    ``progress_seconds`` (none when done sooner). Reports go to the running
    tool call (``tool_context()``, ``tool.updated`` events, rate-bounded) or
    to the ``progress`` context a method is given.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_path_chars: int = 1024,
        max_read_bytes: int = 256 * 1024,
        max_image_bytes: int = 5 * 1024 * 1024,
        max_write_bytes: int = 1024 * 1024,
        max_output_chars: int = 16_000,
        max_entries: int = 500,
        run_seconds: float = 60.0,
        grace_seconds: float = 2.0,
        env: dict[str, str] | None = None,
        progress_seconds: float = 0.25,
        sandbox: SandboxMode = "auto",
        network: bool | Literal["ask"] = False,
        ro_paths: Sequence[str | os.PathLike[str]] = (),
        rw_paths: Sequence[str | os.PathLike[str]] = (),
        max_memory_bytes: int = 2 * 1024**3,
        max_processes: int = 256,
    ) -> None:
        root_path = Path(root).resolve()
        if not root_path.is_dir():
            raise ValueError(f"workspace root {root_path} is not a directory")
        if type(network) is not bool and network != "ask":
            raise TypeError(f'network must be True, False or "ask", got {network!r}')
        for name, value, least in (
            ("max_memory_bytes", max_memory_bytes, 16 * 1024**2),
            ("max_processes", max_processes, 8),
        ):
            if type(value) is not int or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        chosen = choose_sandbox(sandbox)  # probed once per process (a few ms)
        ro = checked_paths(ro_paths, "ro_paths", writable=False)
        rw = checked_paths(rw_paths, "rw_paths", writable=True)
        self.root = root_path
        # Opened once: every path is resolved from this descriptor, so renaming or
        # replacing the root directory (a command can) never redirects the tools.
        self._root_fd = os.open(root_path, os.O_RDONLY | os.O_DIRECTORY)
        weakref.finalize(self, os.close, self._root_fd)  # closed with the workspace
        own = os.fstat(self._root_fd)  # the sandbox binds this very directory, or refuses
        binds = pin_binds(root_path, (own.st_dev, own.st_ino), ro, rw)
        limits = Limits(max_memory_bytes, max_processes)
        self.confinement = Confinement(chosen, network, binds, limits)
        self.max_path_chars = max_path_chars
        self.max_read_bytes = max_read_bytes
        if type(max_image_bytes) is not int or not 1 <= max_image_bytes <= MAX_MEDIA_BYTES:
            raise ValueError(
                f"max_image_bytes must be an int in [1, {MAX_MEDIA_BYTES}], got {max_image_bytes!r}"
            )
        self.max_image_bytes = max_image_bytes
        self.max_write_bytes = max_write_bytes
        self.max_output_chars = max_output_chars
        self.max_entries = max_entries
        self.run_seconds = run_seconds
        self.grace_seconds = grace_seconds
        self.progress_seconds = progress_seconds
        self.env = (
            dict(env)
            if env is not None
            else {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(root_path), "LANG": "C.UTF-8"}
        )

    def _parts(self, path: object) -> list[str]:
        """The path's components below the root, or a ``WorkspaceError`` saying why not."""
        return path_parts(path, self.root, self.max_path_chars)

    def _open(self, parts: Sequence[str], flags: int, *, create_dirs: bool = False) -> int:
        """Open ``parts`` under the root, never following a symlink on the way."""
        return open_parts(self._root_fd, parts, flags, create_dirs=create_dirs)

    # ------------------------------------------------------------- files

    async def read_file(
        self, path: str, offset: int = 0, *, progress: ToolContext | None = None
    ) -> str:
        """The text of a file (UTF-8), from ``offset``, at most ``max_read_bytes``.

        Read in pieces, reporting the bytes read so far to ``progress``.
        Cancellation stops the read at its next piece."""
        parts = self._parts(path)
        if type(offset) is not int or not 0 <= offset < 2**62:
            raise WorkspaceError(f"offset must be an int in [0, 2**62), got {offset!r}")
        context = tool_context() if progress is None else progress
        name = "/".join(parts)

        def work() -> str:
            fd = self._open(parts, os.O_RDONLY)
            try:
                info = regular(fd, path)
                total = max(1, min(self.max_read_bytes + 1, info.st_size - offset))
                meter = Meter(self.progress_seconds)

                def done(count: int) -> None:
                    trio.from_thread.check_cancelled()
                    if meter.due():
                        text = f"{size_text(count)} of {size_text(total)} read"
                        context.report(f"{text} from {name!r}", count / total)

                data = _pread(fd, self.max_read_bytes + 1, offset, done)
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

        return await in_thread(path, work)

    async def read_image(self, path: str) -> ImageBlock:
        """An image file (PNG, JPEG, GIF or WebP, known by its first bytes, not its
        name) as an ``ImageBlock``, at most ``max_image_bytes``.

        Read in a worker thread; cancellation stops the read at its next piece."""
        parts = self._parts(path)

        def work() -> ImageBlock:
            fd = self._open(parts, os.O_RDONLY)
            try:
                info = regular(fd, path)
                if info.st_size > self.max_image_bytes:
                    raise WorkspaceError(
                        f"{path!r} is {info.st_size} bytes, more than max_image_bytes "
                        f"({self.max_image_bytes})"
                    )
                data = _pread(
                    fd, self.max_image_bytes + 1, 0, lambda _: trio.from_thread.check_cancelled()
                )
            finally:
                os.close(fd)
            if len(data) > self.max_image_bytes:  # it grew while we read
                raise WorkspaceError(
                    f"{path!r} is more than max_image_bytes ({self.max_image_bytes})"
                )
            media_type = image_type(data)
            if media_type is None:
                raise WorkspaceError(f"{path!r} is not a PNG, JPEG, GIF or WebP image")
            return ImageBlock(media_type, data=data)

        return await in_thread(path, work)

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
                regular(fd, path)
                os.ftruncate(fd, 0)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            return without_lone_surrogates(f"wrote {len(data)} bytes to {'/'.join(parts)}")

        return await in_thread(path, work)

    async def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of ``old`` with ``new``; refuse 0 or several."""
        if not old:
            raise WorkspaceError("old must not be empty")
        parts = self._parts(path)

        def work() -> str:
            fd = self._open(parts, os.O_RDWR)
            try:
                info = regular(fd, path)
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

        return await in_thread(path, work)

    # ------------------------------------------------------------ search

    async def list_dir(self, path: str = ".") -> str:
        """The entries of a directory (``/`` after directories, ``@`` after symlinks).

        Cancellation returns at once; the listing thread stops at its next entry.
        """
        parts = self._parts(path)
        limit = self.max_entries

        def work(check: Check) -> tuple[list[str], int]:
            return list_entries(self._root_fd, parts, limit, check)

        lines, total = await abandonable(path, f"listing {path!r}", self.run_seconds, work)
        if total > limit:
            lines.append(f"[... {total - limit} more entries]")
        return _text(lines, self.max_output_chars) or "(empty)"

    async def glob(self, pattern: str, *, progress: ToolContext | None = None) -> str:
        """Paths under the root matching a glob (``**`` crosses directories; see
        ``_glob``), matched in linear time; the entries walked so far go to
        ``progress``.

        Cancellation returns at once; the walk's thread stops at its next entry.
        """
        self._parts(pattern.replace("*", "x").replace("?", "x"))  # same rules as a path
        matcher = Glob(pattern)
        limit = self.max_entries
        context = tool_context() if progress is None else progress

        def work(check: Check) -> list[str]:
            matching = lambda rel, _: bool(matcher.match(rel))  # noqa: E731
            return self._collect([], check, matching, limit, context, "matching")

        found = await abandonable(pattern, "the walk", self.run_seconds, work)
        more = [f"[... more than {limit}]"] if len(found) > limit else []
        return _text([*map(shown, found[:limit]), *more], self.max_output_chars) or "(no match)"

    async def grep(
        self,
        pattern: str,
        path: str = ".",
        regex: bool = False,
        *,
        progress: ToolContext | None = None,
    ) -> str:
        """``file:line: text`` for lines containing ``pattern`` (a regex if ``regex``);
        the files found, then searched, so far go to ``progress``.

        A literal pattern is matched here. A regex is matched in a child process
        on the files opened here (their descriptors are passed on, ``BATCH`` at a
        time), so a pattern that backtracks catastrophically is ended at
        ``run_seconds`` (the whole search's limit) instead of holding this
        process. Cancellation while the files are found returns at
        once (the walk's thread stops at its next entry); while they are
        searched, a literal search stops at its next file and a regex child is
        killed.
        """
        parts = self._parts(path)
        if type(pattern) is not str or not pattern or len(pattern) > 1000:
            raise WorkspaceError("pattern must be a non-empty string of at most 1000 characters")
        try:  # in a thread: a short pattern can take most of a second to compile
            if regex:
                await trio.to_thread.run_sync(re.compile, pattern, abandon_on_cancel=True)
        except re.error as exc:
            raise WorkspaceError(f"bad regex: {exc}") from None
        context = tool_context() if progress is None else progress

        def find_files(check: Check) -> list[str]:
            return self._grep_files(parts, check, context)

        async def open_files(batch: list[str]) -> list[tuple[str, int]]:
            """(name to show, descriptor) of each file of ``batch`` that is still one;
            out of descriptors is an error, never a file silently skipped."""

            def work() -> list[tuple[str, int]]:  # not abandoned: it holds descriptors
                opened: list[tuple[str, int]] = []
                done = False
                try:
                    for rel in batch:
                        try:
                            fd = self._open(self._parts(rel), os.O_RDONLY)
                        except OSError as exc:  # gone or replaced: skipped
                            if exc.errno in (errno.EMFILE, errno.ENFILE):
                                raise
                            continue
                        except WorkspaceError:
                            continue
                        opened.append((without_lone_surrogates(shown(rel)), fd))
                    done = True
                finally:
                    if not done:
                        for _, fd in opened:
                            os.close(fd)
                return opened

            return await in_thread(path, work)

        def searched(files: int, read: int, matches: int) -> None:
            context.report(
                f"{files} of {len(searching)} files searched ({size_text(read)}), "
                f"{matches} matching lines",
                files / len(searching),
            )

        names = await abandonable(path, "the walk", self.run_seconds, find_files)
        searching = names[: self.max_entries * 4]
        lines = await grep_opened(
            pattern,
            regex,
            searching,
            open_files,
            max_bytes=self.max_read_bytes,
            max_lines=self.max_entries + 1,
            seconds=self.run_seconds,
            cwd=self.root,
            progress=searched,
            every=self.progress_seconds,
        )
        if len(lines) > self.max_entries:
            lines = [*lines[: self.max_entries], "[... more matches]"]
        limit = self.max_entries * 4
        if len(names) > limit:  # say where the search stopped: never a silent "(no match)"
            lines.append(f"[searched only the first {limit} files; narrow the path to search more]")
        return _text(lines, self.max_output_chars) or "(no match)"

    def _grep_files(self, parts: list[str], check: Check, context: ToolContext) -> list[str]:
        """The regular files below ``parts`` (at most ``4 * max_entries``, and one more
        when there are more), or ``parts`` itself if it is a file; the entries walked
        so far go to ``context``."""
        top = self._open(parts, os.O_RDONLY)  # checked by descriptor, never by path
        try:
            is_dir = stat.S_ISDIR(os.fstat(top).st_mode)
        finally:
            os.close(top)
        if not is_dir:
            return ["/".join(parts)]
        regular = lambda _, mode: stat.S_ISREG(mode)  # noqa: E731
        return self._collect(
            parts, check, regular, self.max_entries * 4, context, "files to search"
        )

    def _collect(
        self,
        parts: list[str],
        check: Check,
        keep: Callable[[str, int], bool],
        limit: int,
        context: ToolContext,
        noun: str,
    ) -> list[str]:
        """The entries below ``parts`` (paths from the root) that ``keep``, at most
        ``limit`` and one more when there are more; how far the walk got goes to
        ``context``. Runs in the walk's thread."""
        found: list[str] = []
        meter = Meter(self.progress_seconds)
        entries = walk(self._root_fd, parts, self.max_path_chars, check)
        try:
            for walked, (rel, mode) in enumerate(entries, 1):
                if keep(rel, mode):
                    found.append(rel)
                    if len(found) > limit:
                        break
                if meter.due():
                    context.report(f"{walked} entries walked, {len(found)} {noun}")
        finally:
            entries.close()
        return found

    # ----------------------------------------------------------- commands

    async def run(
        self,
        command: str,
        seconds: float | None = None,
        *,
        network: bool = False,
        progress: ToolContext | None = None,
    ) -> str:
        """Run ``command`` with ``sh -c`` in the workspace; the exit code and output
        (stdout and stderr together, head and tail kept). Its output lines go to
        ``progress`` as they come (see ``OutputLines``). The whole process group
        is ended when it finishes or fails its time limit; on cancellation too,
        and ``Cancelled`` propagates once the group is reaped. Sandboxed, a bound path
        (the root, ``ro_paths``, ``rw_paths``) that is no longer what it was
        refuses the command: ``WorkspaceError`` saying which and why."""
        if type(command) is not str or not command.strip():
            raise WorkspaceError("command must be a non-empty string")
        if len(command) > 16_384:
            raise WorkspaceError("command is longer than 16384 characters")
        if seconds is not None and not (type(seconds) in (int, float) and seconds > 0):
            raise WorkspaceError(f"seconds must be a number > 0, got {seconds!r}")
        limit = self.run_seconds if seconds is None else min(float(seconds), self.run_seconds)
        confinement = self.confinement
        if type(network) is not bool:
            raise WorkspaceError(f"network must be true or false, got {network!r}")
        if network and confinement.network is False and confinement.sandbox.mode == "bwrap":
            raise WorkspaceError("this workspace's commands have no network (network=False)")
        held = cgroups = None
        if confinement.sandbox.mode == "bwrap":
            held, cgroups = await trio.to_thread.run_sync(confinement.prepare)
        try:
            return await run_command(
                confinement.argv(self.root, command, cgroups, network=network, held=held),
                cwd=self.root,
                env=self.env,
                limit=limit,
                grace_seconds=self.grace_seconds,
                max_output_chars=self.max_output_chars,
                progress=tool_context() if progress is None else progress,
                cgroups=cgroups,
                pass_fds=() if held is None else held.fds,
                started=None if held is None else held.close,
            )
        finally:
            if held is not None:
                held.close()  # when the command did not start
            if cgroups is not None:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(remove_cgroups, cgroups)

    @property
    def sandbox(self) -> str:
        """The sandbox in force for ``run``: ``"bwrap"`` or ``"none"``."""
        return self.confinement.sandbox.mode

    # --------------------------------------------------------------- tools

    def tools(self) -> ToolRegistry:
        """The workspace's tools, ready for ``run_agent_loop`` or ``Agent``."""
        workspace = self

        @tool(name="read_file")
        async def read_file(context: ToolContext, path: str, offset: int = 0) -> str:
            """Read a text file of the workspace (from a byte offset)."""
            return await workspace.read_file(path, offset, progress=context)

        @tool(name="read_image")
        async def read_image(path: str) -> ToolResult:
            """Look at an image file of the workspace (PNG, JPEG, GIF or WebP)."""
            image = await workspace.read_image(path)
            assert image.data is not None
            note = f"{path}: {image.media_type}, {len(image.data)} bytes"
            return ToolResult((TextBlock(note), image))

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
        async def glob_tool(context: ToolContext, pattern: str) -> str:
            """Find workspace paths matching a glob pattern (** crosses directories)."""
            return await workspace.glob(pattern, progress=context)

        @tool(name="grep")
        async def grep(
            context: ToolContext, pattern: str, path: str = ".", regex: bool = False
        ) -> str:
            """Find lines containing a text (or a regex) in workspace files."""
            return await workspace.grep(pattern, path, regex, progress=context)

        described = (
            "Run a shell command in the workspace and return its exit code and output. "
            + self.confinement.describe()
        )
        if self.confinement.asks_network:

            @tool(
                name="run",
                exclusive=True,
                requires_approval=_asks_network,
                description=f"{described} Pass network=true for a command that needs it.",
            )
            async def run(
                context: ToolContext,
                command: str,
                seconds: float | None = None,
                network: bool = False,
            ) -> str:
                return await workspace.run(command, seconds, network=network, progress=context)

        else:

            @tool(name="run", exclusive=True, description=described)
            async def run(context: ToolContext, command: str, seconds: float | None = None) -> str:
                return await workspace.run(command, seconds, progress=context)

        tools: list[Tool] = [
            read_file,
            read_image,
            write_file,
            edit_file,
            list_dir,
            glob_tool,
            grep,
            run,
        ]
        return ToolRegistry(tools)


def _asks_network(arguments: Mapping[str, object]) -> bool:
    """The sandboxed ``run`` tool's approval rule: a command that asks for the network."""
    return arguments.get("network") is True


def _text(lines: list[str], max_chars: int) -> str:
    """Result lines as one text, cut to ``max_chars``; lone surrogates (from names
    that are not UTF-8) replaced by U+FFFD, so it encodes, as a tool result does."""
    return without_lone_surrogates(cut_text("\n".join(lines), max_chars))


def image_type(data: bytes) -> str | None:
    """The media type of an image by its signature bytes; None if not one we take."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _pread(fd: int, count: int, offset: int, done: Callable[[int], None]) -> bytes:
    """Up to ``count`` bytes of ``fd`` from ``offset``, read ``_PIECE`` bytes at a
    time; ``done(bytes so far)`` after each piece (it may raise to stop)."""
    pieces: list[bytes] = []
    got = 0
    while got < count:
        piece = os.pread(fd, min(_PIECE, count - got), offset + got)
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
        done(got)
    return b"".join(pieces)
