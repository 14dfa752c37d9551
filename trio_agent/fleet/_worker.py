"""``Worker``: a process's share of the fleet. It leases sessions with queued input,
answers that input one turn at a time, and lets each session go when its
inbox is empty.

PostgreSQL spreads the work: a claim is one transaction that locks the
oldest unanswered input rows (``FOR UPDATE SKIP LOCKED``) and takes the
leases of their sessions; a session's lease is then held by the writer of
the resumed agent, renewed by the store's heartbeat, and fences every write,
so a worker that stalls past its lease loses the session to another and
writes nothing more. Workers wake on ``NOTIFY`` and poll as a fallback.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, final

import trio

from .._log import FLEET
from ..events import TurnResult
from ..ledger import LeaseLostError, LedgerCorruptError, LedgerError, SessionLockedError
from ..session import Agent
from ..stores import PostgresStore
from ..stores._base import CloseBudget
from ._claims import Claims
from ._inbox import (
    Input,
    answered,
    inbox_ready,
    input_turn,
    pending,
    postgres_store,
    recorded_result,
    refuse,
)
from ._listen import Listener, channel

__all__ = ["MakeAgent", "Worker"]

MakeAgent = Callable[[PostgresStore, str, bool], Awaitable[Agent]]
"""``make_agent(store, session_id, new)``: the agent for a session the worker took.
``new``: the session is not recorded yet (return ``Agent(store=store,
session_id=session_id, ...)``); else resume it (``await Agent.resume(store,
session_id, ...)``). ``fleet.agent_maker(**options)`` makes one."""

BACKOFF_SECONDS = 30.0  # a session whose agent could not be made is left this long
CLOSE_SECONDS = 5.0  # a stopping worker's sessions close within this, the database there or not


@final
class Worker:
    """Leases sessions with queued input from ``store`` and answers it, up to
    ``concurrency`` sessions at a time (``make_agent`` builds each session's
    agent: see ``MakeAgent``).

    ``await worker.run()`` works until ``drain()`` (or cancellation): it takes
    sessions whose input waits and whose lease is free or expired (a worker
    that died loses its sessions to the others once their leases expire; the
    resume closes what it left open, section 8.2: a call it dispatched
    without a recorded end is ``TOOL_OUTCOME_UNKNOWN``, one never dispatched
    ``TOOL_NOT_STARTED``), answers each input with one turn, stores the turn's
    result for ``wait_for_turn``, and closes the session when its inbox is
    empty. An input a dead worker had recorded is not recorded twice: if the
    model still owes its answer the turn continues, else its recorded result
    is the answer. Input that cannot be run is answered with the reason
    (``wait_for_turn`` raises it) and the session goes on to its next input:
    input its agent refuses as input (a ``TranscriptError`` as its turn
    starts, such as too many blocks) or whose content is no message. A
    failure that may pass (the database away, ``make_agent`` raising) leaves
    the session for ``BACKOFF_SECONDS`` and tries it again, its input kept.
    Wakes on ``NOTIFY``, and polls every ``poll_seconds``.

    ``drain()``: take no more sessions and start no more turns; turns under way
    finish, for ``drain_seconds`` at most, then are cancelled (recorded as
    such: the input stays queued, the next worker continues it); every lease
    is let go and ``run`` returns. Cancelling ``run`` does the same at once.
    Either way the sessions close together, within ``CLOSE_SECONDS`` (after
    ``drain_seconds``) even when the database does not answer: what they could
    not write then is not written, their leases expire, and the next worker
    resumes them from what was stored.
    """

    def __init__(
        self,
        store: PostgresStore,
        make_agent: MakeAgent,
        *,
        concurrency: int = 4,
        poll_seconds: float = 1.0,
        drain_seconds: float = 30.0,
    ) -> None:
        self.store = postgres_store(store, "Worker")
        if not callable(make_agent):
            raise TypeError(f"make_agent must be an async callable, got {make_agent!r}")
        if type(concurrency) is not int or not 1 <= concurrency <= 10_000:
            raise ValueError(f"concurrency must be an int in 1..10000, got {concurrency!r}")
        for name, value in (("poll_seconds", poll_seconds), ("drain_seconds", drain_seconds)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        self._make_agent = make_agent
        self.concurrency = concurrency
        self.poll_seconds = float(poll_seconds)
        self.drain_seconds = float(drain_seconds)
        self.turns = 0  # turns this worker answered input with
        self._held: set[str] = set()
        self._backoff: dict[str, float] = {}
        self._wake = trio.Event()
        self._draining = False
        self._started = False
        self._budget = CloseBudget()  # bounds the sessions' store work once stopping
        self._claims = Claims(self.store)

    @property
    def sessions(self) -> frozenset[str]:
        """The sessions this worker holds now."""
        return frozenset(self._held)

    @property
    def draining(self) -> bool:
        return self._draining

    def drain(self) -> None:
        """Stop taking sessions and turns; ``run`` returns once the turns under way
        ended (cancelled after ``drain_seconds``) and every lease is let go. Safe to
        call from any task, more than once."""
        self._draining = True
        self._wake.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Work until ``drain()``; ``task_status.started()`` once listening (for
        ``nursery.start``). ``LedgerError`` when the database cannot be reached at
        start. Cancellation: the turns under way end as cancelled, recorded, and
        the leases are let go (shielded, ``CLOSE_SECONDS`` at most) before it
        propagates."""
        if self._started:
            raise RuntimeError("a Worker runs once; make another")
        self._started = True
        with self._budget.applied():  # every session's store work, from here on
            await self._run(task_status)
        FLEET.info("worker %s: drained", self.store.holder)

    async def _run(self, task_status: Any) -> None:
        await inbox_ready(self.store)  # the database is reached, or this raises
        listener = Listener(self.store, channel(self.store, "inbox"))
        await listener.open()
        async with trio.open_nursery() as outer:
            outer.start_soon(self._bound_on_cancel)
            outer.start_soon(self._listen, listener)
            task_status.started()
            FLEET.info("worker %s: taking sessions", self.store.holder)
            async with trio.open_nursery() as sessions:
                while not self._draining:
                    await self._claim(sessions)
                    await self._idle()
                FLEET.info("worker %s: draining %d sessions", self.store.holder, len(self._held))
                deadline = trio.current_time() + self.drain_seconds
                sessions.cancel_scope.deadline = deadline
                self._budget.stop(deadline + CLOSE_SECONDS)
            outer.cancel_scope.cancel()

    async def _bound_on_cancel(self) -> None:
        """Once the worker is cancelled (it is cancelled with its sessions), their
        close work, shielded, has ``CLOSE_SECONDS`` all together."""
        try:
            await trio.sleep_forever()
        finally:
            self._budget.stop(trio.current_time() + CLOSE_SECONDS)

    async def _idle(self) -> None:
        with trio.move_on_after(self.poll_seconds):
            await self._wake.wait()
        self._wake = trio.Event()

    async def _listen(self, listener: Listener) -> None:
        """Wake the claim loop on each notification; a lost connection is opened
        again (polling goes on meanwhile)."""
        while True:
            try:
                while True:
                    if await listener.wait(min(self.poll_seconds, 1.0)):
                        self._wake.set()
            except LedgerError as exc:
                FLEET.warning("worker %s: not listening: %s", self.store.holder, exc)
            finally:
                await listener.aclose()
            while True:
                await trio.sleep(self.poll_seconds * 5)
                listener = Listener(self.store, channel(self.store, "inbox"))
                try:
                    await listener.open()
                    break
                except LedgerError:
                    pass  # the next try makes a new one

    async def _claim(self, sessions: trio.Nursery) -> None:
        free = self.concurrency - len(self._held)
        if free <= 0:
            return
        now = trio.current_time()
        self._backoff = {s: until for s, until in self._backoff.items() if until > now}
        skip = [*self._held, *self._backoff]
        try:  # cancelled, what it claims is let go
            claimed = await self._claims.claim(free, skip)
        except LedgerError as exc:
            FLEET.warning("worker %s: cannot claim sessions: %s", self.store.holder, exc)
            return
        for session_id, exists in claimed:
            self._held.add(session_id)
            sessions.start_soon(self._serve, session_id, exists)

    async def _serve(self, session_id: str, exists: bool) -> None:
        try:
            await self._session(session_id, exists)
        except (LeaseLostError, SessionLockedError) as exc:
            if isinstance(exc, SessionLockedError) and await self._claims.still_held(session_id):
                FLEET.error(  # claimed again at once, it would be refused again, forever
                    "session %s: its agent cannot take the lease this worker holds for it: "
                    "make_agent must make the agent on the worker's store (the store it is "
                    "given); left for %s s: %s",
                    session_id,
                    BACKOFF_SECONDS,
                    exc,
                )
                self._back_off(session_id)
            else:
                FLEET.info("session %s: another worker has it: %s", session_id, exc)
        except LedgerCorruptError as exc:
            FLEET.error("session %s: ledger damaged, its input refused: %s", session_id, exc)
            await self._refuse_all(session_id, f"the session's ledger is damaged: {exc}")
        except Exception as exc:
            if self._budget.stopped and isinstance(exc, LedgerError):
                FLEET.warning("session %s: let go as the worker stops: %s", session_id, exc)
            else:
                FLEET.exception("session %s: failed; left for %s s", session_id, BACKOFF_SECONDS)
                self._back_off(session_id)
        finally:
            await self._claims.release(session_id)  # if no writer took it
            self._held.discard(session_id)
            self._wake.set()  # a slot is free; input queued meanwhile is claimed again

    def _back_off(self, session_id: str) -> None:
        self._backoff[session_id] = trio.current_time() + BACKOFF_SECONDS

    async def _refuse_all(self, session_id: str, error: str) -> None:
        store = self.store
        try:
            rows = await store.run("read the inbox", pending, store, session_id)
            await store.run("refuse input", refuse, store, [row.id for row in rows], error)
        except LedgerError as exc:  # the database is away: tried again later
            FLEET.warning("session %s: cannot refuse its input: %s", session_id, exc)
            self._back_off(session_id)

    async def _session(self, session_id: str, exists: bool) -> None:
        store = self.store
        rows = await store.run("read the inbox", pending, store, session_id)
        if not rows:
            return  # answered meanwhile
        if not exists and not any(row.create for row in rows):
            error = "no such session (submit with create=True starts one)"
            await store.run("refuse input", refuse, store, [row.id for row in rows], error)
            return
        agent = await self._make_agent(store, session_id, not exists)
        if not isinstance(agent, Agent) or agent.session_id != session_id:
            if isinstance(agent, Agent):  # resumed already: let its session go
                await agent.aclose()
            raise TypeError(
                f"make_agent must return an Agent for session {session_id!r} in the worker's "
                f"store, got {agent!r}"
            )
        FLEET.debug("session %s: taken, %d inputs waiting", session_id, len(rows))
        async with contextlib.AsyncExitStack() as stack:
            # a recorded session is entered at once (it holds the session's writer, closed
            # whatever happens); a new one at the first input its agent takes, so input
            # it refuses creates nothing
            entered = exists
            if exists:
                await stack.enter_async_context(agent)

            async def enter() -> None:
                nonlocal entered
                if not entered:
                    await stack.enter_async_context(agent)
                    entered = True

            first = exists
            while rows and not self._draining:
                for row in rows:
                    if self._draining:
                        return
                    answer = await self._answer(agent, row, first, enter)
                    first = False
                    if isinstance(answer, str):  # refused: its reason is the answer
                        FLEET.warning(
                            "session %s: input %d refused: %s", session_id, row.id, answer
                        )
                        await store.run("refuse input", refuse, store, [row.id], answer)
                        continue
                    await store.run("store the answer", answered, store, row.id, answer)
                    self.turns += 1
                rows = await store.run("read the inbox", pending, store, session_id)

    async def _answer(
        self,
        agent: Agent,
        row: Input,
        taken_over: bool,
        enter: Callable[[], Awaitable[None]],
    ) -> TurnResult[Any] | str:
        """One turn for ``row`` (the agent entered first, by ``enter``), unless a
        worker before had recorded it whole; or why it cannot run (``input_turn``)."""
        answer = input_turn(agent, row, taken_over)
        if answer is None:
            session_id = agent.session_id
            assert session_id is not None
            return recorded_result((await self.store.load(session_id)).records, row.id)
        if isinstance(answer, str):
            return answer
        await enter()
        return await answer.wait()
