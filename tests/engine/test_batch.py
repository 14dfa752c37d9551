"""A step's tool batch (``engine/_batch.py``): parallel batches' order, barriers, pool
bound, cancellation, grace period and progress (issue 5); and the regressions of
batches, each named after the behaviour it pins: a fatal error as a result, the
grace period, hooks on the siblings kept, dispatch records, the progress backlog, a
block reason."""

from __future__ import annotations

import msgspec
import pytest
import trio
from helpers import add, assert_stream_shape, call, settle, user

from trio_agent import (
    TOOL_CANCELLED,
    TOOL_NOT_STARTED,
    Agent,
    Cancelled,
    Event,
    FatalToolError,
    JsonlStore,
    ToolContext,
    ToolFinished,
    ToolRegistry,
    ToolResultMessage,
    ToolStarted,
    ToolUpdated,
    TurnCancelled,
    UserMessage,
    block,
    repair_transcript,
    run_agent_loop,
    tool,
    validate_transcript,
)
from trio_agent.ledger import ToolResultRecord, derive
from trio_agent.testing import ScriptedModel, scripted_response


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []
        self.active = 0
        self.peak = 0

    def tools(self, exclusive_names=()):
        log = self

        async def body(name: str, key: str, seconds: float) -> str:
            log.events.append((trio.current_time(), "start", key))
            log.active += 1
            log.peak = max(log.peak, log.active)
            try:
                await trio.sleep(seconds)
            except trio.Cancelled:
                log.events.append((trio.current_time(), "cancelled", key))
                raise
            finally:
                log.active -= 1
            log.events.append((trio.current_time(), "end", key))
            return f"{key}:{seconds}"

        @tool
        async def wait(key: str, seconds: float) -> str:
            """Sleep, then answer."""
            return await body("wait", key, seconds)

        @tool(exclusive=True)
        async def alone(key: str, seconds: float) -> str:
            """Sleep alone, then answer."""
            return await body("alone", key, seconds)

        return ToolRegistry([wait, alone])

    def times(self, kind: str) -> dict[str, float]:
        return {key: t for t, k, key in self.events if k == kind}


def waits(*specs: tuple[str, float], tool_name: str = "wait"):
    return [call(tool_name, f"c-{key}", {"key": key, "seconds": seconds}) for key, seconds in specs]


def run_of(script, tools, **options):
    model = ScriptedModel(script)
    options.setdefault("tool_execution", "parallel")
    return run_agent_loop(
        messages=[user()], model=model, tools=tools, max_steps=4, **options
    ), model


async def test_completion_order_differs_but_the_transcript_is_in_call_order(autojump_clock):
    log = Log()
    calls = waits(("a", 3), ("b", 1), ("c", 2))
    run, model = run_of(
        [scripted_response("r1", calls), scripted_response("r2", "ok")], log.tools()
    )
    events, result = await settle(run)
    assert_stream_shape(events, result)
    started = [e.call.id for e in events if isinstance(e, ToolStarted)]
    finished = [e.call.id for e in events if isinstance(e, ToolFinished)]
    assert started == ["c-a", "c-b", "c-c"]  # call order
    assert finished == ["c-b", "c-c", "c-a"]  # completion order
    results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [r.tool_call_id for r in results] == ["c-a", "c-b", "c-c"]  # call order
    assert model.requests[1].messages[2:] == tuple(results)
    assert trio.current_time() == pytest.approx(3)  # they ran together


async def test_sequential_mode_is_unchanged(autojump_clock):
    log = Log()
    calls = waits(("a", 3), ("b", 1))
    run, _ = run_of(
        [scripted_response("r1", calls), scripted_response("r2", "ok")],
        log.tools(),
        tool_execution="sequential",
    )
    events, result = await settle(run)
    assert [e.type for e in events if e.type.startswith("tool.")] == [
        "tool.started",
        "tool.finished",
        "tool.started",
        "tool.finished",
    ]
    assert trio.current_time() == pytest.approx(4)


