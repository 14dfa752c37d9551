"""The table of promised figures (benchmarks/all.py): each script's JSON read into
its rows, each row checked against its target, a missing prerequisite shown as
"not measured", a crash as a crash. No benchmark runs here: the scripts' output
is recorded (recorded_output.json, from real runs of each script with --json)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# Last on the path: benchmarks/mcp.py must not shadow the MCP SDK for other tests.
sys.path.append(str(BENCHMARKS))

import _figures  # noqa: E402
import _promises  # noqa: E402
import _table  # noqa: E402
from _table import Figure, Measured, Row, Table, Target  # noqa: E402

RECORDED = json.loads((Path(__file__).parent / "recorded_output.json").read_text())
EVERYTHING = {need: True for need in _table.PREREQUISITES}


def _script(name: str) -> _table.Script:
    [script] = [s for s in _promises.SCRIPTS if s.name == name]
    return script


def _rows(
    name: str,
    stdout: str,
    present: dict[str, bool] = EVERYTHING,
    status: int = 0,
    stderr: str = "",
    quick: bool = False,
) -> dict[str, Row]:
    script = _script(name)
    figures = [f for f in _promises.FIGURES if f.script == name]
    rows = _table.rows_for_script(
        figures, "python x.py", present, (status, stdout, stderr), script.json_flag, quick
    )
    return {row.name: row for row in rows}


def _peers(w1: dict[str, float], w2: dict[str, float], floor: float, kb: float) -> str:
    """The JSON peers/run.py prints, with the figures the tests vary."""
    figures = json.loads(RECORDED["peers"])
    figures["w1_us_per_request"] = w1
    figures["w2_events_per_s"] = w2
    figures["w2_floor_events_per_s"] = floor
    figures["w3_kb_per_run"]["trio-agent"] = kb
    return json.dumps(figures) + "\n"


def test_every_figure_is_read_from_its_scripts_recorded_json() -> None:
    """Each figure's reader names keys its script really prints: a reader and a
    script that disagree would show the row as crashed."""
    for script in _promises.SCRIPTS:
        rows = _rows(script.name, RECORDED[script.name])
        assert rows, script.name
        for row in rows.values():
            assert row.verdict in ("pass", "FAIL", "-"), (row.name, row.verdict)
            assert row.measured != "-" and row.value is not None, row


def test_every_figure_names_a_script_that_exists_and_a_known_prerequisite() -> None:
    scripts = {s.name: s for s in _promises.SCRIPTS}
    names = [f.name for f in _promises.FIGURES]
    assert len(names) == len(set(names))
    for figure in _promises.FIGURES:
        script = scripts[figure.script]
        assert set(figure.needs) <= set(_table.PREREQUISITES)
        assert set(script.needs) <= set(figure.needs), figure.name
        for argv in (script.argv, script.quick_argv):
            assert (BENCHMARKS.parent / argv[0]).is_file(), argv


def test_w1_passes_at_150x_the_better_peer_and_fails_below() -> None:
    """The ratio is taken against the better (faster) peer, not the slower."""
    w2 = {"trio-agent": 40_000.0, "pydantic-ai": 1_000.0, "openai-agents": 1_200.0}
    passing = _rows(
        "peers",
        _peers(
            {"trio-agent": 50.0, "pydantic-ai": 7_600.0, "openai-agents": 9_000.0},
            w2,
            45_000.0,
            4.9,
        ),
    )
    assert passing["w1"].verdict == "pass" and passing["w1"].ratio == "152.0x lower"
    failing = _rows(
        "peers",
        _peers(
            {"trio-agent": 50.0, "pydantic-ai": 7_400.0, "openai-agents": 90_000.0},
            w2,
            45_000.0,
            4.9,
        ),
    )
    assert failing["w1"].verdict == "FAIL" and failing["w1"].value == pytest.approx(148.0)


def test_w2_and_w3_are_checked_against_the_faster_peer_the_floor_and_5_kb() -> None:
    w1 = {"trio-agent": 50.0, "pydantic-ai": 7_600.0, "openai-agents": 9_000.0}
    w2 = {"trio-agent": 42_000.0, "pydantic-ai": 1_500.0, "openai-agents": 1_300.0}
    rows = _rows("peers", _peers(w1, w2, 50_000.0, 5.0))
    assert rows["w2-peers"].verdict == "FAIL" and rows["w2-peers"].ratio == "28.0x"
    assert rows["w2-floor"].verdict == "FAIL" and rows["w2-floor"].ratio == "0.84"
    assert rows["w3"].verdict == "pass"  # 5 KB is within "at most 5 KB"
    rows = _rows("peers", _peers(w1, w2, 49_000.0, 5.1))
    assert rows["w2-floor"].verdict == "pass" and rows["w3"].verdict == "FAIL"


def test_a_missing_prerequisite_is_a_not_measured_row_not_a_failure() -> None:
    present = {**EVERYTHING, "peers": False, "postgres": False}
    rows = _rows("peers", "", present=present, status=1)
    assert all(
        r.verdict.startswith("not measured: the peers are not installed") for r in rows.values()
    )
    ledger = _rows("ledger", RECORDED["ledger"], present=present)
    assert ledger["ledger-postgres"].verdict.startswith("not measured: PostgreSQL")
    assert ledger["ledger-jsonl"].verdict == "-"  # measured without PostgreSQL
    everything = [*rows.values(), *ledger.values()]
    assert _table.exit_status(everything, check=True) == 0


def test_a_script_that_did_not_run_for_its_prerequisite_shows_why() -> None:
    figures = [f for f in _promises.FIGURES if f.script == "fleet"]
    [row] = _table.rows_for_script(figures, "python f.py", {"postgres": False}, None)
    assert row.verdict == f"not measured: {_table.PREREQUISITES['postgres']}"
    assert row.command == "python f.py"


def test_a_crashed_script_shows_its_last_stderr_line_and_exits_non_zero() -> None:
    stderr = "Traceback (most recent call last):\n  ...\nAssertionError: clients differ\n\n"
    rows = _rows("serve", "", status=1, stderr=stderr)
    assert {r.verdict for r in rows.values()} == {
        "crashed: exit status 1: AssertionError: clients differ"
    }
    assert _table.exit_status(list(rows.values()), check=False) == 1


def test_a_script_that_prints_no_json_or_lacks_a_figure_is_a_crash() -> None:
    rows = _rows("loop", "some text\n")
    assert rows["loop"].verdict == "crashed: the script printed no JSON object"
    rows = _rows("loop", '{"loop_events_per_s": 1.0}\n')
    assert rows["loop"].verdict.startswith("crashed: its figure is missing: KeyError(")


def test_check_exits_non_zero_only_for_a_missed_promise() -> None:
    missed = Row("f", "f", "<= 1x", "2", "-", "-", "FAIL", "c")
    kept = Row("g", "g", "-", "2", "-", "-", "-", "c")
    assert _table.exit_status([missed, kept], check=False) == 0
    assert _table.exit_status([missed, kept], check=True) == 1
    assert _table.exit_status([kept], check=True) == 0


def test_targets_bound_the_value_inclusively_and_refuse_nan() -> None:
    at_most = Target("<= 50 ms", high=50)
    assert at_most.met(50) and not at_most.met(50.01)
    at_least = Target(">= 3.5x", low=3.5)
    assert at_least.met(3.5) and not at_least.met(3.49)
    assert not at_least.met(math.nan)
    assert not _table.NO_TARGET.promised and _table.verdict(_table.NO_TARGET, 1e9) == "-"


def test_resume_reads_each_length_from_its_json_lines_and_holds_50_ms() -> None:
    lines = [
        {
            "turns": 1099,
            "ms_median": 8.3,
            "ledger_mb": 1.5,
            "snapshot_records": 10,
            "build_us_per_turn": 250.0,
        },
        {
            "turns": 10099,
            "ms_median": 51.0,
            "ledger_mb": 14.0,
            "snapshot_records": 100,
            "build_us_per_turn": 250.0,
        },
    ]
    stdout = "".join(json.dumps(line) + "\n" for line in lines)
    script = _script("resume")
    figures = [f for f in _promises.FIGURES if f.script == "resume"]
    found = _table.rows_for_script(figures, "quick", {}, (0, stdout, ""), False, True, "full")
    rows = {row.name: row for row in found}
    assert rows["resume-1000"].verdict == "pass"
    assert rows["resume-1000"].measured == "8.3 ms (ledger 1.5 MB, 10 snapshots)"
    assert rows["resume-10000"].verdict == "FAIL"
    assert rows["resume-100000"].verdict == "not measured: left out of --quick"
    assert rows["resume-100000"].command == "full"  # the command that measures it
    assert rows["resume-1000"].command == "quick" and not script.json_flag


def test_only_selects_figures_by_their_name_or_their_script() -> None:
    chosen = _table.select(_promises.FIGURES, "w1,serve")
    assert [f.name for f in chosen] == ["w1", "serve-sse", "serve-fan-out", "serve-latency"]
    assert _table.select(_promises.FIGURES, None) == list(_promises.FIGURES)
    with pytest.raises(ValueError, match="no figure or script named nope"):
        _table.select(_promises.FIGURES, "w1,nope")


def test_an_optional_prerequisite_adds_its_arguments_to_the_command() -> None:
    ledger = _script("ledger")
    assert ledger.command(False, {"postgres": True}) == ("benchmarks/ledger.py", "--postgres")
    assert ledger.command(True, {"postgres": False}) == ("benchmarks/ledger.py", "--rounds", "1")


def test_the_markdown_table_has_a_line_a_row_and_says_when_and_whether_quick() -> None:
    figure = Figure("x", "a | b", "loop", Target("<= 4x", high=4), lambda f: Measured(2.0, "2"))
    row = _table.measured_row(figure, "python benchmarks/x.py", {})
    about = {"date": "2026-12-06", "commit": "abc", "python": "3.11", "load": "3.0", "quick": True}
    text = _table.markdown(Table((row,), about))
    lines = text.splitlines()
    assert lines[0].startswith("Measured 2026-12-06 at commit `abc`")
    assert "`--quick`: yes" in lines[0]
    assert lines[-1] == "| a \\| b | <= 4x | 2 | - | - | pass | `python benchmarks/x.py` |"
    encoded = json.loads(json.dumps(_table.as_json(Table((row,), about))))
    assert encoded["rows"][0]["verdict"] == "pass" and encoded["about"]["quick"] is True


def test_a_scripts_json_option_prints_one_object_and_sends_its_text_to_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_figures, "FIGURES", {})
    with _figures.json_output(True):
        print("human text")
        _figures.record(rate=2.5, nested={"a": 1})
    out, err = capsys.readouterr()
    assert out == '{"rate": 2.5, "nested": {"a": 1}}\n'
    assert err == "human text\n"
    with _figures.json_output(False):
        print("human text")
    assert capsys.readouterr().out == "human text\n"
