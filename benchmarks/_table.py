"""The table of every promised figure (``benchmarks/all.py``): what each figure
promises, which script measures it and how its figures are read, and the pure
parts of the table: a script's JSON read into rows, each checked against its
target, the rows as markdown and as JSON, and the exit status.

Nothing here runs a benchmark: ``all.py`` runs the scripts and hands their
output to ``rows_from_output``; the tests feed it recorded output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

PEERS = {"pydantic-ai": "pydantic-ai", "openai-agents": "Agents SDK"}
"""The peers' keys in ``peers/run.py``'s figures, and their names in the table."""

PREREQUISITES = {
    "peers": "the peers are not installed (pip install -r benchmarks/requirements-peers.txt)",
    "sdks": "the official SDKs are not installed (pip install -r "
    "benchmarks/requirements-peers.txt)",
    "postgres": "PostgreSQL's programs are not installed (apt-get install postgresql)",
    "bwrap": "bubblewrap is not installed or cannot make a sandbox here",
}
"""Each prerequisite a script may need, and what its absence means."""


@dataclass(frozen=True)
class Target:
    """What a figure promises: ``text`` as shown, and the bounds ``value`` must
    keep (``low <= value <= high``); no bound at all: a figure without a promise."""

    text: str = "-"
    low: float | None = None
    high: float | None = None

    @property
    def promised(self) -> bool:
        return self.low is not None or self.high is not None

    def met(self, value: float) -> bool:
        """Whether ``value`` keeps the promise (a NaN never does)."""
        if math.isnan(value):
            return False
        if self.low is not None and value < self.low:
            return False
        return self.high is None or value <= self.high


NO_TARGET = Target()


@dataclass(frozen=True)
class Measured:
    """One figure as read from a script: ``value`` is compared with the target;
    the texts are the table's cells."""

    value: float
    shown: str
    baseline: str = "-"
    ratio: str = "-"


@dataclass(frozen=True)
class Figure:
    """One row of the table: ``read`` takes the figures its script printed."""

    name: str
    title: str
    script: str
    target: Target
    read: Callable[[Mapping[str, Any]], Measured]
    needs: tuple[str, ...] = ()
    full_only: bool = False
    """Left out of ``--quick`` (its size is what makes the run long)."""


@dataclass(frozen=True)
class Script:
    """One script run: its arguments (full and ``--quick``), what it needs to
    run at all, and the arguments it adds when an optional prerequisite is there."""

    name: str
    argv: tuple[str, ...]
    quick_argv: tuple[str, ...]
    needs: tuple[str, ...] = ()
    optional: tuple[tuple[str, tuple[str, ...]], ...] = ()
    json_flag: bool = True
    """False: the script prints one JSON object a line already (``resume.py``)."""

    def command(self, quick: bool, present: Mapping[str, bool]) -> tuple[str, ...]:
        """The script's arguments in this run, without ``--json``."""
        argv = self.quick_argv if quick else self.argv
        for need, extra in self.optional:
            if present.get(need, False):
                argv += extra
        return argv


@dataclass(frozen=True)
class Row:
    """One row as shown. ``verdict``: ``pass``, ``FAIL``, ``-`` (no promise),
    ``not measured: why``, or ``crashed: why``."""

    figure: str
    name: str
    target: str
    measured: str
    baseline: str
    ratio: str
    verdict: str
    command: str
    value: float | None = None


@dataclass(frozen=True)
class Table:
    """The rows and the run they come from (date, commit, load, quick or not)."""

    rows: tuple[Row, ...]
    about: Mapping[str, Any] = field(default_factory=dict)


# -- reading a script's output


def parse_output(stdout: str, json_flag: bool) -> dict[str, Any]:
    """A script's figures: the last line that is a JSON object (``--json``), or
    every such line as ``{"lines": [...]}`` for a script that prints JSON lines.
    ``ValueError`` when there is none."""
    objects = [line for line in stdout.splitlines() if line.startswith("{")]
    if not objects:
        raise ValueError("the script printed no JSON object")
    if json_flag:
        figures = json.loads(objects[-1])
        if not isinstance(figures, dict):
            raise ValueError("the script's last JSON line is not an object")
        return figures
    return {"lines": [json.loads(line) for line in objects]}


def verdict(target: Target, value: float) -> str:
    if not target.promised:
        return "-"
    return "pass" if target.met(value) else "FAIL"


