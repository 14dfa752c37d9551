"""Every figure trio-agent promises (docs/benchmarks.md, issue 38), the script
that measures it, and how each is read from that script's ``--json`` figures.

A target with bounds is a promise, checked; ``NO_TARGET`` is a figure the docs
state without one, shown for what it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from _table import NO_TARGET, PEERS, Figure, Measured, Script, Target

Figures = Mapping[str, Any]

SCRIPTS = (
    Script(
        "peers", ("benchmarks/peers/run.py",), ("benchmarks/peers/run.py", "--quick"), ("peers",)
    ),
    Script(
        "loop", ("benchmarks/loop_overhead.py",), ("benchmarks/loop_overhead.py", "--rounds", "5")
    ),
    Script(
        "providers",
        ("benchmarks/providers.py",),
        ("benchmarks/providers.py", "--rounds", "2"),
        ("sdks",),
    ),
    Script(
        "latency",
        ("benchmarks/latency.py",),
        ("benchmarks/latency.py", "--rounds", "1", "--requests", "10"),
    ),
    Script(
        "ledger",
        ("benchmarks/ledger.py",),
        ("benchmarks/ledger.py", "--rounds", "1"),
        optional=(("postgres", ("--postgres",)),),
    ),
    Script(
        "resume",
        ("benchmarks/resume.py", "1099", "10099", "100099", "--shape", "compacted"),
        ("benchmarks/resume.py", "1099", "10099", "--shape", "compacted", "--repeat", "3"),
        json_flag=False,
    ),
    Script(
        "long_sessions",
        ("benchmarks/long_sessions.py",),
        ("benchmarks/long_sessions.py", "--turns", "10000", "--sessions", "50"),
    ),
    Script("import", ("benchmarks/import_cost.py",), ("benchmarks/import_cost.py", "--runs", "5")),
    Script(
        "fleet",
        ("benchmarks/fleet.py", "--rounds", "3", "--concurrency", "1"),
        ("benchmarks/fleet.py", "--rounds", "1", "--concurrency", "1"),
        ("postgres",),
    ),
    Script("mcp", ("benchmarks/mcp.py",), ("benchmarks/mcp.py", "--calls", "100", "--rounds", "5")),
    Script("output", ("benchmarks/output.py",), ("benchmarks/output.py", "--rounds", "3")),
    Script("explorer", ("benchmarks/explorer.py",), ("benchmarks/explorer.py", "--rounds", "2")),
    Script(
        "sandbox",
        ("benchmarks/sandbox.py",),
        ("benchmarks/sandbox.py", "--rounds", "2"),
        ("bwrap",),
    ),
    Script(
        "parallel_tools",
        ("benchmarks/parallel_tools.py",),
        ("benchmarks/parallel_tools.py", "--rounds", "3"),
    ),
    Script("telemetry", ("benchmarks/telemetry.py",), ("benchmarks/telemetry.py", "--rounds", "3")),
    Script(
        "tool_types", ("benchmarks/tool_types.py",), ("benchmarks/tool_types.py", "--rounds", "3")
    ),
    Script(
        "partial_output",
        ("benchmarks/partial_output.py", "--deltas", "1000"),
        ("benchmarks/partial_output.py", "--deltas", "1000", "--rounds", "3"),
    ),
    Script("media", ("benchmarks/media.py",), ("benchmarks/media.py", "--rounds", "5")),
    Script(
        "serve",
        ("benchmarks/serve.py",),
        ("benchmarks/serve.py", "--clients", "200", "--rounds", "1"),
    ),
)


def _n(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def _peers(values: Mapping[str, float], unit: str, digits: int = 1) -> str:
    return ", ".join(f"{label} {_n(values[key], digits)}{unit}" for key, label in PEERS.items())


# -- the peers (peers/run.py)


def w1(f: Figures) -> Measured:
    times = f["w1_us_per_request"]
    ours, best = times["trio-agent"], min(times[p] for p in PEERS)
    return Measured(
        best / ours, f"{_n(ours)} µs a request", _peers(times, " µs"), f"{best / ours:.1f}x lower"
    )


def w2_peers(f: Figures) -> Measured:
    rates = f["w2_events_per_s"]
    ours, best = rates["trio-agent"], max(rates[p] for p in PEERS)
    return Measured(
        ours / best, f"{_n(ours, 0)} events/s", _peers(rates, " events/s", 0), f"{ours / best:.1f}x"
    )


def _share(ours: float, base: float, shown: str, baseline: str) -> Measured:
    """A figure that is a share of its baseline's (1.0: as fast)."""
    return Measured(ours / base, shown, baseline, f"{ours / base:.2f}")


