"""Running the documentation's blocks as a reader would: each Python block in a
fresh interpreter with ``-W error``, each ``trio-agent`` command as the
installed command line, in a directory of its own, with an environment
cleared of anything that would change what they do (keys, base URLs, a DSN).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import trio
from docs_blocks import Block
from paths import ROOT

SECONDS = 180  # a bound that holds on a loaded machine: a block takes a second or two
CLEARED = ("_API_KEY", "_BASE_URL", "TRIO_AGENT_DSN")
BASE_ENV = {
    name: value
    for name, value in os.environ.items()
    if not name.endswith(CLEARED) and not name.startswith("OTEL_") and name != "TERM"
}


async def run(
    argv: list[str], cwd: Path, env: dict[str, str], merged: bool = False
) -> subprocess.CompletedProcess[str]:
    """``argv`` to its end, its output captured as text (``merged``: stderr into
    stdout, interleaved as a terminal shows them); no input."""
    streams: dict[str, object] = {"capture_stderr": True}
    if merged:
        streams = {"stderr": subprocess.STDOUT}
    with trio.fail_after(SECONDS):
        done = await trio.run_process(
            argv,
            cwd=cwd,
            env={**BASE_ENV, **env},
            stdin=b"",
            capture_stdout=True,
            check=False,
            **streams,  # type: ignore[arg-type]
        )
    stderr = done.stderr.decode() if done.stderr is not None else ""
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), stderr)


async def run_python(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return await run([sys.executable, "-W", "error", "-c", code], cwd, env)


async def run_cli(
    words: tuple[str, ...], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """A ``trio-agent`` command line (``words`` after ``trio-agent``), as installed;
    stdout and stderr together."""
    argv = [sys.executable, "-W", "error", "-m", "trio_agent", *words]
    return await run(argv, cwd, env, merged=True)


KEYS = {"OPENAI_API_KEY": "sk-docs-test", "ANTHROPIC_API_KEY": "sk-docs-test"}


def fresh_database(cluster_dsn: str) -> str:
    """A new database in the suite's PostgreSQL cluster; its DSN (blocking: call
    it in a worker thread)."""
    import psycopg

    name = f"docs_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster_dsn, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return cluster_dsn.replace("dbname=postgres", f"dbname={name}")


def describe(block: Block, done: subprocess.CompletedProcess[str]) -> str:
    """What a failing block did, for the assertion message."""
    return (
        f"{block.page}:{block.line} (setup {block.setup}) exited {done.returncode}\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )


def build_site(shared: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``mkdocs build --strict`` into ``shared``/site, once for all the test
    processes that share ``shared`` (the first builds under a lock, the others
    read what it found); the site and the build's outcome."""
    out, outcome = shared / "site", shared / "site.json"
    with open(shared / "site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not outcome.exists():
            done = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
                env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
            )
            outcome.write_text(json.dumps([done.returncode, done.stdout, done.stderr]))
    code, stdout, stderr = json.loads(outcome.read_text())
    return out, subprocess.CompletedProcess(["mkdocs", "build"], code, stdout, stderr)
