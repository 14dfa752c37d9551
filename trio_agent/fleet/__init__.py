"""Many worker processes, on any machines, sharing sessions through PostgreSQL.

- ``await submit(store, session_id, message)``: queue input for a session,
  from any process (a web handler), and wake the workers;
- ``Worker(store, make_agent, concurrency=N)``: lease sessions with queued
  input, answer it, let them go; a dead worker's sessions are taken over once
  their leases expire, with the resume rules (nothing dispatched twice);
- ``await wait_for_turn(store, session_id, number)``: the result of the turn
  that answered a submitted input;
- ``agent_maker(**options)``: a ``make_agent`` that starts or resumes each
  session with the same options.

The store is a ``PostgresStore`` (the ``[postgres]`` extra); its schema holds
the inbox next to the sessions' records and leases.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._inbox import submit as submit
from ._inbox import wait_for_turn as wait_for_turn
from ._maker import agent_maker as agent_maker
from ._worker import MakeAgent as MakeAgent
from ._worker import Worker as Worker

__all__ = [
    "MakeAgent",
    "Worker",
    "agent_maker",
    "submit",
    "wait_for_turn",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
