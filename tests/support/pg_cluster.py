"""A throwaway PostgreSQL cluster for the tests: ``initdb`` in a temporary
directory, ``pg_ctl start`` on a unix socket only (no TCP port), fsync off;
stopped and removed afterwards. As root the server runs as the ``postgres``
user (``initdb`` refuses root), through ``runuser``. Debian's PostgreSQL keeps
its programs in ``/usr/lib/postgresql/<version>/bin``, off PATH.

``Bouncer``: PgBouncer (Debian's ``pgbouncer``) in front of such a cluster,
as production fleets run it."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["Bouncer", "Cluster", "pg_bin", "stop_all"]


def pg_bin() -> Path:
    """The newest installed PostgreSQL's program directory (``RuntimeError`` with
    the package to install when there is none: CI installs it)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    on_path = shutil.which("initdb")
    if found:
        return Path(found[-1]).parent
    if on_path:
        return Path(on_path).parent
    raise RuntimeError("PostgreSQL is not installed: apt-get install -y postgresql")


def _version(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in Path(path).parts[-3].split(".") if part.isdigit())


class Cluster:
    """``start()`` a cluster, ``dsn`` to reach it, ``stop()`` to end it."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="trio-agent-pg-"))
        self.data = self.base / "data"
        self.socket = self.base / "socket"
        self.bin = pg_bin()
        self._as_root = os.geteuid() == 0

    @property
    def dsn(self) -> str:
        return f"host={self.socket} dbname=postgres user=postgres"

    def _run(self, *argv: str) -> None:
        command = [str(self.bin / argv[0]), *argv[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> Cluster:
        self.socket.mkdir()
        if self._as_root:
            shutil.chown(self.base, "postgres")
            shutil.chown(self.socket, "postgres")
            self.base.chmod(0o755)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = (
            f"-k {self.socket} -c listen_addresses='' -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.base / "log"),
            "start",
        )
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


class Bouncer:
    """PgBouncer in front of a ``Cluster``, on a unix socket only: ``start()``,
    ``dsn`` to reach the cluster through it, ``stop()`` to end it.

    ``pool_mode`` is PgBouncer's (``transaction``: each transaction may run on
    another server connection); ``pool_size`` server connections at most, so
    with more clients than that they share them (what makes a client's
    session state, such as a prepared statement, land in another's).

    It never outlives the process that started it: it runs in a process group
    of its own, with a parent-death signal (``setpriv --pdeathsig KILL``, set
    after the switch to the ``postgres`` user when run as root: a switch of
    user clears it), so a test run killed with SIGKILL takes it along; ``stop()``
    (also ``stop_all()``, for ``pytest_unconfigure``) kills the group. The
    signal follows the thread that started it: start it from the main thread."""

    def __init__(self, cluster: Cluster, *, pool_mode: str = "transaction", pool_size: int = 2):
        self.cluster = cluster
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.base = Path(tempfile.mkdtemp(prefix="trio-agent-pgbouncer-"))
        self.socket = self.base / "socket"
        self.port = 6432
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"host={self.socket} port={self.port} dbname=postgres user=postgres"

    @property
    def log(self) -> str:
        """What PgBouncer logged so far (its log file)."""
        try:
            return (self.base / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""

    def _config(self) -> Path:
        (self.base / "userlist.txt").write_text('"postgres" ""\n')
        config = self.base / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={self.cluster.socket}\n"
            "[pgbouncer]\n"
            "listen_addr =\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.socket}\n"
            "auth_type = trust\n"
            f"auth_file = {self.base / 'userlist.txt'}\n"
            f"logfile = {self.base / 'pgbouncer.log'}\n"
            f"pool_mode = {self.pool_mode}\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 1000\n"
            "admin_users = postgres\n"
        )
        return config

    def start(self) -> Bouncer:
        program = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(program).exists():
            raise RuntimeError("PgBouncer is not installed: apt-get install -y pgbouncer")
        self.socket.mkdir()
        config = self._config()
        command = ["setpriv", "--pdeathsig", "KILL", program, str(config)]
        if os.geteuid() == 0:  # PgBouncer refuses root; the user switch comes first
            for path in (self.base, self.socket):
                shutil.chown(path, "postgres")
            self.base.chmod(0o755)
            command[1:1] = ["--reuid=postgres", "--regid=postgres", "--init-groups"]
        with open(self.base / "stderr", "wb") as stderr:  # the child keeps its own copy
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                process_group=0,
            )
        _RUNNING.add(self)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until a client is served (a bound that holds on a loaded machine)."""
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                stderr = (self.base / "stderr").read_text(errors="replace")
                self.stop()
                raise RuntimeError(f"pgbouncer exited: {stderr}{self.log}")
            try:
                with psycopg.connect(self.dsn, connect_timeout=5) as connection:
                    connection.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
            time.sleep(0.05)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        """Kill its process group, wait for it, remove its files."""
        process, self._process = self._process, None
        _RUNNING.discard(self)
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        shutil.rmtree(self.base, ignore_errors=True)


_RUNNING: set[Bouncer] = set()


def stop_all() -> None:
    """Stop every PgBouncer this process started and still runs."""
    for bouncer in list(_RUNNING):
        bouncer.stop()
