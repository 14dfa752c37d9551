"""The stdio transport of an MCP server: the process, its pipes, its end.

The server runs in a session (and process group) of its own. Three tasks
pump its pipes: stdout lines become JSON-RPC messages for the SDK's
``ClientSession``, the session's messages are written to stdin, and stderr
lines go to ``logging`` (logger ``trio_agent.mcp``, level DEBUG), never to
the terminal. When the server exits (or crashes) its stdout ends, the
session's read stream closes, and every call in flight fails with the SDK's
``CONNECTION_CLOSED``.

``stop()`` ends the server as the MCP spec says (close stdin, wait), then
ends its whole process group (SIGTERM, a grace period, SIGKILL) and reaps
it; shielded and bounded, so a cancelled caller cannot leak the process.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, final

import anyio
import mcp.types as mcp_types
import msgspec
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from .._log import MCP as logger
from ._noise import Noise
from ._tools import NESTED_TOO_DEEPLY, taken_in, too_deep

__all__ = ["EXIT_DRAIN", "StdioProcess", "Streams"]


Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]
"""The ends a ``ClientSession`` takes: what the server sends, what we send it."""

EXIT_GRACE: Final = 1.0
"""Seconds the server gets to exit after its stdin closes, and again after SIGTERM."""
_MAX_LINE: Final = 64 * 1024 * 1024
"""Bytes of one stdout line (one JSON-RPC message); a longer one ends the connection."""
_PARSE_INLINE: Final = 64 * 1024
"""Bytes of a stdout line parsed on the trio thread; a longer one is parsed in a
worker thread (a 64 MiB message takes the SDK's validation most of a second)."""
_MAX_STDERR_LINE: Final = 4000
"""Characters of one stderr line passed to ``logging``."""
_STDERR_TAIL: Final = 5
"""stderr lines kept to quote when the server fails to start."""
_TAIL_LINE: Final = 300
EXIT_DRAIN: Final = 0.5
"""Seconds for the last output of a server that exited to be read."""
_ANSWER_ID: Final = re.compile(
    rb'\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"[^"\\]{0,200}")\s*,\s*"(?:result|error)"'
)
"""The id of an answer, as the SDK's servers write it (``{"jsonrpc":"2.0","id":..``)."""
_SAFE_ENV: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL")


def server_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """What the server process sees: a few safe variables of ours (as the SDK
    does: no secrets leak to a server unasked), then ``env`` over them."""
    base = {key: os.environ[key] for key in _SAFE_ENV if key in os.environ}
    return base | dict(env or {})


@final
class StdioProcess:
    """One MCP server process and the tasks that pump its pipes.

    ``start(nursery)`` spawns it and returns the stream ends the SDK's
    ``ClientSession`` takes; ``stop()`` ends it. ``exited``
    is set once its stdout has ended (the server exited or closed it).
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str] | None,
        cwd: str | os.PathLike[str] | None,
        label: str,
    ) -> None:
        self._argv = [command, *args]
        self._env = server_environment(env)
        self._cwd = None if cwd is None else Path(cwd)
        self.label = label
        self.process: trio.Process | None = None
        self.exited = trio.Event()
        self.reason: str | None = None  # why the connection ended, when we ended it
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self.stderr_done = trio.Event()
        self._to_session: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._from_session: MemoryObjectReceiveStream[SessionMessage] | None = None

    def returncode(self) -> int | None:
        """The server's exit status once it has been reaped, else None."""
        return None if self.process is None else self.process.returncode

    async def start(self, nursery: trio.Nursery) -> Streams:
        """Spawn the server (``OSError`` if it cannot be), start the pumps in
        ``nursery``; return the read and write streams for the ``ClientSession``."""
        self.process = await trio.lowlevel.open_process(
            self._argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,
        )
        # no await from here on: the pumps own the streams before a cancellation can land
        self._to_session, read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        write_stream, self._from_session = anyio.create_memory_object_stream[SessionMessage](0)
        nursery.start_soon(self._read_stdout, self.process, self._to_session)
        nursery.start_soon(self._write_stdin, self.process, self._from_session, self._to_session)
        nursery.start_soon(self._log_stderr, self.process)
        nursery.start_soon(self._watch_exit, self.process, self._to_session)
        return read_stream, write_stream

    async def _watch_exit(
        self, process: trio.Process, to_session: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        """When the server exits, its stdout may stay open (a child it left holds
        it): after ``EXIT_DRAIN`` for what it wrote last, the session's stream is
        ended, so calls in flight end and the exit is seen."""
        await process.wait()
        with trio.move_on_after(EXIT_DRAIN):
            await self.exited.wait()
        if not self.exited.is_set():
            to_session.close()
            self.exited.set()

    async def _read_stdout(
        self, process: trio.Process, to_session: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        """Each stdout line to the session, as a message or as the parse error;
        at the end of stdout, the session's read stream is closed."""
        assert process.stdout is not None
        buffer = bytearray()
        scanned = 0  # bytes of buffer known to hold no line end
        bad = Noise(self.label)
        try:
            async with to_session:
                async for chunk in process.stdout:
                    buffer += chunk
                    while (end := buffer.find(b"\n", scanned)) >= 0:
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        scanned = 0
                        if line.strip():
                            await to_session.send(await _parsed(line, bad))
                    scanned = len(buffer)
                    if len(buffer) > _MAX_LINE:
                        self.reason = f"it sent a message over {_MAX_LINE // 2**20} MiB"
                        logger.warning("%s: %s; the connection is ended", self.label, self.reason)
                        return
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, trio.ClosedResourceError):
            pass  # the session is gone, or our stop() closed stdout
        finally:
            self.exited.set()

    async def _write_stdin(
        self,
        process: trio.Process,
        from_session: MemoryObjectReceiveStream[SessionMessage],
        to_session: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        """Each message of the session to stdin, one JSON line each."""
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send_all(data.encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, anyio.ClosedResourceError):
            # the server closed its stdin or exited: the session sees the end
            await to_session.aclose()

    async def _log_stderr(self, process: trio.Process) -> None:
        """Each stderr line to ``logging`` at DEBUG, cut to a bounded length."""
        assert process.stderr is not None
        buffer = bytearray()
        try:
            async for chunk in process.stderr:
                buffer += chunk
                *lines, rest = buffer.split(b"\n")
                buffer = bytearray(rest[-_MAX_STDERR_LINE:])
                for line in lines:
                    self._stderr_line(line)
        except trio.ClosedResourceError:
            pass
        if buffer:
            self._stderr_line(buffer)
        self.stderr_done.set()

    def _stderr_line(self, line: bytes | bytearray) -> None:
        text = bytes(line[:_MAX_STDERR_LINE]).decode(errors="replace").rstrip()
        if text:
            logger.debug("%s stderr: %s", self.label, text)
            self.stderr_tail.append(text[:_TAIL_LINE])

    async def stop(self) -> None:
        """Close stdin, give the server ``EXIT_GRACE`` to exit, then end its whole
        process group (SIGTERM, the grace again, SIGKILL) and reap it. Shielded:
        it finishes (within about three grace periods) even when cancelled."""
        process = self.process
        with trio.CancelScope(shield=True):
            if self._from_session is not None:
                self._from_session.close()
            if process is None:
                return
            assert process.stdin is not None
            try:
                await process.stdin.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            with trio.move_on_after(EXIT_GRACE):
                await process.wait()
            await _end_group(process)
            if self._to_session is not None:
                self._to_session.close()


async def _end_group(process: trio.Process) -> None:
    """SIGTERM the process group, wait for the leader at most ``EXIT_GRACE``,
    SIGKILL what is left of the group, reap the leader. The group outlives its
    leader while a member lives, so its id cannot be reused meanwhile."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        if sig == signal.SIGTERM and process.returncode is None:
            with trio.move_on_after(EXIT_GRACE):
                await process.wait()
    await process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            await stream.aclose()


async def _parsed(line: bytes, bad: Noise) -> SessionMessage | Exception:
    """``_parse`` of a line, in a worker thread when it is long (never a long
    validation on the trio thread). Cancelled meanwhile, it waits for the thread
    (bounded by the line limit) and the line is dropped with its connection."""
    if len(line) <= _PARSE_INLINE:
        return _parse(line, bad)
    return await trio.to_thread.run_sync(_parse, line, bad)


def _parse(line: bytes, bad: Noise) -> SessionMessage | Exception:
    """One stdout line as a message; a line that is not one is logged and
    passed on as the error (the session hands it to its message handler),
    unless it answers a request we can name: then that request gets an error
    (a response nested too deep to parse must not leave its call waiting)."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        bad.note(f"not a JSON-RPC message on stdout: {line[:200]!r}")
        answered = _ANSWER_ID.match(line)
        if answered is None:
            return exc
        why = (
            NESTED_TOO_DEEPLY if too_deep(str(exc)) else f"could not be read ({type(exc).__name__})"
        )
        error = mcp_types.ErrorData(
            code=mcp_types.PARSE_ERROR, message=f"the server's answer {why}"
        )
        request_id: int | str = msgspec.json.decode(answered.group(1))
        return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
    if isinstance(message, mcp_types.JSONRPCResponse):
        refused = taken_in(message.result)
        if refused is not None:
            error = mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=refused)
            return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error))
    return SessionMessage(message)