async def test_an_exclusive_tool_is_a_barrier(autojump_clock):
    log = Log()
    calls = [
        *waits(("a", 2), ("b", 1)),
        *waits(("x", 1), tool_name="alone"),
        *waits(("c", 1), ("d", 1)),
    ]
    run, _ = run_of([scripted_response("r1", calls), scripted_response("r2", "ok")], log.tools())
    await run.wait()
    start, end = log.times("start"), log.times("end")
    assert start["x"] >= max(end["a"], end["b"])  # calls before it finish first
    assert min(start["c"], start["d"]) >= end["x"]  # calls after it wait for it
    assert start["a"] == start["b"] and start["c"] == start["d"]


async def test_the_pool_bound_holds(autojump_clock):
    log = Log()
    calls = waits(*[(str(i), 1 + (i % 3)) for i in range(20)])
    run, _ = run_of(
        [scripted_response("r1", calls), scripted_response("r2", "ok")],
        log.tools(),
        max_parallel_tools=3,
    )
    result = await run.wait()
    assert log.peak == 3
    assert len([m for m in result.messages if isinstance(m, ToolResultMessage)]) == 20


async def test_default_pool_is_ten(autojump_clock):
    log = Log()
    calls = waits(*[(str(i), 1) for i in range(25)])
    run, _ = run_of([scripted_response("r1", calls), scripted_response("r2", "ok")], log.tools())
    await run.wait()
    assert log.peak == 10


async def test_cancelling_keeps_only_finished_results_in_call_order(autojump_clock):
    log = Log()
    calls = waits(("a", 5), ("b", 1), ("c", 5), ("d", 2))
    run, _ = run_of([scripted_response("r1", calls)], log.tools())
    with trio.move_on_after(3):
        events, result = await settle(run)
    result = run.result
    assert isinstance(result, Cancelled)
    kept = [m.tool_call_id for m in result.messages if isinstance(m, ToolResultMessage)]
    assert kept == ["c-b", "c-d"]
    assert sorted(k for _, kind, k in log.events if kind == "cancelled") == ["a", "c"]
    validate_transcript(repair_transcript(result.messages))


async def test_fatal_error_cancels_the_rest_and_keeps_what_finished(autojump_clock):
    log = Log()

    @tool
    async def explode(after: float) -> str:
        await trio.sleep(after)
        raise FatalToolError("disk on fire")

    tools = log.tools()
    tools.register(explode)
    calls = [*waits(("a", 1), ("b", 9)), call("explode", "c-x", {"after": 2})]
    run, model = run_of([scripted_response("r1", calls), scripted_response("r2", "no")], tools)
    events, result = await settle(run)
    assert result.code == "TOOL_FATAL" and "disk on fire" in result.detail
    assert [m.tool_call_id for m in result.messages if isinstance(m, ToolResultMessage)] == ["c-a"]
    assert "cancelled" in {kind for _, kind, key in log.events if key == "b"}
    assert model.call_count == 1
    assert_stream_shape(events, result)


