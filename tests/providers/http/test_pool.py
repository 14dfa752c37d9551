"""Keep-alive connections (issue 16 item 1, DESIGN 11.3): a model's requests reuse one
connection; the pool is bounded, expires idle connections, replaces a stale one once
(never after a response byte), takes a connection back only when its response was
read to the end, and closes it on cancellation; bytes after a body over TLS and a
connection that answered early are never taken for the next request. Over real
loopback sockets, against a keep-alive server."""

from __future__ import annotations

import gc
import io
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from helpers import tls_contexts
from loopback import Loopback, Reply
from rawserver import Raw, hello_body, sized
from sse_bodies import DONE, anthropic_hello, choice, read, sse
from waiting import WAIT, wait_until

from trio_agent import (
    ModelError,
    ModelRequest,
    ModelRequestError,
    TextDelta,
    ToolRegistry,
    TransientModelError,
    UserMessage,
    run_agent_loop,
)
from trio_agent.providers import AnthropicModel, ConnectionPool, OpenAIChatModel
from trio_agent.providers.http._connection import Connection, Origin
from trio_agent.providers.http._pool import _Run
from trio_agent.testing import explore_cancellation

REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())
HELLO = sse(choice({"content": "Hello"}), choice({"content": " world"}), choice({}, "stop")) + DONE


def hello(**options: object) -> Reply:
    return Reply(body=HELLO, chunked=True, **options)  # type: ignore[arg-type]


