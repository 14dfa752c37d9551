"""A throwaway PostgreSQL cluster for the tests: ``initdb`` in a temporary
directory, ``pg_ctl start`` on a unix socket only (no TCP port), fsync off;
stopped and removed afterwards. As root the server runs as the ``postgres``
user (``initdb`` refuses root), through ``runuser``. Debian's PostgreSQL keeps
its programs in ``/usr/lib/postgresql/<version>/bin``, off PATH."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["Cluster", "pg_bin"]


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