async def test_blocked_calls_in_a_parallel_batch(autojump_clock):
    log = Log()

    async def guard(c):
        return block("not b") if c.arguments["key"] == "b" else None

    agent = Agent(
        model=ScriptedModel(
            [
                scripted_response("r1", waits(("a", 1), ("b", 1), ("c", 1))),
                scripted_response("r2", "ok"),
            ]
        ),
        tools=log.tools(),
        tool_execution="parallel",
        before_tool_call=guard,
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    contents = [m.content for m in result.messages if isinstance(m, ToolResultMessage)]
    assert contents == ["a:1.0", 'Tool call "wait" was blocked: not b', "c:1.0"]
    assert "b" not in log.times("start")


async def test_a_tool_that_ignores_cancellation_cannot_hold_the_run_past_the_grace_period(
    autojump_clock,
):
    @tool
    async def stubborn() -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(100)
        return "finally"

    log = Log()
    tools = log.tools()
    tools.register(stubborn)
    calls = [call("stubborn", "c-s"), *waits(("a", 1))]
    run, _ = run_of([scripted_response("r1", calls)], tools, tool_grace_period=2)
    finished_at = None
    with trio.move_on_after(5):
        async with run:
            async for event in run:
                if event.type == "tool.finished":
                    run.cancel()  # after 'a' finished, 's' ignores the cancel
                if event.type == "run.finished":
                    finished_at = trio.current_time()
    assert finished_at == pytest.approx(1 + 2)  # one second of work, then the grace period
    assert isinstance(run.result, Cancelled)
    kept = [m.tool_call_id for m in run.result.messages if isinstance(m, ToolResultMessage)]
    assert kept == ["c-a"]  # nothing invented for the stubborn call


async def test_progress_events_arrive_between_start_and_finish(autojump_clock):
    late: list[ToolContext] = []

    @tool
    async def download(url: str, ctx: ToolContext) -> str:
        """Download with progress."""
        for step in range(3):
            ctx.report(f"{url}: {step * 50}%", fraction=step / 2)
            await trio.sleep(1)
        for _ in range(10):
            ctx.report("too fast")  # within the rate bound: dropped
        ctx.report("x" * 5000)  # dropped too (rate), but would be cut to size
        late.append(ctx)
        return "done"

    assert "ctx" not in download.parameters["properties"]
    calls = [call("download", "d1", {"url": "a"}), call("download", "d2", {"url": "b"})]
    run, _ = run_of(
        [scripted_response("r1", calls), scripted_response("r2", "ok")], ToolRegistry([download])
    )
    events, result = await settle(run)
    late[0].report("after the call finished")  # dropped
    for call_id in ("d1", "d2"):
        mine = [e for e in events if getattr(e, "call", None) and e.call.id == call_id]
        kinds = [e.type for e in mine]
        assert kinds[0] == "tool.started" and kinds[-1] == "tool.finished"
        updates = [e for e in mine if isinstance(e, ToolUpdated)]
        # the first fast report passes (a second since the last), the next 10 are dropped
        assert [(u.message[-3:], u.fraction) for u in updates] == [
            (" 0%", 0.0),
            ("50%", 0.5),
            ("00%", 1.0),
            ("ast", None),
        ]
    assert all(len(e.message) <= 1000 for e in events if isinstance(e, ToolUpdated))
    assert late[0].dropped == 11  # 9 too fast, the long one, the one after finishing
    assert_stream_shape(events, result)
    for event in events:
        assert msgspec.json.decode(msgspec.json.encode(event), type=Event) == event


async def test_progress_in_sequential_mode_too(autojump_clock):
    @tool
    async def slow(ctx: ToolContext) -> str:
        ctx.report("half way", 0.5)
        await trio.sleep(1)
        return "done"

    run, _ = run_of(
        [scripted_response("r1", [call("slow", "s1")]), scripted_response("r2", "ok")],
        ToolRegistry([slow]),
        tool_execution="sequential",
    )
    events, _ = await settle(run)
    assert [e.type for e in events if e.type.startswith("tool.")] == [
        "tool.started",
        "tool.updated",
        "tool.finished",
    ]


async def test_a_parallel_batch_is_recorded_as_it_completes_and_derives_in_call_order(
    tmp_path, autojump_clock
):
    log = Log()
    agent = Agent(
        model=ScriptedModel(
            [scripted_response("r1", waits(("a", 3), ("b", 1))), scripted_response("r2", "ok")]
        ),
        tools=log.tools(),
        tool_execution="parallel",
        store=JsonlStore(tmp_path),
        session_id="s1",
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    records = (await JsonlStore(tmp_path).load("s1")).records
    recorded = [r.result.tool_call_id for r in records if isinstance(r, ToolResultRecord)]
    assert recorded == ["c-b", "c-a"]  # completion order: nothing waits for a slow sibling
    assert tuple(derive(records).messages) == result.messages  # call order


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tool_execution": "threads"}, "tool_execution"),
        ({"max_parallel_tools": 0}, "max_parallel_tools"),
        ({"max_parallel_tools": 2.5}, "max_parallel_tools"),
        ({"tool_grace_period": -1}, "tool_grace_period"),
        ({"tool_grace_period": float("inf")}, "tool_grace_period"),
    ],
)
def test_bad_batch_options_raise(options, match):
    with pytest.raises(ValueError, match=match):
        run_agent_loop(
            messages=[], model=ScriptedModel([]), tools=ToolRegistry(), max_steps=1, **options
        )
    with pytest.raises(ValueError, match=match):
        Agent(model=ScriptedModel([]), **options)


