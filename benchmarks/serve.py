"""Serving over HTTP: what the event stream costs and how far it fans out.

Run: ``python benchmarks/serve.py`` (``--clients N``, ``--chunks N``,
``--rounds N``). Three measures, each on a scripted model that streams a turn
of ``--chunks`` text pieces (no model time: the serving path is all there is):

1. **Throughput.** Events per second of one turn delivered over SSE to a
   real HTTP client (a socket reading ``GET /sessions/ID/events``), from the
   ``POST`` that starts the turn to the client's reading its
   ``turn.finished``; beside the same turn consumed in process (``async for
   event in agent.turn(...)``, the agent on the same kind of store). Server
   and client share this process and its core; medians of ``--rounds``.
2. **Fan-out.** ``--clients`` concurrent SSE clients on one session of a
   server in a child process: the server's resident memory per client
   (connected and caught up, against before they came), then a turn whose
   events every client must receive, the same complete sequence (checked
   byte for byte), and the time until the last client has the last event.
3. **Latency.** With a client caught up on the session's stream, the time
   from sending ``POST /sessions/ID/turns`` to reading the turn's first event
   (``turn.started``) on the stream; ``--rounds`` x 10 turns.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio
from _figures import add_json_option, json_output, record

from trio_agent.fleet import agent_maker
from trio_agent.testing import CallableModel, scripted_response

HERE = Path(__file__).resolve().parent


def _answer(request):  # type: ignore[no-untyped-def]
    """``chunks N``: N text pieces; anything else: five."""
    text = request.messages[-1].content
    count = int(text.split()[1]) if isinstance(text, str) and text.startswith("chunks ") else 5
    return scripted_response(f"r-{request.id}", "abcd" * count, text_chunks=count)


make_agent = agent_maker(model=CallableModel(_answer, record_requests=False))


# -- a minimal client: HTTP/1.1 over a socket, the stream kept as bytes
def _authority(url: str) -> str:
    """The server's own address, as ``Host``: a server without a token answers
    only requests that name a loopback host."""
    return url.removeprefix("http://")


async def _request(url: str, head: str, body: bytes = b"") -> trio.SocketStream:
    host, _, port = url.removeprefix("http://").rpartition(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(head.encode() + body)
    return stream


async def post_turn(url: str, session: str, message: str) -> None:
    body = b'{"message": "%s"}' % message.encode()
    head = (
        f"POST /sessions/{session}/turns HTTP/1.1\r\nhost: {_authority(url)}\r\n"
        "content-type: application/json"
        f"\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    stream = await _request(url, head, body)
    answer = b""
    while chunk := await stream.receive_some(65536):
        answer += chunk
    await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 202"), answer[:200]


class Reader:
    """One SSE client of a session's events after ``after``: ``data`` is all it
    read; ``until(marker)`` reads until ``marker`` is in what came."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.stream: trio.SocketStream | None = None

    async def connect(self, url: str, session: str, after: int) -> None:
        query = f"?after={after}" if after >= 0 else ""  # -1: from the first event
        head = f"GET /sessions/{session}/events{query} HTTP/1.1\r\nhost: {_authority(url)}\r\n\r\n"
        self.stream = await _request(url, head)
        while b"\r\n\r\n" not in self.data:
            self.data += await self.stream.receive_some(65536)
        assert self.data.startswith(b"HTTP/1.1 200"), bytes(self.data[:200])
        del self.data[: self.data.index(b"\r\n\r\n") + 4]

    async def until(self, marker: bytes, start: int = 0) -> None:
        assert self.stream is not None
        while self.data.find(marker, start) < 0:
            start = max(0, len(self.data) - len(marker))
            chunk = await self.stream.receive_some(65536)
            assert chunk, "the stream ended early"
            self.data += chunk

    def events(self) -> list[bytes]:
        """The events read (chunked transfer framing taken out): each ``id``/``data``."""
        parts = bytes(self.data).split(b"\n\n")  # a chunk's size line may come before an id
        return [part[part.index(b"id: ") :] for part in parts if b"id: " in part]


def _finished(turn: int) -> bytes:
    return b'"type":"turn.finished","turn":%d' % turn


async def _last_sequence(url: str, session: str) -> int:
    """The last event's sequence, read from the stream's start."""
    reader = Reader()
    await reader.connect(url, session, -1)
    await reader.until(b'"type":"turn.finished"')
    last = reader.events()[-1]
    assert reader.stream is not None
    await reader.stream.aclose()
    return int(last.split(b"\n")[0].split(b"id: ")[-1])