@pytest.fixture
async def server() -> AsyncIterator[Loopback]:
    """A keep-alive loopback server: one connection serves request after request."""
    loopback = Loopback(keep_alive=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(loopback.serve)
        yield loopback
        nursery.cancel_scope.cancel()


def openai(server: Loopback, **options: object) -> OpenAIChatModel:
    return OpenAIChatModel("m", api_key="k", base_url=f"{server.url}/v1", **options)  # type: ignore[arg-type]


def text_of(chunks: list[object]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


async def test_three_requests_to_a_keep_alive_server_use_one_connection(server):
    server.replies = [hello(), hello(piece=7), hello()]
    async with openai(server) as model:
        for _ in range(3):
            chunks, response = await read(model, REQUEST)
            assert text_of(chunks) == "Hello world" and response.stop_reason == "stop"
        assert model.pool.connections == 1 and model.pool.idle == 1
    assert server.connections == 1 and len(server.requests) == 3
    assert "connection" not in server.requests[0].headers  # no connection: close sent
    await wait_until(lambda: server.open == 0)  # aclose closed the idle connection


async def test_sized_bodies_are_reused_too_and_a_server_saying_close_is_not(server):
    server.replies = [Reply(body=HELLO), Reply(body=HELLO, headers={"connection": "close"})]
    server.replies.append(Reply(body=HELLO))
    async with openai(server) as model:
        for _ in range(3):
            await read(model, REQUEST)
    assert server.connections == 2  # the second reply said close: the third opened anew


async def test_a_connection_server_without_keep_alive_gets_one_connection_per_request(loopback):
    loopback.replies = [hello(), hello(), hello()]
    async with openai(loopback) as model:
        for _ in range(3):
            await read(model, REQUEST)
        assert model.pool.connections == 0
    assert len(loopback.requests) == 3


async def test_a_response_not_read_to_the_end_closes_its_connection(server):
    server.replies = [hello(piece=5, pause=0.01), hello()]
    async with openai(server) as model:
        async with model.stream(REQUEST) as stream:
            async for _ in stream:
                break  # the rest of the body stays unread
        assert model.pool.connections == 0  # closed, not returned
        await read(model, REQUEST)
    assert server.connections == 2


async def test_a_cancelled_request_returns_its_connection_to_nobody(server):
    server.replies = [hello(piece=5, pause=0.05), hello()]
    async with openai(server) as model:
        with trio.CancelScope() as scope:  # cancelled mid-body: at its first chunk
            async with model.stream(REQUEST) as stream:
                async for _ in stream:
                    scope.cancel()
        assert scope.cancelled_caught
        assert model.pool.connections == 0 and model.pool.idle == 0
        await wait_until(lambda: server.open == 0)  # closed, not kept
        await read(model, REQUEST)
        assert server.connections == 2


async def test_a_stale_pooled_connection_is_replaced_once(server):
    server.replies = [hello(), Reply(drop=True), hello()]
    async with openai(server) as model:
        await read(model, REQUEST)
        chunks, _ = await read(model, REQUEST)  # the pooled one is dropped: sent again
    assert text_of(chunks) == "Hello world"
    assert server.connections == 2 and len(server.requests) == 3


async def test_a_fresh_connection_that_drops_the_request_is_not_sent_again(server):
    server.replies = [hello(), Reply(drop=True), Reply(drop=True), hello()]
    async with openai(server) as model:
        await read(model, REQUEST)
        with pytest.raises(TransientModelError, match="closed the connection before answering"):
            await read(model, REQUEST)
    assert len(server.requests) == 3  # the stale one, then one fresh attempt: no more


async def test_a_pooled_connection_that_answered_a_byte_is_never_sent_again(server):
    server.replies = [hello(), Reply(head=b"HTTP/1.1 200 OK\r\n", drop=False, hang_after=0)]
    server.replies[1].close = True
    async with openai(server, read_seconds=0.2) as model:
        await read(model, REQUEST)
        with pytest.raises(TransientModelError):
            await read(model, REQUEST)
    assert len(server.requests) == 2


async def test_a_connection_the_server_closed_while_idle_is_not_used(server):
    server.replies = [hello(close=True), hello()]
    async with openai(server) as model:
        await read(model, REQUEST)
        await wait_until(lambda: server.open == 0)  # closed: the client's socket has the EOF
        await read(model, REQUEST)
    assert server.connections == 2 and len(server.requests) == 2  # nothing sent to the dead one


async def test_idle_connections_expire(server, autojump_clock):
    server.replies = [hello(), hello(), hello()]
    async with openai(server, pool=ConnectionPool(idle_seconds=5)) as model:
        await read(model, REQUEST)
        await trio.sleep(4)
        await read(model, REQUEST)  # within 5 s: reused
        assert server.connections == 1
        await trio.sleep(6)
        await read(model, REQUEST)
        await model.pool.aclose()
    assert server.connections == 2


async def test_the_servers_keep_alive_timeout_is_honoured(server, autojump_clock):
    header = {"keep-alive": "timeout=3, max=100"}
    server.replies = [hello(headers=header), hello(headers=header), hello()]
    async with openai(server) as model:
        await read(model, REQUEST)
        await trio.sleep(1.5)
        await read(model, REQUEST)
        assert server.connections == 1
        await trio.sleep(2.5)  # past 3 s less a second for the trip
        await read(model, REQUEST)
    assert server.connections == 2


async def test_the_servers_keep_alive_max_is_honoured(server):
    # max: the requests the connection may still serve after this one (Apache counts down)
    server.replies = [hello(headers={"keep-alive": f"max={n}"}) for n in (1, 0, 5, 4)]
    async with openai(server) as model:
        for _ in range(4):
            await read(model, REQUEST)
    assert server.connections == 2


async def test_max_idle_zero_keeps_nothing(server):
    server.replies = [hello(), hello()]
    async with openai(server, pool=ConnectionPool(max_idle=0)) as model:
        await read(model, REQUEST)
        assert model.pool.connections == 0
        await read(model, REQUEST)
    assert server.connections == 2


async def test_a_hundred_concurrent_requests_through_ten_connections(server):
    server.replies = [hello(piece=9, pause=0.001) for _ in range(100)]
    most = 0
    texts: list[str] = []

    async def one(model: OpenAIChatModel) -> None:
        nonlocal most
        chunks, _ = await read(model, REQUEST)
        texts.append(text_of(chunks))
        most = max(most, server.open)

    pool = ConnectionPool(max_connections=10)
    async with pool, trio.open_nursery() as nursery:
        model = openai(server, pool=pool)
        for _ in range(100):
            nursery.start_soon(one, model)
    assert texts == ["Hello world"] * 100
    assert server.connections <= 10 and most <= 10
    assert pool.connections == 0  # closed at the end of its async with


async def test_requests_over_the_limit_wait_their_turn(server):
    server.replies = [hello(piece=9, pause=0.02) for _ in range(6)]
    order: list[int] = []
    pool = ConnectionPool(max_connections=1)
    async with pool, trio.open_nursery() as nursery:
        model = openai(server, pool=pool)

        async def one(n: int) -> None:
            await read(model, REQUEST)
            order.append(n)

        for n in range(6):
            nursery.start_soon(one, n)
            await trio.testing.wait_all_tasks_blocked()  # it waits its turn: they arrive in order
    assert order == list(range(6)) and server.connections == 1


async def test_models_of_two_providers_can_share_a_pool(server):
    server.replies = [hello(), Reply(body=anthropic_hello(), chunked=True), hello()]
    async with ConnectionPool() as pool:
        one = openai(server, pool=pool)
        other = AnthropicModel("m", api_key="k", base_url=server.url, pool=pool)
        await read(one, REQUEST)
        chunks, _ = await read(other, REQUEST)
        assert text_of(chunks) == "Hi"
        await read(one, REQUEST)
        await one.aclose()  # a model does not close a pool it was given
        assert pool.idle == 1
    assert server.connections == 1 and pool.idle == 0


async def test_a_closed_pool_refuses_requests(server):
    server.replies = [hello()]
    model = openai(server)
    await read(model, REQUEST)
    await model.aclose()
    with pytest.raises(ModelRequestError, match="connection pool was closed"):
        await read(model, REQUEST)


async def test_a_pool_dropped_unclosed_closes_its_sockets(server):
    server.replies = [hello()]
    model = openai(server)
    await read(model, REQUEST)
    assert model.pool.idle == 1
    del model
    gc.collect()  # the finalizer closes the idle socket: no ResourceWarning under -W error
    await wait_until(lambda: server.open == 0)


def test_a_pool_used_from_a_second_run_drops_the_first_runs_connections():
    pool = ConnectionPool()
    sockets = []

    async def main() -> None:
        server = Loopback(keep_alive=True)
        server.replies = [hello(), hello()]
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            model = openai(server, pool=pool)
            await read(model, REQUEST)
            sockets.extend(c._socket for run in pool._runs.values() for c in run.idle)
            await read(model, REQUEST)
            assert server.connections == 1
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert pool.idle == 1 and sockets[0].fileno() != -1
    trio.run(main)  # a new run: the old connection is dropped, a new one made
    assert sockets[0].fileno() == -1 and pool.idle == 1
    trio.run(pool.aclose)
    assert sockets[1].fileno() == -1


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True])
def test_pool_limits_are_checked(bad):
    with pytest.raises(ValueError, match="max_connections"):
        ConnectionPool(max_connections=bad)


