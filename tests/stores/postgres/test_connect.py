"""PostgresStore through PgBouncer in transaction pooling mode (DESIGN 12.6): no
startup options, its timeouts SET LOCAL in each transaction, no server-side
prepared statements, and psycopg's loggers silent unless the application
configures logging. A real PgBouncer in front of the suite's cluster, with 2
server connections shared by every client (tests/pg_cluster.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import trio

pytest.importorskip("psycopg")

import psycopg
from helpers import alive
from leases import lease_ended
from paths import SUPPORT
from waiting import wait_until_async

from trio_agent import Agent, UserMessage
from trio_agent.ledger import LeaseLostError, Ledger, LedgerError, SessionLockedError, derive
from trio_agent.testing import ScriptedModel, scripted_response


def _answers(prefix: str, count: int = 3) -> list:
    return [scripted_response(f"{prefix}{n}", f"answer {prefix}{n}") for n in range(count)]


def _settings(connection):
    row = connection.execute(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
    ).fetchone()
    return tuple(row)


async def test_a_store_behind_a_transaction_pooler_has_its_timeouts_in_every_transaction(
    pooled_store, pg_store, pg_bouncer
):
    """The store sent its timeouts as startup ``options``: PgBouncer refused every
    connection (``unsupported startup parameter: options``), and told to ignore
    them, dropped them (``SHOW statement_timeout`` gave 0)."""
    store = pooled_store()
    async with Agent(model=ScriptedModel(_answers("a")), store=store, session_id="s1") as agent:
        await agent.prompt("one")
        await agent.prompt("two")
    derived = derive((await store.load("s1")).records)
    assert [m.content for m in derived.messages if m.role == "user"] == ["one", "two"]
    assert derived.turns == 2 and derived.closed
    assert store.pooled is True
    for _ in range(4):  # whichever server connection each transaction gets
        assert await store.run("read the timeouts", _settings) == ("1min", "30s")
    # what a transaction of the same server connections has without the store's SET LOCAL
    with psycopg.connect(pg_bouncer.dsn, autocommit=True) as plain:
        assert _settings(plain) == ("0", "0")
    direct = pg_store()
    assert await direct.run("read the timeouts", _settings) == ("1min", "30s")
    assert direct.pooled is False


async def test_a_lease_is_taken_over_through_a_transaction_pooler(pooled_store):
    """Taking a session over and fencing the old writer off work when each
    transaction may run on another server connection."""
    # a lease of 3 s: its heartbeat (every second) keeps it on a loaded machine, until cut off
    first_store = pooled_store(lease_seconds=3, holder="worker-a")
    second_store = pooled_store(schema=first_store.schema, holder="worker-b")
    first = Agent(model=ScriptedModel(_answers("a")), store=first_store, session_id="s1")
    await first.prompt(UserMessage("u1", "one"))
    with pytest.raises(SessionLockedError, match="'worker-a' holds the lease"):
        await Agent.resume(second_store, "s1", model=ScriptedModel([]))

    def unreachable(*args):
        raise LedgerError("the network is down")

    first_store.renew = unreachable  # its heartbeat is cut off
    await wait_until_async(lambda: lease_ended(second_store, "s1"))  # paused past its lease
    second = await Agent.resume(second_store, "s1", model=ScriptedModel(_answers("b")))
    await second.prompt(UserMessage("u2", "two"))
    with pytest.raises(LeaseLostError, match="taken over"):
        await first.prompt(UserMessage("u3", "three"))
    await second.aclose()
    with pytest.raises(LeaseLostError):
        await first.aclose()
    derived = derive((await second_store.load("s1")).records)
    assert [m.content for m in derived.messages if m.role == "user"] == ["one", "two"]


def _prepared_statement_errors(pg_cluster) -> int:
    log = (pg_cluster.base / "log").read_text(errors="replace")
    return log.count('prepared statement "_pg3_')


async def test_many_sessions_of_many_stores_share_two_server_connections_without_errors(
    pooled_store, pg_cluster, monkeypatch
):
    """psycopg prepared each statement run 5 times on a connection; through a
    transaction pooler the next transaction found another client's, or none:
    ``prepared statement "_pg3_9" already exists``, ``bind message supplies 2
    parameters, but prepared statement "_pg3_16" requires 6``."""
    before = _prepared_statement_errors(pg_cluster)
    stores = [pooled_store()]
    stores += [pooled_store(schema=stores[0].schema) for _ in range(2)]
    commits = []
    for store in stores:
        real = store.call

        def counted(what, *args, real=real):
            commits.append(what)
            return real(what, *args)

        monkeypatch.setattr(store, "call", counted)

    async def work(store, session_id):
        ledger = Ledger(store.create(session_id), 0, "step")
        ledger.session_started(session_id, 0.0, "")
        for i in range(12):  # the same statements again and again
            ledger.step_started(f"request-{i:03d}")
            await ledger.barrier("step")
        await ledger.aclose()
        assert len((await store.load(session_id)).records) == 13

    async with trio.open_nursery() as nursery:
        for n, store in enumerate(stores):
            for i in range(16):
                nursery.start_soon(work, store, f"s{n}-{i}")
    flushes = 3 * 16 * 12
    assert commits.count("write records") < flushes / 2  # group commit works there too
    assert _prepared_statement_errors(pg_cluster) == before


CHILD = textwrap.dedent(
    """
    import logging, os, sys, threading

    if sys.argv[2] == "configured":
        logging.basicConfig()
    from trio_agent.stores import PostgresStore

    logged = threading.Event()
    pool_logger = logging.getLogger("psycopg.pool")
    handle = pool_logger.callHandlers

    def handled(record):  # once its handlers (or the last resort) have had it
        handle(record)
        if record.levelno >= logging.WARNING:
            logged.set()

    pool_logger.callHandlers = handled  # no handler added: the configuration stays as is
    store = PostgresStore(sys.argv[1])
    store.call("reach the database", lambda connection: None)
    print("ready", flush=True)
    sys.stdin.readline()  # the database is away now

    def use():
        try:
            store.call("use the database", lambda connection: None)
        except Exception:
            pass

    threading.Thread(target=use, daemon=True).start()
    print("logged" if logged.wait(60) else "nothing logged", flush=True)
    sys.stderr.flush()
    os._exit(0)
    """
)


@pytest.mark.parametrize("logging_configured", [False, True])
def test_psycopg_logs_reach_stderr_only_through_the_applications_logging(
    pg_cluster, logging_configured
):
    """With no logging configured, psycopg's pool printed its reconnection
    warnings (``error connecting in 'pool-1'``) on stderr, through logging's last
    resort, while the database was down."""
    from pg_cluster import Bouncer

    bouncer = Bouncer(pg_cluster).start()  # the database, for this process; killed below
    try:
        mode = "configured" if logging_configured else "silent"
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, bouncer.dsn, mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        bouncer.stop()
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=120)
    finally:
        bouncer.stop()
    assert out.strip() == "logged"  # psycopg logged a warning while the database was down
    if logging_configured:
        assert "error connecting in" in err  # it reached the application's root handler
    else:
        assert err == ""


def test_a_pgbouncer_of_the_tests_dies_with_the_process_that_started_it(pg_cluster):
    """A test run killed outright (SIGKILL, a CI timeout) must leave no PgBouncer
    running: it gets a parent-death signal."""
    code = textwrap.dedent(
        """
        import sys, time, types
        from pathlib import Path
        sys.path.insert(0, sys.argv[1])
        from pg_cluster import Bouncer

        bouncer = Bouncer(types.SimpleNamespace(socket=Path(sys.argv[2]))).start()
        print(bouncer.pid, bouncer.base, flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(SUPPORT), str(pg_cluster.socket)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    pid, base = child.stdout.readline().split()
    try:
        assert alive(int(pid))
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 60  # a bound that holds on a loaded machine
        while alive(int(pid)):
            assert time.monotonic() < deadline, "pgbouncer outlived the process that started it"
            time.sleep(0.05)
    finally:
        child.stdout.close()
        if alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)