def measured_row(figure: Figure, command: str, figures: Mapping[str, Any]) -> Row:
    """The row of ``figure`` from its script's figures; a figure the script did
    not print is a crash of that row, named."""
    try:
        got = figure.read(figures)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as error:
        return crashed_row(figure, command, f"its figure is missing: {error!r}")
    return Row(
        figure=figure.title,
        name=figure.name,
        target=figure.target.text,
        measured=got.shown,
        baseline=got.baseline,
        ratio=got.ratio,
        verdict=verdict(figure.target, got.value),
        command=command,
        value=got.value,
    )


def skipped_row(figure: Figure, why: str, command: str) -> Row:
    return Row(figure.title, figure.name, figure.target.text, "-", "-", "-", why, command)


def not_measured(figure: Figure, command: str, present: Mapping[str, bool]) -> Row | None:
    """A "not measured" row when a prerequisite of ``figure`` is missing, else None."""
    for need in figure.needs:
        if not present.get(need, False):
            return skipped_row(figure, f"not measured: {PREREQUISITES[need]}", command)
    return None


def crashed_row(figure: Figure, command: str, why: str) -> Row:
    return skipped_row(figure, f"crashed: {why}", command)


def failure(status: int, stderr: str) -> str:
    """Why a script failed, in a line: its exit status and its stderr's last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = f": {lines[-1][:160]}" if lines else ""
    return f"exit status {status}{last}"


def rows_for_script(
    figures: Sequence[Figure],
    command: str,
    present: Mapping[str, bool],
    output: tuple[int, str, str] | None,
    json_flag: bool = True,
    quick: bool = False,
    full_command: str = "",
) -> list[Row]:
    """The rows of one script's figures. ``output`` is (exit status, stdout,
    stderr) of its run, or None when it did not run (a prerequisite missing).
    A figure left out of ``quick`` shows ``full_command``, which measures it."""
    rows = []
    for figure in figures:
        skipped = not_measured(figure, command, present)
        if skipped is not None:
            rows.append(skipped)
        elif quick and figure.full_only:
            why = "not measured: left out of --quick"
            rows.append(skipped_row(figure, why, full_command or command))
        elif output is None:
            rows.append(skipped_row(figure, "not measured: the script did not run", command))
        elif output[0] != 0:
            rows.append(crashed_row(figure, command, failure(output[0], output[2])))
        else:
            try:
                parsed = parse_output(output[1], json_flag)
            except ValueError as error:
                rows.append(crashed_row(figure, command, str(error)))
                continue
            rows.append(measured_row(figure, command, parsed))
    return rows


# -- showing the table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(table: Table) -> str:
    """The table as markdown, after a line saying where and when it was measured."""
    about = table.about
    lines = []
    if about:
        quick = "yes (fewer rounds, smaller sizes)" if about.get("quick") else "no"
        lines.append(
            f"Measured {about.get('date', '?')} at commit `{about.get('commit', '?')}`, "
            f"Python {about.get('python', '?')}, load average {about.get('load', '?')}, "
            f"`--quick`: {quick}."
        )
        lines.append("")
    lines.append("| figure | target | measured | baseline | ratio | met? | command |")
    lines.append("|---|---|---|---|---|---|---|")
    for row in table.rows:
        cells = (row.figure, row.target, row.measured, row.baseline, row.ratio, row.verdict)
        command = f"`{row.command}`" if row.command else "-"
        lines.append("| " + " | ".join(_cell(c) for c in cells) + f" | {command} |")
    return "\n".join(lines) + "\n"


def as_json(table: Table) -> dict[str, Any]:
    """The table as a JSON-ready object: ``about`` and one object per row."""
    return {"about": dict(table.about), "rows": [asdict(row) for row in table.rows]}


def exit_status(rows: Sequence[Row], check: bool) -> int:
    """1 when a script crashed, or with ``check`` when a figure failed its promise."""
    if any(row.verdict.startswith("crashed") for row in rows):
        return 1
    if check and any(row.verdict == "FAIL" for row in rows):
        return 1
    return 0


def select(figures: Sequence[Figure], only: str | None) -> list[Figure]:
    """The figures ``--only`` names, by figure or by script; all without it.
    ``ValueError`` for a name that is neither."""
    if not only:
        return list(figures)
    names = [name.strip() for name in only.split(",") if name.strip()]
    known = {f.name for f in figures} | {f.script for f in figures}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"--only: no figure or script named {', '.join(unknown)}")
    return [f for f in figures if f.name in names or f.script in names]