@tool
async def nap(key: str, seconds: float) -> str:
    """Sleep."""
    await trio.sleep(seconds)
    return key


@tool
async def boom(after: float) -> str:
    """Fail fatally."""
    await trio.sleep(after)
    raise FatalToolError("quota gone")


@tool
async def progress(ctx: ToolContext) -> str:
    """Report progress."""
    ctx.report("working", 0.5)
    await trio.sleep(1)
    return "done"


def naps(*specs):
    return [call("nap", f"c-{k}", {"key": k, "seconds": s}) for k, s in specs]


@pytest.mark.parametrize("how", ["wait", "prompt"])
@pytest.mark.parametrize("mode", ["parallel", "sequential-with-progress"])
async def test_a_fatal_error_in_a_batch_is_a_result_not_an_exception(autojump_clock, how, mode):
    """A FatalToolError in a parallel batch, or after a progress report in a sequential one, escaped
    ``wait()`` and ``prompt()`` as an exception; it is the run's TOOL_FATAL result."""
    if mode == "parallel":
        calls = [*naps(("a", 1)), call("boom", "c-x", {"after": 2})]
        tools = ToolRegistry([nap, boom])
    else:
        calls = [call("progress", "c-p"), call("boom", "c-x", {"after": 0})]
        tools = ToolRegistry([progress, boom])
    script = [scripted_response("r1", calls), scripted_response("r2", "no")]
    options = {"tool_execution": "parallel" if mode == "parallel" else "sequential"}
    if how == "wait":
        run = run_agent_loop(
            messages=[user()], model=ScriptedModel(script), tools=tools, max_steps=2, **options
        )
        result = await run.wait()
        assert result.code == "TOOL_FATAL" and "quota gone" in result.detail
    else:
        agent = Agent(model=ScriptedModel(script), tools=tools, **options)
        result = await agent.prompt(UserMessage("u1", "go"))
        assert result.end.code == "TOOL_FATAL"


async def test_the_grace_period_bounds_a_prompt_inside_async_with_agent(autojump_clock):
    """Inside ``async with agent`` a cancelled prompt waited for a shielded tool past
    ``tool_grace_period``; it returns after the grace period, inventing nothing, and leaving the
    block waits for the tool."""

    @tool
    async def stubborn() -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(100)
        return "late"

    async with Agent(
        model=ScriptedModel([scripted_response("r1", [call("stubborn", "c-s")])]),
        tools=ToolRegistry([stubborn]),
        tool_execution="parallel",
        tool_grace_period=2,
    ) as agent:
        with trio.move_on_after(1):
            await agent.prompt(UserMessage("u1", "go"))
        assert trio.current_time() == pytest.approx(3)  # 1 s, then the grace period
        assert agent.messages[-1].id == "message-r1"  # nothing invented
    assert trio.current_time() == pytest.approx(100)  # leaving the block waited for it


async def test_grace_zero_keeps_results_already_waiting(autojump_clock):
    """With ``tool_grace_period=0`` the results already waiting when the batch was cancelled were
    dropped; they are kept."""
    calls = naps(("a", 1), ("b", 1), ("c", 5), ("d", 1))
    run = run_agent_loop(
        messages=[user()],
        model=ScriptedModel([scripted_response("r1", calls)]),
        tools=ToolRegistry([nap]),
        max_steps=1,
        tool_execution="parallel",
        tool_grace_period=0,
    )
    with trio.move_on_after(2):
        await run.wait()
    kept = [m.tool_call_id for m in run.result.messages if isinstance(m, ToolResultMessage)]
    assert kept == ["c-a", "c-b", "c-d"]


async def test_after_tool_call_runs_on_siblings_kept_after_a_fatal_error(autojump_clock):
    """``after_tool_call`` was skipped for the siblings kept after a fatal error."""

    async def redact(c, result):
        return msgspec.structs.replace(result, content="[redacted]")

    calls = [*naps(("a", 1)), call("boom", "c-x", {"after": 1})]
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", calls)]),
        tools=ToolRegistry([nap, boom]),
        tool_execution="parallel",
        after_tool_call=redact,
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == "TOOL_FATAL"
    contents = [m.content for m in result.messages if isinstance(m, ToolResultMessage)]
    assert contents == ["[redacted]"]


