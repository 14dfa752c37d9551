"""HTTP/1.1 body framing: trio-agent's sans-IO readers (``providers/_wire.py``)
against h11, on the recorded streams of ``providers.py``, and what h11 framing
would make of the chunk-rate target (at least 20x the official SDK). Issue 16,
items 1 and 8. Run: ``python benchmarks/framing.py`` (about a minute).

Three parts, in one process and one run:

1. Framing alone, no sockets: each response (head and body, built by
   ``providers.py``'s own code) is cut in 64 KiB pieces, what the client's
   connection asks ``receive_some`` for, and de-framed by ``parse_head`` and
   our body reader, and by an ``h11.Connection`` that sent a POST. Both must
   give the same body, read by read, and the same server-sent events.
2. ``providers.py --rounds 3`` in a subprocess (the current code, against the
   SDKs), and a projection: trio-agent's time per chunk with h11's framing
   cost in place of ours.
3. Measured directly: the real adapters over loopback (``providers.py``'s
   server, as a subprocess), with ``_wire.ChunkedReader`` replaced in this
   process only by a reader of the same contract that de-chunks with h11.

Per chunk means a stream's time over its 10,000 deltas, as ``providers.py``
counts (one chunk per event: 10,002 chunks for OpenAI, 10,005 for Anthropic).
"""

from __future__ import annotations

import argparse
import gc
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from functools import partial
from importlib.metadata import version
from typing import Any, ClassVar
from unittest import mock

import h11
import providers  # benchmarks/, on sys.path when this runs as a script
import trio

from trio_agent.model import ModelResponseError, TransientModelError
from trio_agent.providers import AnthropicModel, OpenAIChatModel
from trio_agent.providers.http import _wire
from trio_agent.providers.http._sse import SSEParser

PIECE = 65536
"""Bytes the client's connection asks for per ``receive_some``."""
TARGET = 20.0
"""Deltas per second against the official SDK's, in every framing (item 8)."""
DELTAS = providers.DELTAS
PROVIDER = "bench"


# --- the streams ---------------------------------------------------------------------


def responses() -> dict[str, bytes]:
    """``providers.py``'s four responses (``openai/close``, ``anthropic/chunked``,
    ...), and the same bodies sized (``content-length``), which it does not serve."""
    out = {route.strip("/"): reply for route, reply in providers.replies().items()}
    for provider in ("openai", "anthropic"):
        body = out[f"{provider}/close"].partition(b"\r\n\r\n")[2]
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n"
        out[f"{provider}/sized"] = head % len(body) + b"\r\n" + body
    return out


def cut(reply: bytes, size: int) -> list[bytes]:
    """The response as the connection reads it: pieces of ``size`` bytes."""
    return [reply[at : at + size] for at in range(0, len(reply), size)]


# --- the two framings ----------------------------------------------------------------


def ours(parts: list[bytes]) -> list[bytes]:
    """The body's reads by our framing, as ``_http.HTTPStream`` drives it:
    ``parse_head``, then ``body_reader``'s reader fed piece by piece."""
    feed = iter(parts)
    buffer = b""
    while (found := _wire.parse_head(buffer, PROVIDER)) is None:
        buffer += next(feed)
    status, headers, rest = found
    reader = _wire.body_reader(PROVIDER, status, headers, rest)
    out = []
    while True:
        data = reader.read()
        if data:
            out.append(data)
        elif reader.done:
            return out
        elif more := next(feed, b""):
            reader.feed(more)
        else:
            reader.closed()


def h11_client() -> h11.Connection:
    """A client connection that sent a POST, so it reads the response next."""
    conn = h11.Connection(h11.CLIENT)
    headers = [("host", "127.0.0.1"), ("content-length", "2")]
    conn.send(h11.Request(method="POST", target="/v1/messages", headers=headers))
    conn.send(h11.Data(data=b"{}"))
    conn.send(h11.EndOfMessage())
    return conn


def with_h11(parts: list[bytes]) -> list[bytes]:
    """The body's reads by h11: per piece, ``receive_data`` then ``next_event``
    until ``NEED_DATA``, the read being its ``Data`` events joined; b"" after the
    last piece is the connection closing (the end of a close-delimited body)."""
    conn = h11_client()
    out = []
    for part in [*parts, b""]:
        conn.receive_data(part)
        got = []
        while (event := conn.next_event()) is not h11.NEED_DATA:
            if type(event) is h11.Data:
                got.append(event.data)
            elif type(event) is h11.EndOfMessage:
                if got:
                    out.append(b"".join(got))
                return out
            elif type(event) is h11.Response:
                assert event.status_code == 200, event
        if got:
            out.append(b"".join(got))
    raise AssertionError("h11 saw no end of the message")


_CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


class H11ChunkedReader(_wire.BodyReader):
    """``_wire.ChunkedReader``'s contract (``feed``, ``read``, ``closed``,
    ``done``, ``leftover``), de-chunked by an ``h11.Connection``. The head was
    read by ``parse_head`` already: h11 is handed a minimal chunked one first."""

    __slots__ = ("_conn",)
    made: ClassVar[int] = 0  # readers created: proves the replacement is in use

    def __init__(self, provider: str, start: bytes = b"") -> None:
        super().__init__(provider)
        H11ChunkedReader.made += 1
        self._conn = conn = h11_client()
        conn.receive_data(_CHUNKED_HEAD)
        if type(conn.next_event()) is not h11.Response:
            raise AssertionError("h11 did not take the head")
        conn.receive_data(start)

    def feed(self, data: bytes) -> None:
        self._conn.receive_data(data)

    def read(self) -> bytes:
        if self.done:
            return b""
        conn, got = self._conn, []
        try:
            while (event := conn.next_event()) is not h11.NEED_DATA:
                if type(event) is h11.Data:
                    got.append(event.data)
                elif type(event) is h11.EndOfMessage:
                    self.done = True
                    self.leftover = conn.trailing_data[0]
                    break
        except h11.RemoteProtocolError as exc:
            raise ModelResponseError(f"{self._provider}: {exc}") from None
        return b"".join(got)

    def closed(self) -> None:
        if self.done:
            return
        self._conn.receive_data(b"")
        try:
            self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise TransientModelError(f"{self._provider}: {exc}") from None
        raise TransientModelError(f"{self._provider}: the body ended before its last chunk")


def h11_framing() -> Any:
    """``_wire.ChunkedReader`` replaced by ``H11ChunkedReader`` (``body_reader``
    looks it up on each call), in this process, for the ``with`` block."""
    return mock.patch.object(_wire, "ChunkedReader", H11ChunkedReader)


def drop_in(parts: list[bytes]) -> list[bytes]:
    """``ours`` with ``H11ChunkedReader``: what the direct measurement installs."""
    with h11_framing():
        return ours(parts)


# --- part 1: framing alone -------------------------------------------------------------


def events(reads: list[bytes]) -> list[bytes]:
    """The data of the server-sent events in the body, fed read by read."""
    parser = SSEParser()
    return [value for data in reads for value in parser.feed(data)]


def check(name: str, parts: list[bytes], body: bytes) -> str:
    """Every framing gives ``body``, in the same reads, and the same events; a
    cut-off body fails the same way. Returns a line on the reads and h11's Data
    events."""
    mine, theirs = ours(parts), with_h11(parts)
    assert b"".join(mine) == body, f"{name}: not the body providers.py built"
    assert mine == theirs, f"{name}: the reads differ"
    assert events(mine) == events(theirs) == events([b"".join(mine)]), name
    assert len(events(mine)) > DELTAS, name
    data_events = 0
    if name.endswith("chunked"):
        assert drop_in(parts) == mine, f"{name}: H11ChunkedReader reads otherwise"
        short = cut(b"".join(parts)[:-100], PIECE)
        for reader in (ours, drop_in):
            try:
                reader(short)
            except TransientModelError:
                continue
            raise AssertionError(f"{name}: a cut-off body was taken whole")
        conn = h11_client()
        for part in parts:
            conn.receive_data(part)
            while (event := conn.next_event()) is not h11.NEED_DATA:
                data_events += type(event) is h11.Data
                if type(event) is h11.EndOfMessage:
                    break
    return (
        f"  {name:18} {len(parts):3} pieces, {len(mine):3} reads, {len(events(mine)):,} events"
        + (f", {data_events:,} h11 Data events" if data_events else "")
    )


