"""``Hub``: the served sessions. It makes each session's agent with the factory,
runs its turns (one at a time) in the server's nursery, so that a turn outlives
the request that started it, and publishes each turn's events on the session's
``Feed`` for every client that reads them. It decides held calls and cancels
turns as clients ask, and drains the turns under way when the server stops.
With a place that has an inbox (``PostgresPlace``: its ``Relay``), a turn for a
session another server holds is queued there, and the input queued for the
sessions held here is run here, one turn each, as a posted turn.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, final

import attrs
import trio

from ..events import TurnResult
from ..ledger._records import LedgerError, SessionLockedError
from ..messages._ir import TranscriptError
from ..session._agent import Agent
from ..session._turn_run import TurnRun
from ._bodies import ApiError, period_seconds
from ._feed import Feed
from ._frontend import FrontendTools, ToolOffer, own_tools, with_frontend
from ._making import Making, lost_race
from ._place import Place
from ._views import Decision, Moved, check_decisions, in_use_elsewhere, state_json

if TYPE_CHECKING:
    from ._relay import Relay

__all__ = ["CLOSE_SECONDS", "Hub", "OnDisconnect", "Posted", "SessionFactory", "Watch"]

SERVE = logging.getLogger("trio_agent.serve")

SessionFactory = Callable[[Any, str, bool], "Awaitable[Agent] | Agent"]
"""``factory(store, session_id, new)``: the agent of a session, sync or async.
``new``: the session is not recorded yet (return ``Agent(store=store,
session_id=session_id, ...)``); else resume it (``await Agent.resume(store,
session_id, ...)``). ``trio_agent.fleet.agent_maker(**options)`` makes one."""

OnDisconnect = Literal["detach", "cancel"]
Answers = Sequence[tuple[str, str]]  # a run's answers to held calls: (call id, text)

Posted = tuple[Literal["turn", "queued"], int]
"""A posted turn: ``("turn", n)`` started here, or ``("queued", n)``: input ``n`` of
the fleet's inbox, for the server that holds the session."""

CLOSE_SECONDS: Final = 5.0
"""At shutdown, how long cancelled turns have to end (a tool that ignores
cancellation), and then the sessions' ledgers to close."""


@final
@attrs.define
class _Live:
    """A session this server has touched: its feed, its agent once made, its turn."""

    feed: Feed
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    agent: Agent | None = None
    run: TurnRun[Any] | None = None
    turn: int | None = None  # the running turn's number
    watchers: int = 0
    frontend: FrontendTools | None = None  # an AG-UI client's tools, once offered
    used: float = attrs.field(factory=trio.current_time)  # when a request last touched it
    looking: bool = False  # a task runs the session's queued input
    look_again: bool = False  # input may have been queued since it looked
    new: bool = False  # its agent was made for a session not recorded yet
    detached: bool = False  # its running turn is a background response's: no reader cancels it


@final
@attrs.frozen
class Watch:
    """A client reading a session's events: ``leave`` when it stops reading."""

    hub: Hub
    session_id: str
    feed: Feed

    def leave(self, disconnected: bool) -> None:
        self.hub.left(self.session_id, disconnected)