def test_a_model_checks_its_pool():
    with pytest.raises(TypeError, match="pool must be a ConnectionPool"):
        OpenAIChatModel("m", api_key="k", pool="shared")  # type: ignore[arg-type]


async def test_tls_connections_are_reused_one_handshake_for_three_requests():
    server_context, client_context = tls_contexts()
    server = Loopback(tls=server_context, keep_alive=True)
    server.replies = [hello(), hello(), hello()]
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with openai(server, ssl_context=client_context) as model:
            for _ in range(3):
                chunks, _ = await read(model, REQUEST)
                assert text_of(chunks) == "Hello world"
        nursery.cancel_scope.cancel()
    assert server.connections == 1


async def test_cancelled_at_every_checkpoint_a_pooled_run_leaks_no_connection(server):
    pool = ConnectionPool()
    runs = 0

    def scenario():  # type: ignore[no-untyped-def]
        nonlocal runs
        runs += 1
        server.replies.append(hello(piece=11))
        return run_agent_loop(
            model=openai(server, pool=pool),
            messages=[UserMessage("u1", "hi")],
            tools=ToolRegistry(),
            max_steps=1,
        )

    async def check(events, result):  # type: ignore[no-untyped-def]
        assert pool.connections == pool.idle <= 1  # nothing busy is left behind
        await wait_until(lambda: server.open == pool.idle)  # what the pool does not hold is closed

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 5 and "completed" in report.outcomes
    await pool.aclose()


def idle_connection(origin: Origin, expires: float) -> Connection:
    class Socket:
        def close(self) -> None:
            pass

    connection = Connection(None, origin, Socket())  # type: ignore[arg-type]
    connection.expires = expires
    return connection