def timings(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, list[float]]:
    """Microseconds per delta of each function, ``reps`` times, the order
    alternating, gc collected before and disabled during each timing."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            gc.collect()
            gc.disable()
            start = time.perf_counter_ns()
            fns[name]()
            elapsed = time.perf_counter_ns() - start
            gc.enable()
            times[name].append(elapsed / 1000 / DELTAS)
    return times


def framing_alone(reps: int, piece: int) -> dict[str, dict[str, tuple[float, float]]]:
    """Part 1: checks, then the best and the median us per delta of each framing
    for each stream (returned too)."""
    print(f"Part 1: framing alone, {piece:,}-byte pieces, {reps} repetitions, us per delta")
    replies = responses()
    streams = {name: cut(reply, piece) for name, reply in replies.items()}
    for name in sorted(streams):
        body = replies[name.split("/")[0] + "/close"].partition(b"\r\n\r\n")[2]
        print(check(name, streams[name], body))
    print(
        f"  {'stream':18} {'ours best/median':>17} {'h11 best/median':>17} {'h11/ours':>9}"
        f"  {'h11 as ChunkedReader':>20}"
    )
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for name in sorted(streams, key=lambda n: (n.split("/")[1] != "chunked", n)):
        parts = streams[name]
        fns: dict[str, Callable[[], object]] = {
            "ours": partial(ours, parts),
            "h11": partial(with_h11, parts),
        }
        if name.endswith("chunked"):
            fns["drop-in"] = partial(drop_in, parts)
        times = timings(fns, reps)
        got = out[name] = {k: (min(v), statistics.median(v)) for k, v in times.items()}
        cells = [f"{got[k][0]:7.3f} /{got[k][1]:7.3f}" if k in got else "" for k in fns]
        cells += [""] * (3 - len(cells))
        ratio = got["h11"][1] / got["ours"][1]
        print(f"  {name:18} {cells[0]:>17} {cells[1]:>17} {ratio:8.1f}x  {cells[2]:>20}")
    return out


# --- part 2: providers.py, and the projection ----------------------------------------

_ROW = re.compile(
    r"^\s*(OpenAI|Anthropic)\s+(close-delimited|chunked, one per event)\s+"
    r"trio-agent:\s*([\d,]+) deltas/s.*SDK:\s*([\d,]+) deltas/s"
)


def run_providers(rounds: int) -> dict[str, tuple[float, float]]:
    """``providers.py --rounds N`` in a subprocess, its output shown; trio-agent's
    and the SDK's us per delta for each stream (from its deltas/s figures)."""
    command = [sys.executable, providers.__file__, "--rounds", str(rounds)]
    print(f"Part 2: {' '.join(command[1:])} (the current code)", flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    print("".join(f"  | {line}\n" for line in done.stdout.splitlines()), end="")
    if done.returncode:
        print(done.stderr, file=sys.stderr)
        raise SystemExit(f"providers.py failed (exit {done.returncode})")
    rows = {}
    for line in done.stdout.splitlines():
        if found := _ROW.match(line):
            framing = "close" if found[2].startswith("close") else "chunked"
            ours_rate, sdk_rate = (float(found[i].replace(",", "")) for i in (3, 4))
            rows[f"{found[1].lower()}/{framing}"] = (1e6 / ours_rate, 1e6 / sdk_rate)
    if len(rows) != 4:
        raise SystemExit("providers.py's output did not have its four rows")
    return rows


def projection(
    framing: dict[str, dict[str, tuple[float, float]]], measured: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """trio-agent's us per delta with h11's framing cost in place of ours (the
    difference of the best of part 1: the most favourable to h11; and of the
    medians), and its ratio to the SDK, for each stream providers.py measured. The
    ceiling is the SDK over h11's framing alone: the best ratio if all else were free."""
    print("  projected: trio-agent + (h11 - ours) framing cost, us per delta")
    print(
        f"  {'stream':18} {'our framing':>11} {'h11':>7} {'trio-agent':>10} {'SDK':>7}"
        f" {'ratio':>7} {'with h11':>8} {'ratio':>7} {'(medians)':>9} {'ceiling':>7}"
        f"  target {TARGET:.0f}x"
    )
    out = {}
    for name in sorted(measured, key=lambda n: (n.split("/")[1] != "chunked", n)):
        mine, sdk = measured[name]
        (ours_best, ours_median), (h11_best, h11_median) = (
            framing[name]["ours"],
            framing[name]["h11"],
        )
        projected = mine + h11_best - ours_best
        by_medians = sdk / (mine + h11_median - ours_median)
        out[name] = sdk / projected
        verdict = "met" if out[name] >= TARGET else f"missed by {TARGET / out[name]:.1f}x"
        print(
            f"  {name:18} {ours_best:11.3f} {h11_best:7.3f} {mine:10.2f} {sdk:7.1f}"
            f" {sdk / mine:6.1f}x {projected:8.2f} {out[name]:6.1f}x {by_medians:8.1f}x"
            f" {sdk / h11_best:6.1f}x  {verdict}"
        )
    print(
        "  framing: the best of part 1 (its medians: the (medians) ratio); trio-agent, SDK:"
        " providers.py's medians;\n  ceiling: the SDK over h11's framing alone, were all else free"
    )
    return out


# --- part 3: measured directly ---------------------------------------------------------


def _adapters() -> dict[str, tuple[Callable[[str], Any], Callable[[str], Any], Any]]:
    """Per provider: our adapter for a base URL, the SDK's client, its consumer."""
    return {
        "openai": (
            lambda base: OpenAIChatModel("m", api_key="k", base_url=f"{base}/v1"),
            providers.make_openai_sdk,
            providers.openai_sdk,
        ),
        "anthropic": (
            lambda base: AnthropicModel("m", api_key="k", base_url=base),
            providers.make_anthropic_sdk,
            providers.anthropic_sdk,
        ),
    }


async def direct(url: str, rounds: int) -> dict[str, dict[str, float]]:
    """Part 3: each adapter on the chunked stream with our framing and with h11's,
    and the SDK, alternating, after a warm-up each; medians of us per delta."""
    print(f"Part 3: the adapters over loopback, chunked, medians of {rounds} rounds, us per delta")
    print(
        f"  {'stream':18} {'our framing':>11} {'h11 framing':>11} {'SDK':>7}"
        f" {'ratio':>7} {'with h11':>8}  target {TARGET:.0f}x with h11"
    )

    async def aclose(client: Any) -> None:
        await client.close()

    out = {}
    for provider, (adapter, make_sdk, sdk) in _adapters().items():
        base = f"{url}/{provider}/chunked"
        mine = partial(providers.timed, partial(adapter, base), providers.ours)

        async def with_h11_framing(mine: Callable[[], Awaitable[float]] = mine) -> float:
            with h11_framing():
                return await mine()

        runs: dict[str, Callable[[], Awaitable[float]]] = {
            "ours": mine,
            "h11": with_h11_framing,
            "sdk": partial(providers.timed, partial(make_sdk, base), sdk, aclose),
        }
        made = H11ChunkedReader.made
        times: dict[str, list[float]] = {name: [] for name in runs}
        for name in runs:
            await runs[name]()  # warm-up: imports, first-call caches
        for turn in range(rounds):
            for name in list(runs) if turn % 2 == 0 else list(runs)[::-1]:
                times[name].append(await runs[name]() / DELTAS * 1e6)
        if H11ChunkedReader.made - made != rounds + 1:
            raise SystemExit("the h11 reader was not the one the adapter used")
        got = out[f"{provider}/chunked"] = {k: statistics.median(v) for k, v in times.items()}
        ratio = got["sdk"] / got["h11"]
        verdict = "met" if ratio >= TARGET else f"missed by {TARGET / ratio:.1f}x"
        print(
            f"  {provider + '/chunked':18} {got['ours']:11.2f} {got['h11']:11.2f} {got['sdk']:7.1f}"
            f" {got['sdk'] / got['ours']:6.1f}x {ratio:7.1f}x  {verdict}",
            flush=True,
        )
    return out


def measure_direct(rounds: int) -> dict[str, dict[str, float]]:
    """Part 3 against ``providers.py --serve`` (its server, its own process)."""
    with providers.served() as url:
        return trio.run(direct, url, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20, help="part 1's repetitions")
    parser.add_argument("--piece", type=int, default=PIECE, help="part 1's bytes per read")
    parser.add_argument("--provider-rounds", type=int, default=3, help="part 2's --rounds")
    parser.add_argument("--rounds", type=int, default=5, help="part 3's rounds")
    parser.add_argument("--framing-only", action="store_true", help="part 1 alone")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the SDK on the model name
    print(f"Python {sys.version.split()[0]}, h11 {version('h11')}, trio {trio.__version__}")
    framing = framing_alone(args.reps, args.piece)
    if args.framing_only:
        return
    projection(framing, run_providers(args.provider_rounds))
    measure_direct(args.rounds)


if __name__ == "__main__":
    main()
