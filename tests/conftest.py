import os
import sys
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, settings

# The shared helpers (tests/support/) import by their plain names from any folder.
sys.path.insert(0, str(Path(__file__).parent / "support"))

# The command line seals what `run` records with a key in the user's config
# directory: the suite's runs (and the processes it starts) keep theirs apart.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="trio-agent-config-")

import reaper

# Every process this run starts carries its mark, and a watchdog ends them all
# once the run ends, however it ends (kill -9 included): nothing outlives it.
reaper.start()

# The suite runs on a loaded 2-core machine: no property test is held to a
# wall-clock bound (an example's deadline, or how fast its inputs are drawn).
# A test's own @settings inherits this and changes only what it names.
settings.register_profile("loaded", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("loaded")

pytest_plugins = ["proxyserver"]  # a real proxy server (proxy.py) for the proxy tests


@pytest.fixture
async def loopback():
    """A real HTTP server on 127.0.0.1 answering with scripted replies."""
    from loopback import Loopback

    server = Loopback()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL cluster for the whole run (unix socket only),
    started on first use and removed at the end (tests/support/pg_cluster.py)."""
    from pg_cluster import Cluster

    cluster = Cluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_bouncer(pg_cluster):
    """PgBouncer in transaction pooling mode in front of the cluster, with 2 server
    connections for all its clients (tests/pg_cluster.py), for the whole run."""
    from pg_cluster import Bouncer

    bouncer = Bouncer(pg_cluster, pool_mode="transaction", pool_size=2).start()
    try:
        yield bouncer
    finally:
        bouncer.stop()


def pytest_unconfigure(config):
    """No PgBouncer outlives the run, however it ended (the fixture stops its own;
    one killed with the run dies by its parent-death signal)."""
    started = sys.modules.get("pg_cluster")
    if started is not None:
        started.stop_all()


def _store_maker(dsn):
    import uuid

    from trio_agent.stores import PostgresStore

    made = []

    def make(**options):
        options.setdefault("schema", f"t_{uuid.uuid4().hex[:16]}")
        made.append(PostgresStore(dsn, **options))
        return made[-1]

    return make, made


@pytest.fixture
def pg_store(pg_cluster):
    """A ``PostgresStore`` of its own for one test: a fresh schema in the cluster."""
    make, made = _store_maker(pg_cluster.dsn)
    yield make
    for store in made:
        store.close()


@pytest.fixture
def pooled_store(pg_bouncer):
    """``pg_store``, through PgBouncer in transaction mode (``pg_bouncer``)."""
    make, made = _store_maker(pg_bouncer.dsn)
    yield make
    for store in made:
        store.close()


@pytest.fixture(params=["jsonl", "sqlite", "postgres", "pgbouncer"])
def ledger_store(request, tmp_path):
    """Each session store in turn, empty: the conformance tests run on all three
    (PostgreSQL directly and through PgBouncer in transaction mode)."""
    from trio_agent.stores import JsonlStore, SqliteStore

    if request.param == "jsonl":
        return JsonlStore(tmp_path)
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "sessions.db")
    if request.param == "pgbouncer":
        return request.getfixturevalue("pooled_store")()
    return request.getfixturevalue("pg_store")()


@pytest.fixture
def store(ledger_store):
    """The store a ledger or store test records in: each of the three in turn."""
    return ledger_store