# -- 1. throughput
async def throughput(chunks: int, rounds: int) -> tuple[float, float, int]:
    """(events/s over SSE, events/s in process, events per turn), medians."""
    from trio_agent.serve import Server
    from trio_agent.stores import JsonlStore

    over_sse, in_process, events = [], [], 0
    with tempfile.TemporaryDirectory() as where:
        base = await make_agent(JsonlStore(Path(where) / "base"), "base", True)
        server = Server(make_agent, store=Path(where) / "served", port=0)
        async with trio.open_nursery() as nursery:
            [url] = await nursery.start(server.run)
            await post_turn(url, "s", "warm up")
            turn = 1
            for _ in range(rounds):
                start = time.perf_counter()
                events = 0
                async with base.turn(f"chunks {chunks}") as run:
                    async for _event in run:
                        events += 1
                assert run.result.end.reason == "completed", run.result.end
                in_process.append(events / (time.perf_counter() - start))
                after = await _last_sequence(url, "s")
                reader = Reader()
                await reader.connect(url, "s", after)
                turn += 1
                start = time.perf_counter()
                await post_turn(url, "s", f"chunks {chunks}")
                await reader.until(_finished(turn))
                assert b'"end":{"reason":"completed"}' in reader.events()[-1]
                over_sse.append(len(reader.events()) / (time.perf_counter() - start))
                assert reader.stream is not None
                await reader.stream.aclose()
            server.stop()
        await base.aclose()
    return statistics.median(over_sse), statistics.median(in_process), events


# -- 2. and 3.: a server in a child process
def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def _child_server(where: str, nursery: trio.Nursery) -> tuple[trio.Process, str]:
    command = [sys.executable, __file__, "--serve", where]

    async def run(task_status: trio.TaskStatus[trio.Process]) -> None:
        await trio.run_process(command, stdout=-1, check=False, task_status=task_status)

    process: trio.Process = await nursery.start(run)
    line = b""
    while not line.endswith(b"\n"):
        line += await process.stdout.receive_some(1)
    return process, line.decode().strip()


async def fan_out(clients: int, chunks: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as where:
        async with trio.open_nursery() as nursery:
            process, url = await _child_server(where, nursery)
            await post_turn(url, "fan", "warm up")
            after = await _last_sequence(url, "fan")
            before = _rss_kib(process.pid)
            readers = [Reader() for _ in range(clients)]
            for batch in range(0, clients, 100):  # within the listen backlog
                async with trio.open_nursery() as connecting:
                    for reader in readers[batch : batch + 100]:
                        connecting.start_soon(reader.connect, url, "fan", after)
            connected = _rss_kib(process.pid)
            start = time.perf_counter()
            await post_turn(url, "fan", f"chunks {chunks}")
            async with trio.open_nursery() as reading:
                for reader in readers:
                    reading.start_soon(reader.until, _finished(2))
            delivered = time.perf_counter() - start
            peak = _rss_kib(process.pid)
            first = readers[0].events()
            ids = [int(e.split(b"\n")[0].split(b"id: ")[-1]) for e in first]
            assert ids == list(range(after + 1, after + 1 + len(first))), "a gap or a repeat"
            assert all(reader.events() == first for reader in readers), "clients differ"
            for reader in readers:
                assert reader.stream is not None
                await reader.stream.aclose()
            process.terminate()
    return {
        "events": len(first),
        "kib_per_client": (connected - before) / clients,
        "delivered_s": delivered,
        "peak_mib": peak / 1024,
    }


async def latency(rounds: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as where:
        async with trio.open_nursery() as nursery:
            process, url = await _child_server(where, nursery)
            await post_turn(url, "lat", "warm up")
            reader = Reader()
            await reader.connect(url, "lat", -1)
            await reader.until(_finished(1))
            for turn in range(2, 2 + rounds * 10):
                seen = len(reader.data)
                start = time.perf_counter()
                await post_turn(url, "lat", "hi")
                await reader.until(b'"type":"turn.started","turn":%d' % turn, seen)
                times.append(time.perf_counter() - start)
                await reader.until(_finished(turn), seen)
            process.terminate()
    return times


async def serve_child(where: str) -> None:
    from trio_agent.serve import Server

    server = Server(make_agent, store=where, port=0)
    async with trio.open_nursery() as nursery:
        [url] = await nursery.start(server.run)
        print(url, flush=True)


async def main(clients: int, chunks: int, rounds: int) -> None:
    sse, local, events = await throughput(chunks, rounds)
    record(events=events, sse_events_per_s=sse, in_process_events_per_s=local, ratio=sse / local)
    print(f"throughput, a turn of {events} events, medians of {rounds}:")
    print(f"  over SSE to an HTTP client: {sse:,.0f} events/s")
    print(f"  in process (async for):     {local:,.0f} events/s")
    print(f"  ratio: {sse / local:.2f}")
    fan = await fan_out(clients, 100)
    record(clients=clients, fan_out=fan)
    print(f"fan-out, {clients} SSE clients on one session (server in a child process):")
    print(f"  server memory per connected client: {fan['kib_per_client']:.1f} KiB")
    print(
        f"  a turn of {fan['events']:.0f} events to every client, all identical and complete: "
        f"{fan['delivered_s'] * 1000:.0f} ms (server peak RSS {fan['peak_mib']:.0f} MiB)"
    )
    times = sorted(await latency(rounds))
    p90 = times[int(len(times) * 0.9) - 1]
    record(first_event_ms={"median": statistics.median(times) * 1000, "p90": p90 * 1000})
    print(f"POST to the first event on the stream, {len(times)} turns:")
    print(f"  median {statistics.median(times) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=1000)  # MAX_STEP_CHUNKS: 1024
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", metavar="DIR", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.serve:
        trio.run(serve_child, args.serve)
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        with json_output(args.json):
            trio.run(main, args.clients, args.chunks, args.rounds)