def w2_floor(f: Figures) -> Measured:
    ours, floor = f["w2_events_per_s"]["trio-agent"], f["w2_floor_events_per_s"]
    return _share(ours, floor, f"{_n(ours, 0)} events/s", f"bare channel {_n(floor, 0)} events/s")


def w3_memory(f: Figures) -> Measured:
    kb = f["w3_kb_per_run"]
    ours, best = kb["trio-agent"], min(kb[p] for p in PEERS)
    shown = f"{_n(ours)} KB a run ({f['w3_runs']:,} runs)"
    return Measured(ours, shown, _peers(kb, " KB"), f"{best / ours:.1f}x less")


def w3_alone(f: Figures) -> Measured:
    alone = f["w3_alone"]
    wall = _n(alone["seconds"] * 1000, 0)
    shown = f"{_n(alone['kb_per_run'])} KB a run, {alone['runs']:,} runs in {wall} ms"
    return Measured(alone["kb_per_run"], shown)


def w3_wall(f: Figures) -> Measured:
    wall = {k: v * 1000 for k, v in f["w3_seconds"].items()}
    ours, best = wall["trio-agent"], min(wall[p] for p in PEERS)
    return Measured(
        best / ours,
        f"{_n(ours)} ms for {f['w3_runs']:,} runs",
        _peers(wall, " ms"),
        f"{best / ours:.1f}x lower",
    )


def w5(f: Figures) -> Measured:
    first, last = f["w5_8_us_per_request"], f["w5_128_us_per_request"]
    growth = {k: last[k] / first[k] for k in last}
    ours = growth["trio-agent"]
    shown = f"{_n(first['trio-agent'])} → {_n(last['trio-agent'])} µs a request"
    return Measured(ours, shown, "growth: " + _peers(growth, "x", 2), f"{ours:.2f}x")


def w4(f: Figures) -> Measured:
    ms = {k: f[f"w4_{k}"]["seconds_to_return"] * 1000 for k in ("trio-agent", *PEERS)}
    return Measured(ms["trio-agent"], f"{_n(ms['trio-agent'])} ms", _peers(ms, " ms"))


# -- one script each


def loop(f: Figures) -> Measured:
    ratio = f["loop_over_floor"]
    shown = f"{_n(f['loop_events_per_s'], 0)} events/s"
    return Measured(
        ratio,
        shown,
        f"bare channel {_n(f['floor_events_per_s'], 0)} events/s",
        f"{ratio:.2f}x the time",
    )


def provider(key: str) -> Callable[[Figures], Measured]:
    def read(f: Figures) -> Measured:
        got = f[key]
        return Measured(
            got["ratio"],
            f"{got['us_per_chunk']:.2f} µs a chunk",
            f"official SDK {got['sdk_us_per_chunk']:.1f} µs",
            f"{got['ratio']:.1f}x",
        )

    return read


def latency(delay: str) -> Callable[[Figures], Measured]:
    def read(f: Figures) -> Measured:
        got = f[f"delay_{delay}ms"]
        shown = f"{got['ms']:.1f} ms ({got['connections']} new connections)"
        baseline = f"pooled httpx {got['httpx_ms']:.1f} ms"
        return Measured(got["ratio"], shown, baseline, f"{got['ratio']:.2f}x")

    return read


def ledger_postgres(f: Figures) -> Measured:
    rate, one = f["postgr_step_32_records_per_s"], f["postgr_step_1_records_per_s"]
    return Measured(
        rate, f"{_n(rate, 0)} records/s", f"1 session: {_n(one, 0)} records/s", f"{rate / one:.1f}x"
    )


def ledger_jsonl(f: Figures) -> Measured:
    added, base = f["jsonl_step_added_us_per_step"], f["in_memory_us_per_step"]
    return Measured(
        added,
        f"+{_n(added)} µs a step",
        f"in memory {_n(base)} µs a step",
        f"{(base + added) / base:.2f}x",
    )


