"""The fleet through PgBouncer (DESIGN 12.6): in transaction mode, woken by NOTIFY
on ``listen_dsn`` (a direct connection), or polling without one, said once in
the log; in session mode as before. A real PgBouncer in front of the suite's
cluster (tests/pg_cluster.py)."""

from __future__ import annotations

import logging

import pytest
import trio
from fleet_agents import add, count_claims
from fleet_agents import answers as _answers
from waiting import WAIT, wait_until

from trio_agent.fleet import Worker, agent_maker, submit, wait_for_turn
from trio_agent.testing import CallableModel

pytest.importorskip("psycopg")

POLLING = "behind a connection pooler and has no listen_dsn"


def _worker(store, poll_seconds):
    make = agent_maker(model=CallableModel(_answers), tools=[add])
    return Worker(store, make, poll_seconds=poll_seconds)


def _polling_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if POLLING in r.getMessage()]


async def _listening(store) -> int:
    """The server connections that LISTEN on the store's channels (on any connection,
    direct or through the pooler: the view is the cluster's)."""
    sql = (
        f"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN \"{store.schema}.%%'"
        " AND state = 'idle'"
    )
    return await store.run("count listeners", lambda c: c.execute(sql).fetchone()[0])


async def test_behind_a_transaction_pooler_a_worker_with_listen_dsn_is_woken_by_notify(
    pooled_store, pg_cluster, caplog, monkeypatch
):
    """Through PgBouncer in transaction mode LISTEN was sent through the pooler:
    it stayed on a server connection that other clients then got, and the
    notifications were lost without a word (each wait 1-2 s, by polling)."""
    store = pooled_store(listen_dsn=pg_cluster.dsn)
    claims = count_claims(monkeypatch)
    worker = _worker(store, poll_seconds=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: claims)  # its first claim found nothing: idle, for an hour
        with trio.fail_after(WAIT):  # only NOTIFY can wake it this soon
            number = await submit(store, "woken", "hello", create=True)
            result = await wait_for_turn(store, "woken", number)
        assert result.final_text == "answered hello"
        assert await _listening(store) >= 1  # the worker's, on the direct connection
        worker.drain()
    assert store.pooled is True
    assert _polling_warnings(caplog) == []


async def test_behind_a_transaction_pooler_without_listen_dsn_the_fleet_polls_and_says_so_once(
    pooled_store, caplog
):
    """Without a direct connection for LISTEN behind a transaction pooler, the
    fleet must poll (a LISTEN there is lost), and say so once."""
    store = pooled_store()
    worker = _worker(store, poll_seconds=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for n in range(3):
            number = await submit(store, f"s{n}", f"hello {n}", create=True)
            result = await wait_for_turn(store, f"s{n}", number)
            assert result.final_text == f"answered hello {n}"
        assert await _listening(store) == 0  # nothing LISTENs through the pooler
        worker.drain()
    (warning,) = _polling_warnings(caplog)  # one, for the worker and the three waits
    assert warning.levelname == "WARNING" and warning.name == "trio_agent.fleet"
    assert "polls" in warning.getMessage()


async def test_behind_a_session_pooler_the_fleet_listens_on_a_listen_dsn_through_it(
    pg_cluster, monkeypatch
):
    """Session pooling works as before: a session of the pooler is a server
    session of its own, so ``listen_dsn`` may name the pooler too."""
    import uuid

    from pg_cluster import Bouncer

    from trio_agent.stores import PostgresStore

    bouncer = Bouncer(pg_cluster, pool_mode="session", pool_size=20).start()
    store = PostgresStore(bouncer.dsn, schema=f"t_{uuid.uuid4().hex[:16]}", listen_dsn=bouncer.dsn)
    try:
        claims = count_claims(monkeypatch)
        worker = _worker(store, poll_seconds=3600)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await wait_until(lambda: claims)  # its first claim found nothing: idle, for an hour
            with trio.fail_after(WAIT):  # only NOTIFY can wake it this soon
                number = await submit(store, "s", "hello", create=True)
                result = await wait_for_turn(store, "s", number)
            assert result.final_text == "answered hello"
            worker.drain()
        assert store.pooled is True
    finally:
        store.close()
        bouncer.stop()


async def test_the_command_line_fleet_runs_through_a_transaction_pooler_with_listen_dsn(
    loopback, pg_bouncer, pg_cluster, tmp_path
):
    """``trio-agent worker`` and ``submit`` had no way to name a direct connection
    for LISTEN: behind a transaction pooler they could only poll."""
    import signal
    import uuid

    from cli_runner import ENV, TRIO_AGENT, cli, command, text_stream
    from loopback import Reply

    schema = f"cli_{uuid.uuid4().hex[:12]}"
    loopback.replies += [Reply(body=text_stream("hello to you"))]
    database = ("--dsn", pg_bouncer.dsn, "--listen-dsn", pg_cluster.dsn, "--schema", schema)
    worker = _cli_worker(command(loopback, tmp_path, "worker", *database), ENV)
    try:
        line = await trio.to_thread.run_sync(worker.stderr.readline)
        assert b"sessions at a time" in line, line
        done = await cli([*TRIO_AGENT, "submit", *database, "--create", "--wait", "s1", "hello"])
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode().splitlines()[1] == "hello to you"
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = await trio.to_thread.run_sync(worker.communicate)
    assert worker.returncode == 0, stderr
    assert POLLING.encode() not in stderr


def _cli_worker(argv, env):
    import subprocess

    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
