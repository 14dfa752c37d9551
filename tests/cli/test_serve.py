"""``trio-agent serve`` as a real process: it serves, drains on SIGTERM, and a
client's event stream resumes exactly across a restart of it."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import httpx
import trio
from cli_runner import BASE_ENV, TRIO_AGENT, cli
from serving import FRESH
from sse_client import finished, read_until
from waiting import WAIT

SUPPORT = str(Path(__file__).resolve().parent.parent / "support")
ENV = {**BASE_ENV, "PYTHONPATH": SUPPORT}
EVENTS = "/sessions/s/events"


class Served:
    """A ``trio-agent serve`` process on port 0, and the URL it said it listens on."""

    def __init__(
        self, store: Path, *extra: str, agent: str = "serve_agents:make_agent", env=None
    ) -> None:
        self.args = [
            *TRIO_AGENT,
            "serve",
            "--agent",
            agent,
            "--store",
            str(store),
            "--port",
            "0",
            *extra,
        ]
        self.env = {**ENV, **(env or {})}
        self.stderr = b""

    async def __aenter__(self) -> Served:
        self.process = await trio.lowlevel.open_process(
            self.args, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=self.env
        )
        with trio.fail_after(WAIT):
            while not (found := re.search(rb"listening on (http://\S+);", self.stderr)):
                data = await self.process.stderr.receive_some(4096)
                assert data, self.stderr
                self.stderr += data
        self.url = found.group(1).decode()
        return self

    async def stop(self) -> int:
        """SIGTERM, and its exit code once it has stopped."""
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(WAIT):
            while data := await self.process.stderr.receive_some(4096):
                self.stderr += data
            return await self.process.wait()

    async def __aexit__(self, *exc_info: object) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        await self.process.stderr.aclose()


async def test_serve_resumes_a_stream_exactly_across_a_restart(tmp_path):
    """Turn 1 read in part; the server stops (SIGTERM: exit 0) and starts again;
    Last-Event-ID gives the rest of turn 1, then turn 2: every event once."""
    store = tmp_path / "store"
    async with (
        Served(store) as served,
        httpx.AsyncClient(base_url=served.url, limits=FRESH) as http,
    ):
        response = await http.post("/sessions/s/turns", json={"message": "one"})
        assert (response.status_code, response.json()) == (202, {"turn": 1})
        part = await read_until(served.url, EVENTS, lambda e: e["type"] == "model.chunk")
        assert await served.stop() == 0
        assert b"trio-agent serve: stopped" in served.stderr
    async with (
        Served(store) as served,
        httpx.AsyncClient(base_url=served.url, limits=FRESH) as http,
    ):
        rest = await read_until(
            served.url, EVENTS, finished(1), headers={"Last-Event-ID": str(part[-1][0])}
        )
        assert (await http.post("/sessions/s/turns", json={"message": "two"})).json() == {"turn": 2}
        rest += await read_until(
            served.url, EVENTS, finished(2), headers={"Last-Event-ID": str(rest[-1][0])}
        )
        whole = await read_until(served.url, EVENTS, finished(2))
        assert await served.stop() == 0
    assert part + rest == whole
    assert [sequence for sequence, _ in whole] == list(range(len(whole)))
    texts = [
        d["event"]["result"]["final_text"]
        for _, d in whole
        if d["event"]["type"] == "turn.finished"
    ]
    assert texts == ["echo: one", "echo: two"]


async def test_serve_beyond_loopback_without_a_token_is_a_usage_error(tmp_path):
    done = await cli(
        [
            *TRIO_AGENT,
            "serve",
            "--agent",
            "serve_agents:make_agent",
            "--store",
            str(tmp_path),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        env=ENV,
    )
    assert done.returncode == 2
    assert b"needs a bearer token" in done.stderr
    assert b"listening" not in done.stderr


async def test_serve_takes_an_agent_and_the_token_from_the_environment(tmp_path):
    """``--agent`` naming an ``Agent`` (its options make each session), and
    ``TRIO_AGENT_TOKEN``: a request without the token is refused, one with it served."""
    token = "a-token-from-the-environment"
    env = {"TRIO_AGENT_TOKEN": token}
    async with Served(tmp_path, agent="serve_agents:template", env=env) as served:
        async with httpx.AsyncClient(base_url=served.url, limits=FRESH) as http:
            refused = await http.post("/sessions/s/turns", json={"message": "hi"})
            assert refused.status_code == 401
            good = {"Authorization": f"Bearer {token}"}
            started = await http.post("/sessions/s/turns", json={"message": "hi"}, headers=good)
            assert started.json() == {"turn": 1}
            events = await read_until(served.url, EVENTS, finished(1), headers=good)
        assert events[-1][1]["event"]["result"]["final_text"] == "echo: hi"
        assert await served.stop() == 0


async def test_serve_sends_keep_alives_as_often_as_told_and_refuses_a_bad_period(tmp_path):
    async with Served(tmp_path, "--keep-alive", "0.05", "--idle-seconds", "0") as served:
        async with httpx.AsyncClient(base_url=served.url, limits=FRESH) as http:
            await http.post("/sessions/s/turns", json={"message": "hi"})
        [*_, (last, _)] = await read_until(served.url, EVENTS, finished(1))
        host, _, port = served.url.removeprefix("http://").rpartition(":")
        got = b""
        with trio.fail_after(WAIT):
            async with await trio.open_tcp_stream(host, int(port)) as stream:
                await stream.send_all(
                    f"GET {EVENTS}?after={last} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
                )
                while b": keep-alive" not in got:
                    got += await stream.receive_some(4096)
        assert await served.stop() == 0
    base = [*TRIO_AGENT, "serve", "--agent", "serve_agents:make_agent", "--store", str(tmp_path)]
    for bad in (["--keep-alive", "-1"], ["--idle-seconds", "soon"]):
        done = await cli([*base, *bad], env=ENV)
        assert done.returncode == 2 and b"seconds" in done.stderr, done.stderr