def resume(turns: int) -> Callable[[Figures], Measured]:
    def read(f: Figures) -> Measured:
        [got] = [line for line in f["lines"] if line["turns"] == turns]
        shown = (
            f"{got['ms_median']:.1f} ms (ledger {got['ledger_mb']} MB, "
            f"{got['snapshot_records']} snapshots)"
        )
        return Measured(
            got["ms_median"], shown, f"a turn while built: {_n(got['build_us_per_turn'], 0)} µs"
        )

    return read


def growth(store: str) -> Callable[[Figures], Measured]:
    def read(f: Figures) -> Measured:
        got = f[f"growth_{store}_cpu"]
        shown = f"last tenth {_n(got['last_us'])} µs a turn (CPU)"
        return Measured(
            got["ratio"], shown, f"first tenth {_n(got['first_us'])} µs", f"{got['ratio']:.2f}x"
        )

    return read


def sqlite_session(f: Figures) -> Measured:
    got = f["session"]
    return Measured(
        got["ratio"],
        f"SQLite {_n(got['sqlite_us'], 0)} µs",
        f"JSONL {_n(got['jsonl_us'], 0)} µs",
        f"{got['ratio']:.2f}x",
    )


def import_time(f: Figures) -> Measured:
    shown = (
        f"{f['min_ms']:.1f} ms least of {f['runs']}, {f['median_ms']:.1f} ms median "
        f"({f['modules']} modules)"
    )
    return Measured(f["min_ms"], shown)


def fleet(f: Figures) -> Measured:
    four, one = f["concurrency_1_workers_4"], f["concurrency_1_workers_1"]
    ratio = four["turns_per_s"] / one["turns_per_s"]
    return Measured(
        ratio,
        f"4 workers: {_n(four['turns_per_s'])} turns/s",
        f"1 worker: {_n(one['turns_per_s'])} turns/s",
        f"{ratio:.2f}x",
    )


def mcp(way: str) -> Callable[[Figures], Measured]:
    def read(f: Figures) -> Measured:
        ours = f["trio-agent"]
        wall, raw = ours[way]["wall_us"], ours["raw"]["wall_us"]
        cpu = ours[way]["cpu_us"] / ours["raw"]["cpu_us"] - 1
        shown = f"{wall / 1000:.2f} ms a call (client CPU {cpu:+.1%})"
        return Measured(
            wall / raw, shown, f"the SDK's call_tool {raw / 1000:.2f} ms", f"{wall / raw - 1:+.1%}"
        )

    return read


def typed_output(f: Figures) -> Measured:
    over = f["native_over_text_us"]
    return Measured(over, f"{over:+.1f} µs a run", f"a text run {_n(f['text_us'])} µs")


def explorer(f: Figures) -> Measured:
    return Measured(
        f["ms_per_run"], f"{f['ms_per_run']:.2f} ms a run ({f['checkpoints']} checkpoints)"
    )


def sandbox(f: Figures) -> Measured:
    shown = f"{f['bwrap_ms']:.2f} ms a command (+{f['added_ms']:.2f} ms)"
    return Measured(f["ratio"], shown, f"unconfined {f['none_ms']:.2f} ms", f"{f['ratio']:.2f}x")


def parallel_sleepy(f: Figures) -> Measured:
    ms = f["sleepy_ms"]
    speed = ms["sequential"] / ms["parallel"]
    return Measured(
        speed,
        f"{_n(ms['parallel'])} ms in parallel",
        f"in sequence {_n(ms['sequential'])} ms",
        f"{speed:.1f}x faster",
    )


def parallel_free(f: Figures) -> Measured:
    batch = f["free_us_per_batch"]
    added = f["added_us_per_call"]
    shown = f"{_n(batch['parallel'])} µs a batch ({added:+.1f} µs a call)"
    return Measured(added, shown, f"in sequence {_n(batch['sequential'])} µs a batch")


def telemetry(f: Figures) -> Measured:
    ratio = f["on_us"] / f["off_us"]
    shown = f"{_n(f['on_us'])} µs a turn ({f['us_per_span']:.1f} µs a span)"
    return Measured(ratio, shown, f"untraced {_n(f['off_us'])} µs", f"{ratio:.2f}x")


def tool_types(f: Figures) -> Measured:
    ratio = f["pydantic_us"] / f["struct_us"]
    shown = f"pydantic model {f['pydantic_us']:.2f} µs a call"
    return Measured(ratio, shown, f"msgspec Struct {f['struct_us']:.2f} µs", f"{ratio:.2f}x")


