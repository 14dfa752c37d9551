"""Latency per request of trio-agent against httpx with a pooled client, over TLS
through a relay that delays each way by 0, 10, 25 and 50 ms, in one run.
Run: ``python benchmarks/latency.py`` (``--rounds 3 --requests 20 --delays 0,10,25,50``).

The server runs in a separate process (this script with ``--serve``): an
HTTP/1.1 keep-alive server over TLS (a ``trustme`` certificate, its CA trusted
only by this process), and in front of it one relay per delay, which holds
every piece of data D ms in each direction (a round trip costs 2D) and a new
connection's first bytes one round trip more, as a TCP handshake would. Both
clients post the same body and read the same chunked event stream to its end,
under ``trio.run``; the server counts the connections each client opened.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import Any

import trio
from _figures import add_json_option, json_output, record

from trio_agent import ModelRequest, UserMessage
from trio_agent.providers import OpenAIChatModel

try:
    import httpx  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # httpx2, "the next generation", keeps the API under another name
    import httpx2 as httpx  # type: ignore[no-redef, unused-ignore]

DELTAS = 20
TEXT = "".join(f"word{i} " for i in range(DELTAS))
REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u", "go"),), tools=())
TARGET = 1.05  # trio-agent's time per request over httpx's, at most


def events() -> bytes:
    """The SSE body: a role, ``DELTAS`` text deltas, a finish reason, usage, [DONE]."""
    head = {"id": "chatcmpl-lat", "object": "chat.completion.chunk", "created": 1764400000}
    head |= {"model": "gpt-4o-mini", "system_fingerprint": "fp_lat"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [choice], "usage": None}

    bodies = [chunk({"role": "assistant", "content": ""})]
    bodies += [chunk({"content": f"word{i} "}) for i in range(DELTAS)]
    bodies.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 9, "completion_tokens": DELTAS, "total_tokens": 9 + DELTAS}
    bodies.append({**head, "choices": [], "usage": usage})
    lines = ["data: " + json.dumps(b, separators=(",", ":")) + "\n\n" for b in bodies]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def chunked(body: bytes) -> bytes:
    """``body`` in chunked transfer coding, one chunk per event, as the API sends it."""
    parts = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def digest() -> str:
    """What both processes must agree on: the body the server streams."""
    return hashlib.sha256(events()).hexdigest()


# --- the server (its own process) -----------------------------------------------


class Stats:
    """What the origin saw: connections, requests, TLS versions, distinct requests."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0
        self.tls: set[str] = set()
        self.bodies: set[str] = set()

    def snapshot(self) -> str:
        with self.lock:
            return json.dumps(
                {
                    "connections": self.connections,
                    "requests": self.requests,
                    "tls": sorted(self.tls),
                    "distinct_requests": len(self.bodies),
                }
            )


def read_request(
    conn: socket.socket, buffer: bytes
) -> tuple[str, dict[str, str], bytes, bytes] | None:
    """The next request on ``conn`` (line, lower-cased fields, body) and the bytes
    after it, or None when the client closed the connection."""
    try:
        while b"\r\n\r\n" not in buffer:
            part = conn.recv(65536)
            if not part:
                return None
            buffer += part
        head, _, rest = buffer.partition(b"\r\n\r\n")
        line, *lines = head.decode("latin-1").split("\r\n")
        fields = {}
        for field in lines:
            name, _, value = field.partition(":")
            fields[name.strip().lower()] = value.strip()
        length = int(fields.get("content-length", "0"))
        while len(rest) < length:
            part = conn.recv(65536)
            if not part:
                return None
            rest += part
    except OSError:  # a reset, or TLS ended without close_notify
        return None
    return line, fields, rest[:length], rest[length:]


def serve_connection(raw: socket.socket, tls: ssl.SSLContext, stats: Stats) -> None:
    """Serve requests on one connection until the client closes it or asks to."""
    body = chunked(events())
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        conn = tls.wrap_socket(raw, server_side=True)
    except OSError:
        raw.close()
        return
    with stats.lock:
        stats.connections += 1
        stats.tls.add(str(conn.version()))
    with conn:
        buffer = b""
        while (request := read_request(conn, buffer)) is not None:
            line, fields, sent, buffer = request
            close = fields.get("connection", "").lower() == "close"
            found = line.startswith("POST ") and "/chat/completions" in line
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            head += b"transfer-encoding: chunked\r\n" if found else b"content-length: 0\r\n"
            if not found:
                head = head.replace(b"200 OK", b"404 Not Found")
            head += b"connection: close\r\n\r\n" if close else b"\r\n"
            with stats.lock:
                stats.requests += 1
                stats.bodies.add(hashlib.sha256(line.encode() + b"\0" + sent).hexdigest())
            try:
                conn.sendall(head + body if found else head)
            except OSError:
                return
            if close:
                return


