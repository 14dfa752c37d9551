"""One table of every figure trio-agent promises, measured by one command.

Runs each benchmark script that measures a promised figure, one after the
other, each in a fresh process of this interpreter with ``--json``; reads
its figures and prints one markdown table: the figure, its target, the
measured value, the baseline it is measured against in the same run, the
ratio, whether the promise is met, and the command that measures it alone.
A figure whose prerequisite is missing (the peers, the SDKs, PostgreSQL,
bubblewrap) gets a "not measured" row, which is not a failure.

Run: ``python benchmarks/all.py`` (about 25 minutes on the project's
2-core machine), ``--quick`` (fewer rounds, smaller sizes: a few minutes),
``--only w1,loop`` (figures or scripts by name), ``--json PATH`` (the table
as JSON, to compare commits), ``--check`` (exit status 1 when a figure
misses its promise). The exit status is 1 when a script crashed, whatever
the options; its stderr's tail is shown.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from _promises import FIGURES, SCRIPTS, UNMEASURED
from _table import Figure, Row, Script, Table, as_json, exit_status, markdown, rows_for_script
from _table import select as select_figures

ROOT = Path(__file__).resolve().parent.parent
TAIL = 20
"""Lines of a crashed script's stderr shown."""


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _bwrap_works() -> bool:
    """Whether bubblewrap is installed and can make a sandbox on this machine."""
    program = shutil.which("bwrap")
    if program is None:
        return False
    try:
        done = subprocess.run(
            [program, "--ro-bind", "/", "/", "--unshare-all", "true"],
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def prerequisites() -> dict[str, bool]:
    """Which prerequisites this machine has (benchmarks/_table.py's PREREQUISITES)."""
    postgres = bool(glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("initdb"))
    return {
        "peers": _has("pydantic_ai") and _has("agents"),
        "sdks": _has("openai") and _has("anthropic"),
        "postgres": postgres and _has("psycopg"),
        "bwrap": _bwrap_works(),
    }


def about(quick: bool) -> dict[str, object]:
    """Where and when the table is measured."""

    def git(*argv: str) -> str:
        try:
            return subprocess.run(
                ["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "?"

    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no") not in ("", "?"):
        commit += " with uncommitted changes"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "python": platform.python_version(),
        "load": f"{load} ({os.cpu_count()} cores)",
        "quick": quick,
    }


def run_script(script: Script, argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
    """Run one script in a fresh process of this interpreter: (status, stdout, stderr);
    its stderr's tail is shown when it fails."""
    command = [sys.executable, *argv, *(("--json",) if script.json_flag else ())]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        status, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:  # run() killed it
        status, out = -9, ""
        caught = expired.stderr or ""
        err = caught if isinstance(caught, str) else caught.decode(errors="replace")
        err += f"\nkilled after the --timeout of {timeout:g} s"
    if status != 0:
        tail = "\n".join(err.rstrip().splitlines()[-TAIL:])
        print(f"  {script.name} failed (exit status {status}); its stderr ends:", file=sys.stderr)
        print("    " + tail.replace("\n", "\n    "), file=sys.stderr)
    return status, out, err


def measure(
    figures: Sequence[Figure], quick: bool, present: dict[str, bool], timeout: float
) -> list[Row]:
    """Run each script the figures need, once, in SCRIPTS' order; their rows in
    FIGURES' order."""
    rows: dict[str, Row] = {}
    wanted = [s for s in SCRIPTS if any(f.script == s.name for f in figures)]
    for index, script in enumerate(wanted, 1):
        mine = [f for f in figures if f.script == script.name]
        argv = script.command(quick, present)
        command = "python " + " ".join(argv)
        output = None
        if all(present.get(need, False) for need in script.needs):
            print(f"[{index}/{len(wanted)}] {command}", file=sys.stderr, flush=True)
            start = time.perf_counter()
            output = run_script(script, argv, timeout)
            took = time.perf_counter() - start
            print(f"  {took:.0f} s", file=sys.stderr, flush=True)
        full = "python " + " ".join(script.command(False, present))
        for row in rows_for_script(mine, command, present, output, script.json_flag, quick, full):
            rows[row.name] = row
    return [rows[f.name] for f in figures]


def unmeasured_rows() -> list[Row]:
    return [Row(title, "", target, "-", "-", "-", why, "") for title, target, why in UNMEASURED]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, smaller sizes")
    parser.add_argument("--only", metavar="NAME[,NAME]", help="these figures or scripts alone")
    parser.add_argument("--json", metavar="PATH", help="also write the table as JSON to PATH")
    parser.add_argument("--check", action="store_true", help="exit 1 if a promise is missed")
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds a script may take (3600)"
    )
    parser.add_argument(
        "--list", action="store_true", help="list the figures and scripts by name, and stop"
    )
    args = parser.parse_args()
    if args.list:
        for figure in FIGURES:
            print(f"{figure.name:20} {figure.script:14} {figure.title}")
        return
    try:
        figures = select_figures(FIGURES, args.only)
    except ValueError as error:
        parser.error(str(error))
    rows = measure(figures, args.quick, prerequisites(), args.timeout)
    if not args.only:
        rows += unmeasured_rows()
    table = Table(tuple(rows), about(args.quick))
    print(markdown(table), end="")
    if args.json:
        Path(args.json).write_text(json.dumps(as_json(table), indent=2) + "\n")
    sys.exit(exit_status(rows, args.check))


if __name__ == "__main__":
    main()