def partial_output(f: Figures) -> Measured:
    rows = {row["shape"]: row for row in f["rows"] if 990 <= row["deltas"] <= 1000}
    text, structs = rows["one long string"], rows["list of Structs"]
    shown = f"one long string {_n(text['ms'])} ms, a list of Structs {_n(structs['ms'])} ms"
    baseline = f"one decode: {text['decode_ms']:.2f} and {structs['decode_ms']:.2f} ms"
    return Measured(text["ms"], shown, baseline)


def media(f: Figures) -> Measured:
    step = f["a one-step run (checks, step, events)"]
    encode = f["OpenAIChatModel.encode_request, first step"]
    shown = (
        f"a one-step run {step['image_ms']:.2f} ms, {step['copies']:.2f} copies; "
        f"the first encoding (OpenAI) {_n(encode['image_ms'])} ms"
    )
    return Measured(step["copies"], shown, f"text only {step['text_ms']:.2f} ms")


def serve_sse(f: Figures) -> Measured:
    sse, local = f["sse_events_per_s"], f["in_process_events_per_s"]
    return _share(
        sse, local, f"{_n(sse, 0)} events/s over SSE", f"in process {_n(local, 0)} events/s"
    )


def serve_fan_out(f: Figures) -> Measured:
    fan = f["fan_out"]
    shown = (
        f"all {f['clients']:,} identical and complete; {fan['kib_per_client']:.1f} KiB a client, "
        f"the last in {_n(fan['delivered_s'] * 1000, 0)} ms"
    )
    return Measured(1.0, shown)


def serve_latency(f: Figures) -> Measured:
    got = f["first_event_ms"]
    return Measured(got["median"], f"median {got['median']:.1f} ms, p90 {got['p90']:.1f} ms")