async def test_a_call_cancelled_before_dispatch_is_not_recorded_as_dispatched(tmp_path):
    """A call cancelled before its dispatch was recorded as dispatched, so a resume called it
    outcome unknown; it was not started."""
    store = JsonlStore(tmp_path)
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", naps(("a", 5), ("b", 5)))]),
        tools=ToolRegistry([nap]),
        tool_execution="parallel",
        store=store,
        session_id="s1",
    )
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            if event.type == "tool.started":
                run.cancel()  # cancels the second call's dispatch
    assert run.result.end == TurnCancelled()
    await agent.aclose()
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([nap]))
    codes = dict((r.tool_call_id, code) for r, code in resumed.closed_on_resume)
    # c-a ran and was cancelled in this process, which knew it: not "outcome unknown"
    assert codes == {"c-a": TOOL_CANCELLED, "c-b": TOOL_NOT_STARTED}
    await resumed.aclose()


async def test_many_reports_do_not_build_a_backlog_before_tool_finished(autojump_clock):
    """Many progress reports built a backlog that held ``tool.finished`` back behind a slow
    consumer."""

    @tool
    async def chatty(ctx: ToolContext) -> str:
        for i in range(100):
            ctx.report(f"step {i}")
            await trio.sleep(0.06)
        return "done"

    calls = [call("chatty", f"c{i}") for i in range(5)]
    run = run_agent_loop(
        messages=[user()],
        model=ScriptedModel([scripted_response("r1", calls), scripted_response("r2", "ok")]),
        tools=ToolRegistry([chatty]),
        max_steps=2,
        tool_execution="parallel",
    )
    first_finished = None
    async with run:
        async for event in run:
            if event.type == "tool.updated":
                await trio.sleep(0.05)  # a slow consumer
            if event.type == "tool.finished" and first_finished is None:
                first_finished = trio.current_time()
    assert first_finished is not None and first_finished < 6.0 + 0.5
    assert isinstance(run.result, Cancelled) is False


async def test_a_failing_hook_on_one_kept_sibling_loses_no_other_and_keeps_the_fatal_code(
    autojump_clock,
):
    """When the batch stopped on a fatal tool, an after_tool_call that failed for a sibling
    finishing in the grace period dropped the later ones and turned TOOL_FATAL into HOOK_ERROR."""

    async def after(c, result):
        if c.id == "c-a":
            raise RuntimeError("hook bug")
        return msgspec.structs.replace(result, content="[redacted]")

    @tool
    async def stubborn(key: str, seconds: float) -> str:
        """Finish even when cancelled (within the grace period)."""
        with trio.CancelScope(shield=True):
            await trio.sleep(seconds)
        return key

    calls = [
        call("boom", "c-x", {"after": 1}),
        call("stubborn", "c-a", {"key": "a", "seconds": 2}),
        call("stubborn", "c-b", {"key": "b", "seconds": 3}),
    ]
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", calls)]),
        tools=ToolRegistry([stubborn, boom]),
        tool_execution="parallel",
        tool_grace_period=10,
        after_tool_call=after,
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == "TOOL_FATAL"
    kept = {m.tool_call_id: m.content for m in result.messages if isinstance(m, ToolResultMessage)}
    assert kept == {"c-a": "a", "c-b": "[redacted]"}  # the hook's failure kept a's own result


async def test_regression_a_block_reason_with_a_lone_surrogate_cannot_break_the_transcript():
    """A blocked call's result was built by hand, without the lone-surrogate cleanup every other
    tool result gets: a block reason with a lone surrogate broke the transcript."""
    from trio_agent import Agent, validate_transcript
    from trio_agent.session import block

    async def refuse(call_):
        return block("bad \ud800")

    agent = Agent(
        model=ScriptedModel(
            [
                scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})]),
                scripted_response("r2", "ok"),
            ]
        ),
        tools=ToolRegistry([add]),
        before_tool_call=refuse,
    )
    result = await agent.prompt("go")
    validate_transcript(result.messages)
    assert result.messages[2].content == 'Tool call "add" was blocked: bad \ufffd'