@final
class Hub:
    """The sessions of ``place``, with their agents made by ``factory``.

    ``await hub.run()`` holds the turns' nursery until ``drain()``: then no turn
    starts (503), the turns under way finish within ``drain_seconds`` or are
    cancelled (recorded as such), every session's ledger is closed and every
    event stream ends once it has sent what was published.
    ``on_disconnect``: what the last reader of a session going away does to its
    running turn: ``detach`` (it goes on) or ``cancel``. ``keepalive_seconds``:
    how long an event stream waits for an event before it sends a ``:
    keep-alive`` comment. ``idle_seconds``: a session with no turn, no reader
    and no request for that long is released (its agent and ledger closed; the
    next request opens it again). None: never.
    """

    def __init__(
        self,
        place: Place,
        factory: SessionFactory,
        *,
        on_disconnect: OnDisconnect = "detach",
        drain_seconds: float = 30.0,
        keepalive_seconds: float | None = 15.0,
        idle_seconds: float | None = 600.0,
    ) -> None:
        if on_disconnect not in ("detach", "cancel"):
            raise ValueError(f"on_disconnect must be 'detach' or 'cancel', got {on_disconnect!r}")
        self.keepalive_seconds = period_seconds("keepalive_seconds", keepalive_seconds)
        self.idle_seconds = period_seconds("idle_seconds", idle_seconds)
        self.place = place
        self.factory = factory
        self.on_disconnect = on_disconnect
        self.drain_seconds = drain_seconds
        self.draining = False
        self._sessions: dict[str, _Live] = {}
        self._nursery: trio.Nursery | None = None
        self._stop = trio.Event()
        self._turn_ended = trio.Event()
        self._closed = False
        self._releasing: dict[str, trio.Event] = {}  # sessions closing as idle: set when done
        self._background = trio.CancelScope()  # releasing idle sessions, following others

    # -- the server's lifetime
    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run turns until ``drain()``, then drain them and close every session.
        Cancelled, the turns end as cancelled and the sessions close (shielded,
        ``CLOSE_SECONDS`` at most)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self._background_tasks)
                task_status.started()
                await self._stop.wait()
                self._background.cancel()
                await self._drain_turns()
                nursery.cancel_scope.deadline = trio.current_time() + CLOSE_SECONDS
        finally:
            self.draining = True
            with trio.CancelScope(shield=True) as closing:
                closing.deadline = trio.current_time() + CLOSE_SECONDS
                await self._close_all()

    async def _drain_turns(self) -> None:
        """Let the turns under way end, for ``drain_seconds`` at most, then cancel
        each (``run.cancel()``: it ends as cancelled and its last events are still
        published, which cancelling the task reading them would lose)."""
        with trio.move_on_after(self.drain_seconds):
            while any(live.run is not None for live in self._sessions.values()):
                await self._turn_ended.wait()
        for live in self._sessions.values():
            if live.run is not None:
                live.run.cancel()

    def drain(self) -> None:
        """Start no more turns; ``run`` returns once the turns under way ended."""
        self.draining = True
        self._stop.set()

    async def _close_all(self) -> None:
        self._closed = True  # no session is taken in from here on (503)
        for session_id, live in list(self._sessions.items()):
            agent, live.agent = live.agent, None
            try:
                if agent is not None:
                    await _close_quietly(session_id, agent)
            finally:
                live.feed.close()

    # -- sessions
    def _live(self, session_id: str) -> _Live:
        live = self._sessions.get(session_id)
        if live is None and self._closed:
            raise ApiError(503, "the server is stopping")
        if live is None:
            live = self._sessions[session_id] = _Live(Feed(self.place.events, session_id))
        live.used = trio.current_time()
        return live

    async def _free(self, live: _Live, session_id: str) -> None:
        """Under ``live.lock``: 409 while a turn runs (one whose end is out: waited out)."""
        while live.run is not None and live.run.result is not None:
            await self._turn_ended.wait()  # set by _drive as it clears the run
        if live.run is not None:
            raise ApiError(409, f"turn {live.turn} of session {session_id} is running")

    async def _settled(self, session_id: str) -> None:
        """Wait until the session, if it is being released as idle, is closed: its
        ledger and event log are then free to open again."""
        releasing = self._releasing.get(session_id)
        if releasing is not None:
            await releasing.wait()

    def holds(self, session_id: str) -> bool:
        """Whether the session's agent is open here (made, and not yet closed)."""
        live = self._sessions.get(session_id)
        return session_id in self._releasing or (live is not None and live.agent is not None)

    async def _release_idle(self, idle: float) -> None:
        """Close the sessions nobody has used for ``idle`` seconds (no turn, no
        reader, no request): their agents and ledgers, their event logs. The next
        request opens them again from the store. Ends when the server stops."""
        while True:
            await trio.sleep(idle / 4)
            now = trio.current_time()
            for session_id, live in list(self._sessions.items()):
                busy = live.run is not None or live.watchers or live.lock.locked()
                if not busy and now - live.used >= idle:
                    del self._sessions[session_id]  # the next request makes it anew
                    self._releasing[session_id] = trio.Event()
                    held = live.agent is not None
                    with trio.CancelScope(shield=True) as closing:
                        closing.deadline = trio.current_time() + CLOSE_SECONDS
                        await self._release(session_id, live)
                    if held and self.place.inbox is not None and self._nursery is not None:
                        # input queued as it was let go, seen neither here nor by
                        # its sender (the lease still held): take it again
                        self._nursery.start_soon(self._take, session_id, True)

    async def _background_tasks(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Until the server stops (``_background`` cancelled): wake the readers of a
        session whose events another server logs, run the input queued for the
        sessions held here, and release idle sessions."""
        async with trio.open_nursery() as background:
            self._background = background.cancel_scope
            await background.start(partial(self.place.follow, self._woken))
            relay = self.place.inbox
            if relay is not None:
                await background.start(partial(relay.follow, self._look, self._held, self._adopt))
            if self.idle_seconds is not None:
                background.start_soon(self._release_idle, self.idle_seconds)
            task_status.started()

    def _woken(self, session_id: str | None) -> None:
        lives = self._sessions.values() if session_id is None else [self._sessions.get(session_id)]
        for live in lives:
            if live is not None and live.watchers:
                live.feed.wake()

    async def _release(self, session_id: str, live: _Live) -> None:
        try:
            agent, live.agent = live.agent, None
            if agent is not None:
                await _close_quietly(session_id, agent)
            live.feed.close()
            SERVE.info("session %s: idle, released", session_id)
        finally:
            self._releasing.pop(session_id).set()

    async def _known(self, session_id: str) -> _Live:
        """The session's entry; ``ApiError(404)`` when it is neither here nor recorded."""
        live = self._sessions.get(session_id)
        if live is not None:
            live.used = trio.current_time()
            return live
        if await self.place.state(session_id) is None:
            raise ApiError(404, f"no session {session_id!r}")
        return self._live(session_id)

    async def _agent(self, live: _Live, session_id: str, create: bool) -> Agent:
        """The session's agent, made once (under ``live.lock``): new when the
        session is not recorded (if ``create``; else ``ApiError(404)``);
        ``ApiError(409)`` when another server holds it."""
        try:
            return await self._acquire(live, session_id, create)
        except SessionLockedError as exc:
            raise in_use_elsewhere(session_id, exc) from None

    async def _acquire(self, live: _Live, session_id: str, create: bool) -> Agent:
        """``_agent``, ``SessionLockedError`` when another server holds the session.
        Once made, the input queued for it is looked at (``_look``)."""
        if live.agent is not None:
            return live.agent
        await self._settled(session_id)
        recorded = await self.place.state(session_id)
        new = recorded is None
        if new and not create:
            raise ApiError(404, f"no session {session_id!r}")
        try:
            made = self.factory(self.place.store, session_id, new)
            if inspect.isawaitable(made):
                made = await made
        except SessionLockedError:
            raise
        except Exception as exc:
            SERVE.exception("session %s: the agent factory failed", session_id)
            raise ApiError(500, f"the agent factory raised {type(exc).__name__}: {exc}") from None
        if not isinstance(made, Agent) or made.session_id != session_id:
            raise ApiError(
                500, f"the agent factory returned {made!r}, not an Agent of session {session_id}"
            )
        if live.frontend is not None:
            made = await with_frontend(made, live.frontend, self.place.store, new)
            if recorded is not None:  # answers recorded before a restart, not yet run
                live.frontend.recall(recorded.decisions)
        live.agent, live.new = made, new
        self._look(session_id)
        return made

    async def offer_tools(self, session_id: str, offers: list[ToolOffer]) -> frozenset[str]:
        """Give the session's agent the client's frontend tools (made anew with them
        the first time); the names of all it has. ``ApiError``: 400 for a tool that
        is no tool or has an own tool's name, 409 while a turn runs."""
        live = self._live(session_id)
        async with live.lock:
            await self._free(live, session_id)
            if live.frontend is None:
                live.frontend = FrontendTools()
                agent, live.agent = live.agent, None
                if agent is not None:  # made without them
                    await _close_quietly(session_id, agent)
            agent = await self._agent(live, session_id, create=True)
            live.frontend.offer(offers, own_tools(agent))
            return live.frontend.names()

    async def answer_calls(
        self, session_id: str, answers: Answers, decisions: Sequence[Decision] = ()
    ) -> bool:
        """``FrontendTools.record`` (with the run's resume entries): whether it goes on."""
        if not answers:
            return False
        live = await self._known(session_id)
        async with live.lock:
            await self._free(live, session_id)
            agent = await self._agent(live, session_id, create=False)
            frontend = live.frontend or FrontendTools()  # none offered: no call is its
            return await frontend.record(agent, answers, decisions)

    async def start_turn(self, session_id: str, message: str | None) -> int:
        """Start a turn on ``message`` (the session made if new); its number, at once.
        ``ApiError``: 409 while a turn runs or another server holds the session,
        400 for input the agent refuses, 503 while the server drains."""
        try:
            return await self._start_turn(session_id, message)
        except SessionLockedError as exc:
            raise in_use_elsewhere(session_id, exc) from None

    async def post_turn(self, session_id: str, message: str | None) -> Posted:
        """``start_turn``; but when another server holds the session and the place has
        an inbox, ``message`` is queued there for the holder (as ``submit`` does):
        ``("queued", its input's number)``; then the session is taken here if it can
        be. ``ApiError``: as ``start_turn``; 400 for content that cannot be queued,
        409 when none can be (no inbox, or no message). Cancelled as it queues, the
        message may be queued (the holder runs it)."""
        try:
            return "turn", await self._start_turn(session_id, message)
        except SessionLockedError as exc:
            relay = self.place.inbox
            if relay is None or message is None:
                raise in_use_elsewhere(session_id, exc) from None
        try:
            queued = await relay.submit(session_id, message)
        except (TranscriptError, ValueError) as exc:
            raise ApiError(400, f"the agent refuses this input: {exc}") from None
        except LedgerError as exc:
            raise in_use_elsewhere(session_id, exc, not_queued=True) from None
        SERVE.info("session %s: held elsewhere; input %d queued", session_id, queued)
        await self._take(session_id, False)
        return "queued", queued

    async def _start_turn(self, session_id: str, message: str | None) -> int:
        live = self._live(session_id)
        async with live.lock:
            return await self._start_locked(live, session_id, message)

    async def _start_locked(
        self, live: _Live, session_id: str, message: str | None, detached: bool = False
    ) -> int:
        """Under ``live.lock``: start a turn on ``message`` (``detached``: that no
        reader leaving cancels); its number."""
        if self.draining or self._nursery is None:
            raise ApiError(503, "the server is stopping: no turn starts")
        await self._free(live, session_id)
        agent = await self._acquire(live, session_id, create=True)
        await self._settled(session_id)
        await live.feed.open()
        try:
            run = agent.turn(message)
        except TranscriptError as exc:
            raise ApiError(400, f"the agent refuses this input: {exc}") from None
        except RuntimeError as exc:
            raise ApiError(409, str(exc)) from None
        live.run, live.turn, live.detached = run, agent.turns + 1, detached
        if not (live.new and self.place.inbox is not None):
            self._nursery.start_soon(self._drive, session_id, live, run)
            return live.turn
        # a new session another server may be making too: wait until this turn has
        # made it (its first event), so a race lost is known before the answer
        turn, made = live.turn, Making()
        self._nursery.start_soon(self._drive, session_id, live, run, None, made)
        await made.event.wait()
        if made.lost is not None:
            raise SessionLockedError(
                f"another server made session {session_id!r} first"
            ) from made.lost
        live.new = False
        return turn

    async def _drive(
        self,
        session_id: str,
        live: _Live,
        run: TurnRun[Any],
        input_id: int | None = None,
        made: Making | None = None,
    ) -> None:
        """Run the turn, publishing each event; for queued input ``input_id``, store
        its result as the answer before another turn may start. A turn that fails
        (its events cannot be logged, its ledger cannot be written) lets the agent
        go: the next request resumes the session from what was recorded. Then the
        session's queued input is looked at."""
        try:
            async with run:
                async for event in run:
                    if made is not None:  # its session is made: the turn runs here
                        made.event.set()
                    await live.feed.publish(event)
            # a queued turn the drain cut stays queued: the next holder continues it
            cut = self.draining and run.result is not None and run.result.end.reason == "cancelled"
            if input_id is not None and run.result is not None and not cut:
                await self._answer(session_id, input_id, run.result)
        except Exception as exc:  # the server goes on; this session resumes next time
            if made is not None and not made.event.is_set() and lost_race(exc):
                made.lost = exc  # another server made the session: its message is queued
            else:
                SERVE.error("session %s: turn %s failed: %r", session_id, live.turn, exc)
            agent, live.agent = live.agent, None
            if agent is not None and not agent.running:
                with trio.CancelScope(shield=True):
                    await _close_quietly(session_id, agent)
        finally:
            if made is not None:
                made.event.set()
            live.run = live.turn = None
            live.used = trio.current_time()
            live.feed.wake()
            self._turn_ended.set()
            self._turn_ended = trio.Event()
            self._look(session_id)

    # -- input queued in the fleet's inbox (``place.inbox``), for sessions held here
    def _held(self) -> list[str]:
        return [s for s, live in self._sessions.items() if live.agent is not None]

    def _adopt(self, session_id: str) -> None:
        """Take a session whose input waits with no holder (its holder died)."""
        if self._nursery is not None and not self.draining:
            self._nursery.start_soon(self._take, session_id, True)

    def _look(self, session_id: str) -> None:
        """Run the session's queued input (a task, one per session), if it is held
        here and the server is not draining: at once, or once the running turn
        ended (its end looks again)."""
        live, nursery, relay = self._sessions.get(session_id), self._nursery, self.place.inbox
        if live is None or live.agent is None or self.draining or nursery is None or relay is None:
            return
        live.look_again = True
        if not live.looking:
            live.looking = True
            nursery.start_soon(self._run_queued, session_id, live, relay)

    async def _run_queued(self, session_id: str, live: _Live, relay: Relay) -> None:
        try:
            while live.look_again and not self.draining:
                live.look_again = False
                async with live.lock:
                    await self._next_input(session_id, live, relay)
        except LedgerError as exc:  # the next notification, turn or poll looks again
            SERVE.warning("session %s: cannot run its queued input: %s", session_id, exc)
        except Exception:  # the server goes on; so does the input, queued
            SERVE.exception("session %s: its queued input failed", session_id)
        finally:
            live.looking = False

    async def _next_input(self, session_id: str, live: _Live, relay: Relay) -> None:
        """Under ``live.lock``: start the turn of the session's oldest queued input,
        answering first those that need no turn (refused, or recorded whole)."""
        if live.run is not None or live.agent is None:
            return  # the running turn's end looks again; a session let go is not run
        for row in await relay.pending(session_id):
            await live.feed.open()
            agent, nursery = live.agent, self._nursery
            if self.draining or nursery is None or agent is None or live.run is not None:
                return  # a draining server leaves it queued for the next holder
            answer = relay.turn(agent, row)  # from here to the turn's start, no await
            if isinstance(answer, str):
                SERVE.warning("session %s: input %d refused: %s", session_id, row.id, answer)
                await relay.refuse(row.id, answer)
            elif answer is None:
                await relay.answer_recorded(session_id, row.id)
            else:
                live.run, live.turn, live.detached = answer, agent.turns + 1, False
                SERVE.info("session %s: input %d runs as turn %d", session_id, row.id, live.turn)
                nursery.start_soon(self._drive, session_id, live, answer, row.id)
                return

    async def _answer(self, session_id: str, input_id: int, result: TurnResult[Any]) -> None:
        relay = self.place.inbox
        assert relay is not None
        try:
            await relay.answer(input_id, result)
        except LedgerError as exc:  # still queued: its recorded turn answers it later
            SERVE.warning("session %s: input %d not answered: %s", session_id, input_id, exc)

    async def _take(self, session_id: str, only_if_queued: bool) -> None:
        """Take the session here, if it can be and (``only_if_queued``) input waits
        for it; taken, that input runs here."""
        relay = self.place.inbox
        try:
            if self.draining or relay is None:
                return
            if only_if_queued and not await relay.pending(session_id):
                return
            live = self._live(session_id)
            async with live.lock:
                await self._acquire(live, session_id, create=False)
        except (ApiError, LedgerError) as exc:  # SessionLockedError too: its holder runs it
            SERVE.debug("session %s: not taken here: %s", session_id, exc)

    async def last_sequence(self, session_id: str) -> int:
        """The sequence of the session's last logged event (-1: none yet): a run
        started next sends only the events after it."""
        live = self._live(session_id)
        async with live.lock:
            await self._settled(session_id)
            await live.feed.open()
            return live.feed.last

    async def cancel(self, session_id: str, turn: int | None = None) -> int:
        """Cancel the running turn (if it is ``turn``); its number. ``ApiError(409)`` if none."""
        live = await self._known(session_id)
        if live.run is None or live.turn is None or turn not in (None, live.turn):
            if live.agent is None and self.place.inbox is not None:  # replicas
                raise ApiError(
                    409,
                    f"no turn of session {session_id} runs on this server; one running "
                    "elsewhere (on the server that holds the session) is cancelled there",
                )
            raise ApiError(409, f"no turn of session {session_id} is running")
        live.run.cancel()
        return live.turn

    async def decide(self, session_id: str, call_id: str, approved: bool, reason: str) -> None:
        """Record a decision on a held call (it starts no turn). ``ApiError``: 404
        for no such session or held call, 409 for one decided already or while a
        turn runs."""
        await self.respond(session_id, [(call_id, approved, reason)], None, start=False)

    async def respond(
        self,
        session_id: str,
        decisions: Sequence[Decision],
        message: str | None,
        *,
        after: int | None = None,
        start: bool = True,
        detached: bool = False,
    ) -> int:
        """Under the session's lock: check that it is still at turn ``after`` (if
        given; else ``Moved``), record ``decisions`` (all, or none: ``ApiError`` as
        ``decide``'s when one cannot be), then (``start``) start a turn on
        ``message`` as ``start_turn`` does (``detached``: a background response's,
        that no reader leaving cancels); its number (0 when none starts)."""
        live = self._live(session_id) if start else await self._known(session_id)
        async with live.lock:
            await self._free(live, session_id)
            if decisions or after is not None:
                agent = await self._agent(live, session_id, create=after == 0)
                if after is not None and agent.turns != after:
                    raise Moved(f"session {session_id} has gone on past turn {after}")
                waiting, decided = agent.pending_approvals, agent.decided_approvals
                check_decisions(decisions, (c.id for c in waiting), (c.id for c in decided))
                (live.frontend or FrontendTools()).check_approvals(decisions, waiting)
                for call_id, approved, reason in decisions:
                    try:
                        await (
                            agent.approve(call_id) if approved else agent.reject(call_id, reason)
                        )
                    except (ValueError, RuntimeError) as exc:
                        raise ApiError(409, str(exc)) from None
            return await self._start_locked(live, session_id, message, detached) if start else 0

    async def state(self, session_id: str) -> dict[str, Any]:
        """The session's derived state as JSON; ``ApiError(404)`` when not recorded."""
        derived = await self.place.state(session_id)
        running = self.running_turn(session_id)
        if running is None and derived is not None and derived.open_turn is not None:
            running = (await self._elsewhere([session_id])).get(session_id)
        if derived is None and running is None:
            raise ApiError(404, f"no session {session_id!r}")
        return state_json(session_id, derived, running)

    async def sessions(self) -> list[dict[str, Any]]:
        """Every recorded session, and those being made here, with the running turn."""
        ids = set(await self.place.sessions())
        ids.update(s for s, live in self._sessions.items() if live.turn is not None)
        elsewhere = await self._elsewhere(None)
        return [
            {"id": s, "running_turn": self.running_turn(s) or elsewhere.get(s)} for s in sorted(ids)
        ]

    async def _elsewhere(self, session_ids: list[str] | None) -> dict[str, int]:
        """Turns other servers run (of these sessions; None: any), by session."""
        relay = self.place.inbox
        return {} if relay is None else await relay.running(session_ids)

    def running_turn(self, session_id: str) -> int | None:
        """The number of the session's turn running here, if one is."""
        live = self._sessions.get(session_id)
        return None if live is None else live.turn

    def readers(self, session_id: str) -> int:
        """How many clients read the session's events now."""
        live = self._sessions.get(session_id)
        return 0 if live is None else live.watchers

    # -- readers
    async def watch(self, session_id: str) -> Watch:
        """A reader of the session's events; ``ApiError(404)`` for no such session."""
        live = await self._known(session_id)
        live.watchers += 1
        return Watch(self, session_id, live.feed)

    def left(self, session_id: str, disconnected: bool) -> None:
        """A reader stopped; the last one going away cancels the running turn under
        ``on_disconnect="cancel"``, unless it is a background response's."""
        live = self._sessions[session_id]
        live.watchers -= 1
        live.used = trio.current_time()
        cancels = disconnected and self.on_disconnect == "cancel" and not live.detached
        if cancels and live.watchers == 0 and live.run is not None:
            SERVE.info("session %s: its last reader left; turn %s cancelled", session_id, live.turn)
            live.run.cancel()


async def _close_quietly(session_id: str, agent: Agent) -> None:
    try:
        await agent.aclose()
    except (LedgerError, RuntimeError) as exc:
        SERVE.warning("session %s: not closed cleanly: %s", session_id, exc)