def listen(handle: Callable[[socket.socket], None]) -> int:
    """A loopback listener handing each connection to ``handle`` in a thread."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


def pump(src: socket.socket, dst: socket.socket, delay: float, start: float) -> None:
    """Copy ``src`` to ``dst``, each piece ``delay`` s after it came and none
    before ``start``; an end (EOF) is passed on as a half-close."""
    pieces: SimpleQueue[tuple[float, bytes]] = SimpleQueue()

    def read() -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            pieces.put((max(time.monotonic() + delay, start), data))
            if not data:
                return

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            due, data = pieces.get()
            if (pause := due - time.monotonic()) > 0:
                time.sleep(pause)
            if not data:
                dst.shutdown(socket.SHUT_WR)
                return
            dst.sendall(data)
    except OSError:  # one side is gone: wake the other readers
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def relay(delay: float, origin: int) -> Callable[[socket.socket], None]:
    """The handler of a delaying relay to the ``origin`` port. The client's first
    bytes also wait a round trip: its connect returned at once (the kernel
    accepted), where over a real network the TCP handshake takes that long."""

    def link(client: socket.socket) -> None:
        opened = time.monotonic()
        upstream = socket.create_connection(("127.0.0.1", origin))
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ways = [
            threading.Thread(target=pump, args=way, daemon=True)
            for way in (
                (client, upstream, delay, opened + 3 * delay),  # 2D more: the TCP handshake
                (upstream, client, delay, opened),
            )
        ]
        for way in ways:
            way.start()
        for way in ways:
            way.join()
        client.close()
        upstream.close()

    return link


def serve(cert: str, delays: list[float]) -> None:
    """Start the origin and one relay per delay, print their ports, then answer
    ``stats`` lines on stdin with the origin's counts until stdin closes."""
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert)
    tls.set_alpn_protocols(["http/1.1"])
    stats = Stats()
    origin = listen(lambda conn: serve_connection(conn, tls, stats))
    ports = [listen(relay(delay / 1000, origin)) for delay in delays]
    print(json.dumps({"ports": ports, "digest": digest()}), flush=True)
    for line in sys.stdin:
        if line.strip() == "stats":
            print(stats.snapshot(), flush=True)


# --- the clients (this process) ---------------------------------------------------