A = Origin("https", "a.example", 443)
B = Origin("https", "b.example", 443)


def test_admission_takes_the_newest_idle_connection_to_the_origin():
    pool, run = ConnectionPool(max_connections=3), _Run()
    old, new, other = idle_connection(A, 10), idle_connection(A, 20), idle_connection(B, 20)
    run.idle[:] = [old, other, new]
    run.open = 3
    assert pool._admit(run, A, 5) == (new, [])
    assert run.idle == [old, other] and run.open == 3


def test_admission_drops_expired_connections_and_opens_within_the_limit():
    pool, run = ConnectionPool(max_connections=2), _Run()
    expired = idle_connection(A, 5)
    run.idle[:] = [expired]
    run.open = 2
    assert pool._admit(run, A, 5) == ("open", [expired])  # its slot is the new one's
    assert run.idle == [] and run.open == 2


def test_admission_when_full_closes_the_oldest_idle_connection_elsewhere_or_waits():
    pool, run = ConnectionPool(max_connections=2), _Run()
    first, second = idle_connection(B, 50), idle_connection(B, 60)
    run.idle[:] = [first, second]
    run.open = 2
    assert pool._admit(run, A, 5) == ("open", [first])
    assert run.idle == [second] and run.open == 2
    run.idle[:] = []
    assert pool._admit(run, A, 5) == ("wait", [])
    assert run.open == 2


def test_the_command_line_closes_its_models_connections(capsys):
    from trio_agent.cli._commands import _trio_run
    from trio_agent.cli._output import Output

    closed = []

    class Model:
        async def aclose(self) -> None:
            closed.append(True)

    async def body() -> int:
        return 0

    output = Output(io.StringIO(), io.StringIO())
    assert _trio_run(output, body, Model()) == 0  # type: ignore[arg-type]
    assert closed == [True]


def test_a_pool_used_by_two_trio_runs_at_once_serves_both():
    # Before: a second run swapped the pool's state, and the first run's waiting
    # request was never woken (and max_connections no longer held).
    server = Loopback(keep_alive=True)
    server.replies = [hello(piece=5, pause=0.1)] + [hello() for _ in range(5)]
    up, stop = threading.Event(), threading.Event()

    def serve() -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve)
                up.set()
                await trio.to_thread.run_sync(stop.wait)
                nursery.cancel_scope.cancel()

        trio.run(main)

    serving = threading.Thread(target=serve)
    serving.start()
    up.wait()
    model = openai(server, pool=ConnectionPool(max_connections=1))

    async def one() -> str:
        chunks, _ = await read(model, REQUEST)
        return text_of(chunks)

    parked, outcome = threading.Event(), {}

    def first_run() -> None:
        async def main() -> None:
            with trio.move_on_after(WAIT) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(one)  # holds the run's one connection ~1 s
                    await trio.testing.wait_all_tasks_blocked()
                    nursery.start_soon(one)  # waits for it
                    await trio.testing.wait_all_tasks_blocked()
                    parked.set()
            outcome["first"] = "hung" if scope.cancelled_caught else "ok"

        trio.run(main)

    first = threading.Thread(target=first_run)
    first.start()
    parked.wait()
    try:
        outcome["second"] = trio.run(one)  # another run, meanwhile
    finally:
        first.join()
        stop.set()
        serving.join()
        trio.run(model.aclose)
    assert outcome == {"first": "ok", "second": "Hello world"}


def test_a_pool_collected_outside_any_run_closes_its_sockets():
    sockets = []

    async def main() -> OpenAIChatModel:
        server = Loopback(keep_alive=True)
        server.replies = [hello()]
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            model = openai(server)
            await read(model, REQUEST)
            sockets.extend(c._socket for run in model.pool._runs.values() for c in run.idle)
            nursery.cancel_scope.cancel()
        return model

    model = trio.run(main)
    assert len(sockets) == 1 and sockets[0].fileno() != -1
    del model
    gc.collect()  # no trio run now: the finalizer closes the descriptor itself
    assert sockets[0].fileno() == -1


