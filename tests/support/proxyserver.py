"""A real HTTP proxy on 127.0.0.1 for the tests: proxy.py (the PyPI package, in
the ``test`` extra), run as a subprocess.

``running_proxy`` starts one (optionally asking for Basic credentials, optionally
serving TLS itself, an https proxy), waits until it accepts connections and
stops it on exit: SIGTERM, then SIGKILL for its whole process group (it runs in
a session of its own) if it lingers, so no process outlives it; a test process
killed outright takes it along too (the parent-death signal). Its output goes
to a log file that a failed start quotes.

The fixtures start one proxy of each kind per test session (proxy.py takes
about 0.2 s to start and 1 s to stop): ``proxy_server`` (no credentials),
``auth_proxy_server`` (``PROXY_USER``/``PROXY_PASSWORD``, characters a URL must
percent-encode) and ``tls_proxy_server`` (an https proxy whose certificate
``proxy_ca`` issued for 127.0.0.1). A test module takes them with
``pytest_plugins = ["proxyserver"]`` (or tests/conftest.py once for all).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

PROXY_USER = "agent user"
PROXY_PASSWORD = "pä:ss/w@rd%#?"
"""Credentials with characters a proxy URL must percent-encode."""
_START_SECONDS = 30.0
_STOP_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork


def _die_with_the_tests() -> None:
    """Run in the child before exec: SIGTERM it when the test process dies, even
    killed (no ``finally`` runs then), so that no proxy outlives a test run."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True)
class ProxyServer:
    """A running proxy: where it listens, the credentials it asks for (if any),
    and its log."""

    scheme: str
    host: str
    port: int
    user: str | None
    password: str | None
    log: Path

    @property
    def url(self) -> str:
        """Its URL without credentials."""
        return f"{self.scheme}://{self.host}:{self.port}"

    def url_with(self, user: str, password: str) -> str:
        """Its URL with these credentials, percent-encoded."""
        quoted = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}"
        return f"{self.scheme}://{quoted}@{self.host}:{self.port}"

    @property
    def auth_url(self) -> str:
        """Its URL with the credentials it asks for."""
        assert self.user is not None and self.password is not None
        return self.url_with(self.user, self.password)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def running_proxy(
    *, user: str | None = None, password: str | None = None, tls: trustme.LeafCert | None = None
) -> Iterator[ProxyServer]:
    """A proxy.py process on 127.0.0.1 (an ephemeral port) while the block runs.
    With ``user`` and ``password`` it answers 407 to any other credentials; with
    ``tls`` (a certificate for 127.0.0.1) it is an https proxy."""
    with tempfile.TemporaryDirectory(prefix="proxyserver-") as folder:
        home = Path(folder)
        command = [
            *(sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0"),
            *("--port-file", str(home / "port"), "--data-dir", str(home)),
            *("--num-acceptors", "1", "--num-workers", "1", "--log-level", "WARNING"),
        ]
        if user is not None and password is not None:
            command += ["--basic-auth", f"{user}:{password}"]
        if tls is not None:
            tls.private_key_pem.write_to_path(str(home / "key.pem"))
            tls.cert_chain_pems[0].write_to_path(str(home / "cert.pem"))
            command += ["--key-file", str(home / "key.pem"), "--cert-file", str(home / "cert.pem")]
        # No proxy variables (and a HOME of its own): the proxy must not chain to one.
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
        log = home / "log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,  # its own process group: stopped as one
                preexec_fn=_die_with_the_tests,  # one prctl call: safe between fork and exec
            )
        try:
            port = _wait_until_ready(process, home / "port", log)
            yield ProxyServer("https" if tls else "http", "127.0.0.1", port, user, password, log)
        finally:
            _stop(process)


def _wait_until_ready(process: subprocess.Popen[bytes], port_file: Path, log: Path) -> int:
    """The proxy's port, once it accepts a connection there."""
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"proxy.py exited with {process.returncode}: {log.read_text(errors='replace')}"
            )
        try:
            port = int(port_file.read_text().split()[0])
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return port
        except (OSError, ValueError, IndexError):  # no port file yet, or not listening
            time.sleep(0.02)
    raise RuntimeError(f"proxy.py did not start in {_START_SECONDS} s: {log.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL for the process group if it does not exit in time;
    then whatever is left of the group (its workers) is killed too."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            process.wait()
    _kill_group(process.pid)


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # nothing left of it
        os.killpg(group, signal.SIGKILL)


@pytest.fixture(scope="session")
def proxy_server() -> Iterator[ProxyServer]:
    """A real proxy without credentials, shared by the session."""
    with running_proxy() as server:
        yield server


@pytest.fixture(scope="session")
def auth_proxy_server() -> Iterator[ProxyServer]:
    """A real proxy asking for ``PROXY_USER`` / ``PROXY_PASSWORD``."""
    with running_proxy(user=PROXY_USER, password=PROXY_PASSWORD) as server:
        yield server


@pytest.fixture(scope="session")
def proxy_ca() -> trustme.CA:
    """The CA of the TLS proxy's certificate (and of any test server's)."""
    return trustme.CA()


@pytest.fixture(scope="session")
def tls_proxy_server(proxy_ca: trustme.CA) -> Iterator[ProxyServer]:
    """A real https proxy (TLS to the proxy itself), its certificate for
    127.0.0.1 issued by ``proxy_ca``."""
    with running_proxy(tls=proxy_ca.issue_cert("127.0.0.1")) as server:
        yield server