class Server:
    """The server process: its relays' ports, and its counts on demand."""

    def __init__(self, cert: Path, delays: list[float]) -> None:
        spec = ",".join(f"{d:g}" for d in delays)
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(cert), "--delays", spec],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = json.loads(self.read())
        if hello["digest"] != digest():
            raise SystemExit("the server process streams other bytes than this one would")
        self.ports: list[int] = hello["ports"]

    def read(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit("the server process ended")
        return line

    def stats(self) -> dict[str, Any]:
        """The origin's counts so far (a pipe round trip: not in any timed span)."""
        assert self.process.stdin is not None
        self.process.stdin.write("stats\n")
        self.process.stdin.flush()
        return dict(json.loads(self.read()))

    def close(self) -> None:
        """Close its stdin (it ends then) and wait for it; kill it if it does not."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


async def ours(model: OpenAIChatModel) -> float:
    """Seconds for one trio-agent request, its stream read to the end and checked."""
    start = time.perf_counter()
    async with model.stream(REQUEST) as stream:
        async for _ in stream:
            pass
        response = await stream.response()
    elapsed = time.perf_counter() - start
    text = "".join(getattr(block, "text", "") for block in response.content)
    assert text == TEXT and response.stop_reason == "stop", response
    assert response.usage is not None, response
    return elapsed


def httpx_request(
    client: httpx.AsyncClient, model: OpenAIChatModel
) -> Callable[[], Awaitable[float]]:
    """One httpx request as trio-agent would send it (same URL, fields and body)."""
    url = model.base_url.rstrip("/") + "/chat/completions"
    headers = model.request_headers(REQUEST)
    body = model.encode_request(REQUEST)
    expected = events()

    async def request() -> float:
        start = time.perf_counter()
        async with client.stream("POST", url, content=body, headers=headers) as response:
            data = await response.aread()
        elapsed = time.perf_counter() - start
        assert response.status_code == 200 and data == expected, (response, data[:200])
        return elapsed

    return request


def sse_text(body: bytes) -> str:
    """The text the deltas of an event stream carry."""
    chunks = [json.loads(e[6:]) for e in body.decode().split("\n\n") if e.startswith("data: {")]
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


async def check_text(model: OpenAIChatModel) -> None:
    """A first request: trio-agent's chunks carry the text httpx's bytes carry."""
    texts = []
    async with model.stream(REQUEST) as stream:
        async for chunk in stream:
            texts.append(getattr(chunk, "text", ""))
        await stream.response()
    assert "".join(texts) == sse_text(events()) == TEXT, texts


@dataclass
class Side:
    """One client's requests at one delay: their times and the server's counts."""

    request: Callable[[], Awaitable[float]]
    times: list[float]
    connections: int = 0
    requests: int = 0

    async def phase(self, server: Server, count: int) -> None:
        """``count`` requests one after the other, counted by the server, after
        one untimed request: a pool may have let its connection go while the
        other client took its turn (httpx after 5 s idle)."""
        await self.request()
        before = server.stats()
        for _ in range(count):
            self.times.append(await self.request())
        after = server.stats()
        self.connections += after["connections"] - before["connections"]
        self.requests += after["requests"] - before["requests"]
        assert self.requests == len(self.times), (self.requests, len(self.times))


async def at_delay(
    server: Server, port: int, trust: ssl.SSLContext, rounds: int, count: int
) -> tuple[Side, Side]:
    """Both clients at one relay: trio-agent's text checked first, then rounds
    taken in turns (trio-agent first in even rounds, httpx first in odd ones)."""
    model = OpenAIChatModel(
        "gpt-4o-mini",
        api_key="k",
        base_url=f"https://127.0.0.1:{port}/v1",
        ssl_context=trust,
        proxy=None,
    )
    async with httpx.AsyncClient(verify=trust, http2=False, trust_env=False) as client:
        mine = Side(lambda: ours(model), [])
        theirs = Side(httpx_request(client, model), [])
        try:
            await check_text(model)
            for turn in range(rounds):
                for side in (mine, theirs) if turn % 2 == 0 else (theirs, mine):
                    await side.phase(server, count)
        finally:
            close = getattr(model, "aclose", None)  # a model with a connection pool
            if close is not None:
                await close()
    return mine, theirs


async def measure(server: Server, trust: ssl.SSLContext, args: argparse.Namespace) -> None:
    """Measure at each delay and print the table."""
    version = getattr(httpx, "__version__", "?")
    print(
        f"one request = POST and a {DELTAS}-delta stream read to the end; "
        f"medians of {args.rounds} rounds x {args.requests} requests per client, each "
        f"round after an untimed one (httpx {version}: one pooled AsyncClient, HTTP/1.1); "
        "the relay holds data D ms each way and a new connection's first bytes 2D more "
        "(its TCP handshake); connections: those the timed requests opened, as the "
        "server counted them\n"
    )
    print(
        "| one-way delay | trio-agent | httpx | ratio | <= 1.05x "
        "| connections opened: trio-agent | httpx |"
    )
    print("|---:|---:|---:|---:|---|---:|---:|")
    for delay, port in zip(args.delays, server.ports, strict=True):
        mine, theirs = await at_delay(server, port, trust, args.rounds, args.requests)
        a, b = (statistics.median(side.times) * 1000 for side in (mine, theirs))
        record(
            **{
                f"delay_{delay:g}ms": {
                    "ms": a,
                    "httpx_ms": b,
                    "ratio": a / b,
                    "connections": mine.connections,
                    "httpx_connections": theirs.connections,
                    "requests": mine.requests,
                }
            }
        )
        print(
            f"| {delay:g} ms | {a:.1f} ms | {b:.1f} ms | {a / b:.2f}x "
            f"| {'met' if a <= TARGET * b else 'not met'} "
            f"| {mine.connections} for {mine.requests} requests "
            f"| {theirs.connections} for {theirs.requests} |",
            flush=True,
        )
    stats = server.stats()
    assert stats["distinct_requests"] == 1, stats  # both clients posted the same request
    print(
        f"\nthe server: {stats['connections']} TLS connections ({', '.join(stats['tls'])}), "
        f"{stats['requests']} requests, all with the same request line and body"
    )


def main(args: argparse.Namespace) -> None:
    import trustme  # only the driver needs it

    ca = trustme.CA()
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    with tempfile.TemporaryDirectory() as folder:
        cert = Path(folder) / "server.pem"
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
        server = Server(cert, args.delays)
        try:
            trio.run(measure, server, trust, args)
        finally:
            server.close()


def delays(text: str) -> list[float]:
    """``--delays``: one-way delays in ms, comma-separated."""
    return [float(part) for part in text.split(",")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20, help="per round and client")
    parser.add_argument("--delays", type=delays, default=[0, 10, 25, 50], help="ms, one way")
    parser.add_argument("--serve", metavar="CERT", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.delays)
    else:
        with json_output(args.json):
            main(args)