FIGURES = (
    Figure(
        "w1",
        "W1: time per model request, against the better peer",
        "peers",
        Target(">= 150x lower", low=150),
        w1,
        ("peers",),
    ),
    Figure(
        "w2-peers",
        "W2: streamed events per second, against the faster peer",
        "peers",
        Target(">= 30x", low=30),
        w2_peers,
        ("peers",),
    ),
    Figure(
        "w2-floor",
        "W2: streamed events per second, against a bare trio channel",
        "peers",
        Target(">= 0.85", low=0.85),
        w2_floor,
        ("peers",),
    ),
    Figure(
        "w3",
        "W3: memory per concurrent run",
        "peers",
        Target("<= 5 KB", high=5),
        w3_memory,
        ("peers",),
    ),
    Figure(
        "w3-alone",
        "W3 with 10 times the runs, trio-agent alone",
        "peers",
        Target("<= 5 KB", high=5),
        w3_alone,
        ("peers",),
    ),
    Figure(
        "w3-wall", "W3: wall time of the concurrent runs", "peers", NO_TARGET, w3_wall, ("peers",)
    ),
    Figure(
        "w5",
        "W5: cost per request from 8 to 128 requests",
        "peers",
        Target("<= 1.3x", high=1.3),
        w5,
        ("peers",),
    ),
    Figure("w4", "W4: control back after a cancel at 50 ms", "peers", NO_TARGET, w4, ("peers",)),
    Figure(
        "loop",
        "the loop's events, against a bare trio channel",
        "loop",
        Target("<= 4x the time", high=4),
        loop,
    ),
    Figure(
        "openai-close",
        "chunks/s, OpenAI close-delimited, against the SDK",
        "providers",
        Target(">= 20x", low=20),
        provider("openai_close"),
        ("sdks",),
    ),
    Figure(
        "openai-chunked",
        "chunks/s, OpenAI chunked, against the SDK",
        "providers",
        Target(">= 20x", low=20),
        provider("openai_chunked"),
        ("sdks",),
    ),
    Figure(
        "anthropic-close",
        "chunks/s, Anthropic close-delimited, against the SDK",
        "providers",
        Target(">= 20x", low=20),
        provider("anthropic_close"),
        ("sdks",),
    ),
    Figure(
        "anthropic-chunked",
        "chunks/s, Anthropic chunked, against the SDK",
        "providers",
        Target(">= 20x", low=20),
        provider("anthropic_chunked"),
        ("sdks",),
    ),
    *(
        Figure(
            f"latency-{d}",
            f"a request over TLS, {d} ms each way, against pooled httpx",
            "latency",
            Target("<= 1.05x", high=1.05),
            latency(d),
        )
        for d in ("0", "10", "25", "50")
    ),
    Figure(
        "ledger-postgres",
        "PostgreSQL store, 32 sessions, fsync=step",
        "ledger",
        Target(">= 5,000 records/s", low=5000),
        ledger_postgres,
        ("postgres",),
    ),
    Figure(
        "ledger-jsonl",
        "a JSONL ledger (fsync=step) added to a step",
        "ledger",
        NO_TARGET,
        ledger_jsonl,
    ),
    *(
        Figure(
            f"resume-{t}",
            f"resume a compacted session of {t + 99:,} turns (99 after a snapshot)",
            "resume",
            Target("<= 50 ms", high=50),
            resume(t + 99),
            full_only=t == 100000,
        )
        for t in (1000, 10000, 100000)
    ),
    Figure(
        "growth-memory",
        "a turn's cost, last tenth of a long session against the first, in memory",
        "long_sessions",
        Target("<= 1.3x", high=1.3),
        growth("memory"),
    ),
    Figure(
        "growth-jsonl",
        "a turn's cost, last tenth of a long session against the first, JSONL",
        "long_sessions",
        Target("<= 1.3x", high=1.3),
        growth("jsonl"),
    ),
    Figure(
        "sqlite-session",
        "a short SQLite session (create, one turn, close), against JSONL",
        "long_sessions",
        Target("<= 3x", high=3),
        sqlite_session,
    ),
    Figure(
        "import",
        "`from trio_agent import Agent, tool`, our modules' import time",
        "import",
        Target("<= 90 ms", high=90),
        import_time,
    ),
    Figure(
        "fleet",
        "the fleet, 4 worker processes against 1",
        "fleet",
        Target(">= 3.5x", low=3.5),
        fleet,
        ("postgres",),
    ),
    Figure(
        "mcp",
        "an MCP tool call (Tool.execute), against the SDK's own call",
        "mcp",
        Target("<= +10 %", high=1.1),
        mcp("Tool.execute"),
    ),
    Figure(
        "mcp-step",
        "an MCP tool call as a step runs it, against the SDK's own call",
        "mcp",
        NO_TARGET,
        mcp("execute_tool_call"),
    ),
    Figure(
        "output",
        "typed output (a small Struct), over a text run",
        "output",
        Target("<= 5 µs", high=5),
        typed_output,
    ),
    Figure(
        "explorer",
        "the cancellation explorer, per explored run",
        "explorer",
        Target("<= 2 ms", high=2),
        explorer,
    ),
    Figure(
        "sandbox",
        "a command in bubblewrap, against an unconfined one",
        "sandbox",
        NO_TARGET,
        sandbox,
        ("bwrap",),
    ),
    Figure(
        "parallel",
        "a batch of 8 calls sleeping 50 ms, parallel against in sequence",
        "parallel_tools",
        NO_TARGET,
        parallel_sleepy,
    ),
    Figure(
        "parallel-free",
        "a parallel batch of 8 zero-cost calls, against in sequence",
        "parallel_tools",
        NO_TARGET,
        parallel_free,
    ),
    Figure(
        "telemetry",
        "a traced turn, against the same turn untraced",
        "telemetry",
        NO_TARGET,
        telemetry,
    ),
    Figure(
        "tool-types",
        "a tool call with a pydantic model parameter, against a Struct one",
        "tool_types",
        NO_TARGET,
        tool_types,
    ),
    Figure(
        "partial-output",
        "PartialOutput, a 60,000-character answer in 1,000 deltas",
        "partial_output",
        NO_TARGET,
        partial_output,
    ),
    Figure("media", "a 5 MiB image through a one-step run", "media", NO_TARGET, media),
    Figure(
        "serve-sse",
        "serving: events over SSE, against the same turn in process",
        "serve",
        NO_TARGET,
        serve_sse,
    ),
    Figure(
        "serve-fan-out",
        "serving: SSE clients on one session",
        "serve",
        Target("every client the same complete sequence", low=1),
        serve_fan_out,
    ),
    Figure(
        "serve-latency",
        "serving: from a POST to the turn's first event",
        "serve",
        NO_TARGET,
        serve_latency,
    ),
)
"""In the table's order."""

UNMEASURED = (
    (
        "features a run does not use (approvals, tracing off, typed output)",
        "nothing measurable",
        "not measured: an instruction count between two commits (callgrind), not one run",
    ),
)
"""Promises no script measures in one run, shown as such."""
