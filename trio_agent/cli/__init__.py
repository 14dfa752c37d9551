"""The ``trio-agent`` command line: ``demo``, ``run``, ``resume``, ``approve``,
``reject``, ``show``, ``fork``, ``schema``, the fleet's ``worker`` and
``submit``, and ``serve`` (sessions over HTTP).

``_parser`` (the grammar; ``_values``: the values its options take),
``_config`` (a run's configuration, recorded in the ledger), ``_app``
(``--agent MODULE:NAME``: your own agent, or a session factory), ``_output``
(the one printer), ``_drive`` (a session's turns, and the held calls decided
as ``--approve`` says), ``_commands`` (demo, run, resume), ``_approve``
(approve, reject), ``_show``, ``_fork``, ``_stored`` (a session read from a store) and
``_schema`` (the versioned ``--json`` lines), ``_fleet`` (worker, submit, and
``show --dsn``'s reading), ``_serve`` (serve).
"""

from __future__ import annotations

import argparse
import codecs
import io
import json
import logging
import os
import select
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from ._drive import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ._errors import AppError, UsageError
from ._parser import Parsers, build_parser

__all__ = ["main"]


def _schema(args: argparse.Namespace) -> int:
    from ._schema import json_schema

    sys.stdout.write(json.dumps(json_schema(args.kind), indent=2) + "\n")
    return EXIT_OK


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    from ._approve import approve, reject
    from ._commands import demo, resume, run
    from ._fleet import submit_command, worker
    from ._fork import fork
    from ._serve import serve
    from ._show import show

    return {
        "demo": demo,
        "run": run,
        "resume": resume,
        "approve": approve,
        "reject": reject,
        "show": show,
        "fork": fork,
        "schema": _schema,
        "worker": worker,
        "submit": submit_command,
        "serve": serve,
    }[name]


def _unwrapped(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``command(args)``, with an error that trio's nurseries wrapped alone in
    exception groups raised bare, so it is reported as itself."""
    try:
        return command(args)
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if leaf is group or isinstance(leaf, BaseExceptionGroup):
            raise
        raise leaf from leaf.__cause__  # its own cause, not the wrapping


@contextmanager
def _verbose(level: int) -> Iterator[None]:
    """``-v``/``-vv``: the library's loggers to stderr at INFO/DEBUG (named, one
    line each) while the command runs; without them nothing is logged. The
    handler and the level are taken back after (``main`` may be called again)."""
    if not level:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
    root = logging.getLogger("trio_agent")
    before = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO if level == 1 else logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(before)


def _json_escape(error: UnicodeError) -> tuple[str, int]:
    """A character stdout's encoding cannot write, as ``\\uXXXX`` (a pair of them
    beyond the BMP): readable, and still valid inside a ``--json`` line's string."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    escaped = []
    for char in error.object[error.start : error.end]:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            escaped.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            escaped.append(f"\\u{code:04x}")
    return "".join(escaped), error.end


codecs.register_error("trio-agent-escape", _json_escape)


def _escape_what_stdout_cannot_encode() -> None:
    """A terminal that is not UTF-8 (ASCII, Latin-1) gets what it cannot show
    escaped, rather than the command failing on the first such character."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="trio-agent-escape")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``trio-agent`` and ``python -m trio_agent``; returns the exit code."""
    from .. import __version__

    _escape_what_stdout_cannot_encode()
    parsers = build_parser(__version__)
    args = parsers.main.parse_args(argv)  # a usage error exits 2 here
    with _verbose(args.verbose + args.verbose_before):
        return _run(parsers, args)


def _run(parsers: Parsers, args: argparse.Namespace) -> int:
    try:
        return _unwrapped(_command(args.command), args)
    except UsageError as exc:
        return _usage(parsers, args, exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except AppError as exc:
        print(f"trio-agent: {_said(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError as exc:
        if not _stdout_reader_gone():
            print(f"trio-agent: {_said(exc)}", file=sys.stderr)
            return EXIT_USAGE
        # `| head -1` has read its fill: not a failure, and what was done stands.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return EXIT_OK
    except (ValueError, OSError) as exc:  # a workspace that is no directory, a bad file
        print(f"trio-agent: {_said(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        from ..ledger._records import LedgerError, SessionLockedError, SessionNotFoundError
        from ..model import ModelError

        if isinstance(exc, SessionNotFoundError | SessionLockedError):  # asked of a session
            return _usage(parsers, args, exc)  # that is not there, or not free: as `show`
        if isinstance(exc, LedgerError | ModelError):
            print(f"trio-agent: {type(exc).__name__}: {_said(exc)}", file=sys.stderr)
            return EXIT_FAILED
        raise


def _usage(parsers: Parsers, args: argparse.Namespace, exc: Exception) -> int:
    """A usage error: the command's usage line, then what was wrong; exit 2."""
    parser = parsers.commands[args.command]
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {_said(exc)}", file=sys.stderr)
    return EXIT_USAGE


def _said(exc: BaseException) -> str:
    """An error's text for the terminal, its control characters shown as ``\\xNN``
    (``visible``): a file's name or a stored session id may hold escape sequences."""
    from ._output import visible

    return visible(str(exc))


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll says POLLERR)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poll.poll(0))