def test_closing_a_pool_from_another_run_wakes_every_waiter_of_this_one():
    # Before: aclose() woke only its own run's waiters; here one waiter stayed
    # parked for good (found by the second review).
    pool = ConnectionPool(max_connections=1)
    outcomes: list[str] = []
    both = trio.Event()
    origin = Origin("http", "example.invalid", 80)

    async def open_new() -> Connection:
        return Connection(None, origin, trio.socket.socket())  # type: ignore[arg-type]

    async def waiter() -> None:
        try:
            await pool.connection(origin, open_new)
            outcomes.append("connection")
        except ModelRequestError:
            outcomes.append("closed")
        if len(outcomes) == 2:
            both.set()

    async def main() -> None:
        held = await pool.connection(origin, open_new)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()  # both parked
            await trio.to_thread.run_sync(trio.run, pool.aclose)  # closed by another run
            with trio.move_on_after(WAIT):
                await both.wait()
            nursery.cancel_scope.cancel()
        held.close_now()

    trio.run(main)
    assert outcomes == ["closed", "closed"]


HI_REQUEST = ModelRequest(id="r1", messages=(UserMessage("u1", "hi"),), tools=())


async def streamed_text(model: OpenAIChatModel, request: ModelRequest = HI_REQUEST) -> str:
    async with model.stream(request) as stream:
        return "".join(c.text for c in [c async for c in stream] if isinstance(c, TextDelta))


class Holding(trio.abc.Stream):
    """A transport whose sends can be held, then flushed in one socket write."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.hold, self.buf = inner, False, b""

    async def send_all(self, data: Any) -> None:
        if self.hold:
            self.buf += bytes(data)
        else:
            await self.inner.send_all(data)

    async def flush(self) -> None:
        self.hold, data, self.buf = False, self.buf, b""
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> Any:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize(
    "extra", [sized(hello_body("EVIL")), b"\r\n"], ids=["a whole response", "a stray CRLF"]
)
async def test_a_tls_record_after_a_body_is_not_read_by_the_next_request(extra):
    """Issue 16 (review of the transport): bytes after a body, in a second TLS record of the same
    write, were read as the next request's answer."""
    server_context, client_context = tls_contexts()
    holders = {}

    async def wrap(tcp: Any) -> Any:
        holding = Holding(tcp)
        tls = trio.SSLStream(holding, server_context, server_side=True, https_compatible=True)
        await tls.do_handshake()
        holders[id(tls)] = holding
        return tls

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        got = await raw.read_request(stream)
        assert got
        if index > 0:  # a new connection: the second answer
            await stream.send_all(sized(hello_body("second")))
            await trio.sleep(1)
            return
        holding = holders[id(stream)]
        holding.hold = True
        await stream.send_all(sized(hello_body("first")))  # TLS record 1
        await stream.send_all(extra)  # record 2, in the same TCP write
        await holding.flush()
        got = await raw.read_request(stream, got[1])
        if got:
            await stream.send_all(sized(hello_body("second")))
            await trio.sleep(1)

    raw = Raw(handler, wrap=wrap)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        url = f"https://localhost:{raw.port}/v1"
        async with OpenAIChatModel("m", api_key="k", base_url=url, ssl_context=client_context) as m:
            assert await streamed_text(m) == "first"
            await trio.sleep(0.05)
            assert await streamed_text(m) == "second"
        nursery.cancel_scope.cancel()
    assert raw.connections == 2


BIG = ModelRequest(id="r1", messages=(UserMessage("u1", "x" * 8_000_000),), tools=())


async def test_a_connection_that_answered_early_is_never_reused():
    """Issue 16 (review of the transport): a connection that answered before the request was all
    sent went back to the pool."""

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(65536)
        raw.requests.append(buf.partition(b"\r\n\r\n")[0])
        body = b'{"error":{"message":"too large"}}'
        await stream.send_all(sized(body, "", "413 Payload Too Large", "application/json"))
        await trio.sleep(0.05)  # keep-alive says the answer, but the request was cut

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with OpenAIChatModel("m", api_key="k", base_url=f"{raw.url}/v1") as model:
            with pytest.raises(ModelError, match="413"):
                await streamed_text(model, BIG)
            assert model.pool.idle == 0 and model.pool.connections == 0
        nursery.cancel_scope.cancel()
