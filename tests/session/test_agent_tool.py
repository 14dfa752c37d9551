"""``Agent.as_tool``: an agent as a tool of another (issue 18, item 6)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

import msgspec
import pytest
import trio
from helpers import call

from trio_agent import (
    Agent,
    ModelRequestError,
    TextBlock,
    ToolCall,
    ToolFinished,
    ToolRegistry,
    ToolResultMessage,
    ToolUpdated,
    TurnCancelled,
    TurnCompleted,
    TurnResult,
    UserMessage,
    repair_transcript,
    tool,
    validate_transcript,
)
from trio_agent.ledger import TurnEndRecord, derive
from trio_agent.limits import OUTPUT_TOOL_NAME
from trio_agent.messages import content_text
from trio_agent.model import ModelRequest
from trio_agent.session._agent_tool import MAX_NESTING, linked_session
from trio_agent.stores import JsonlStore
from trio_agent.testing import (
    CallableModel,
    ScriptedModel,
    ScriptedResponse,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)


class Answer(msgspec.Struct):
    name: str
    score: int


class Query(msgspec.Struct, forbid_unknown_fields=True):
    topic: str
    limit: int = 3


def scripted(script: list[Any]) -> ScriptedModel:
    """A scripted model; a str entry is a text answer."""
    return ScriptedModel(
        [scripted_response(f"r{i}", e) if isinstance(e, str) else e for i, e in enumerate(script)]
    )


def inner_agent(script: list[Any], **options: Any) -> Agent:
    return Agent(model=scripted(script), system="You research.", **options)


def outer_agent(script: list[Any], *tools: Any, **options: Any) -> Agent:
    return Agent(model=scripted(script), tools=tools, **options)


def results(turn: TurnResult) -> list[ToolResultMessage]:
    return [m for m in turn.messages if isinstance(m, ToolResultMessage)]


def asks(name: str, id: str, text: str) -> ScriptedResponse:
    return scripted_response(f"ask-{id}", [call(name, id, {"input": text})])


def answer_of(result: ToolResultMessage) -> str:
    content = result.content
    return content if isinstance(content, str) else content[0].text  # type: ignore[union-attr]


def prompt_of(request: ModelRequest) -> str:
    last = [m for m in request.messages if isinstance(m, UserMessage)][-1]
    return content_text(last.content)


async def collect(agent: Agent, text: str) -> tuple[list[Any], TurnResult]:
    events: list[Any] = []
    run = agent.turn(text)
    async with run:
        async for event in run:
            events.append(event)
    assert run.result is not None
    assert_run_invariants(events, run.result)
    return events, run.result


async def test_the_result_is_the_inner_final_text() -> None:
    inner = inner_agent([scripted_response("i1", "Trio was released in 2017.")])
    research = inner.as_tool("research", "Research a question.")
    outer = outer_agent([asks("research", "c1", "When was trio released?"), "done"], research)

    turn = await outer.prompt("go")

    assert isinstance(turn.end, TurnCompleted) and turn.final_text == "done"
    [result] = results(turn)
    assert result.content == "Trio was released in 2017." and not result.is_error
    assert linked_session(result) is None  # no ledger: nothing to link
    [request] = inner._state.model.requests  # type: ignore[attr-defined]
    assert prompt_of(request) == "When was trio released?"
    assert request.system == "You research."
    assert inner.messages == () and inner.turns == 0  # fresh: the template never runs


def test_parameters_of_a_text_input() -> None:
    research = inner_agent([]).as_tool("research", "Research a question.")
    assert research.name == "research" and research.description == "Research a question."
    assert research.parameters["type"] == "object"
    assert research.parameters["required"] == ["input"]
    assert research.parameters["properties"]["input"]["type"] == "string"
    assert research.progress  # runs as a task: its progress reaches tool.updated


async def test_fresh_calls_do_not_share_a_conversation() -> None:
    inner = inner_agent([scripted_response("i1", "one"), scripted_response("i2", "two")])
    research = inner.as_tool("research", "Research.")
    outer = outer_agent(
        [asks("research", "c1", "first"), asks("research", "c2", "second"), "done"], research
    )

    turn = await outer.prompt("go")

    assert [r.content for r in results(turn)] == ["one", "two"]
    first, second = inner._state.model.requests  # type: ignore[attr-defined]
    assert [prompt_of(first), prompt_of(second)] == ["first", "second"]
    assert len(second.messages) == 1  # nothing of the first call
    assert inner.messages == ()


async def test_fresh_calls_start_from_the_template_transcript() -> None:
    inner = inner_agent([scripted_response("i0", "ok"), scripted_response("i1", "forked")])
    await inner.prompt("remember: the answer is 7")
    before = inner.messages
    research = inner.as_tool("research", "Research.")
    outer = outer_agent([asks("research", "c1", "what is it?"), "done"], research)

    turn = await outer.prompt("go")

    assert results(turn)[0].content == "forked"
    request = inner._state.model.requests[-1]  # type: ignore[attr-defined]
    assert request.messages[: len(before)] == before
    assert inner.messages == before  # the template is unchanged


async def test_kept_conversation_across_calls() -> None:
    inner = inner_agent([scripted_response("i1", "one"), scripted_response("i2", "two")])
    research = inner.as_tool("research", "Research.", fresh=False)
    outer = outer_agent(
        [asks("research", "c1", "first"), asks("research", "c2", "second"), "done"], research
    )

    turn = await outer.prompt("go")

    assert [r.content for r in results(turn)] == ["one", "two"]
    assert inner.turns == 2
    validate_transcript(inner.messages)
    second = inner._state.model.requests[1]  # type: ignore[attr-defined]
    assert [content_text(m.content) for m in second.messages if isinstance(m, UserMessage)] == [
        "first",
        "second",
    ]


async def test_a_typed_output_is_the_result_as_json() -> None:
    answer = ToolCall("out-1", OUTPUT_TOOL_NAME, {"name": "trio", "score": 9})
    inner = inner_agent([scripted_response("i1", [answer])], output_type=Answer)
    rate = inner.as_tool("rate", "Rate a library.")
    outer = outer_agent([asks("rate", "c1", "rate trio"), "done"], rate)

    turn = await outer.prompt("go")

    [result] = results(turn)
    assert not result.is_error
    assert msgspec.json.decode(answer_of(result), type=Answer) == Answer("trio", 9)
    assert result.content == '{"name":"trio","score":9}'


async def test_a_str_output_type_is_the_text() -> None:
    inner = inner_agent([scripted_response("i1", "plain")], output_type=str)
    outer = outer_agent([asks("t", "c1", "x"), "done"], inner.as_tool("t", "T."))
    assert results(await outer.prompt("go"))[0].content == "plain"


async def test_an_inner_failure_is_an_error_result() -> None:
    inner = inner_agent([ModelRequestError("400 bad request")])
    outer = outer_agent([asks("research", "c1", "x"), "sorry"], inner.as_tool("research", "R."))

    turn = await outer.prompt("go")

    assert isinstance(turn.end, TurnCompleted)  # the outer model saw the error and went on
    [result] = results(turn)
    assert result.is_error
    assert answer_of(result).startswith('Tool "research" failed: the agent\'s turn failed (')
    assert "400 bad request" in result.content


async def test_inner_calls_held_for_approval_are_an_error_result_naming_them() -> None:
    """Review of issue 38: an inner turn that ended holding calls for approval was
    an error result saying only "the agent's turn ended: awaiting_approval". It
    names the calls and says they did not run (a fresh copy has no one to ask)."""

    @tool(requires_approval=True)
    async def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    inner = inner_agent([scripted_response("r1", [call("pay", "p1", {"amount": 5})])], tools=[pay])
    outer = outer_agent([asks("buy", "c1", "x"), "held"], inner.as_tool("buy", "B."))

    turn = await outer.prompt("go")

    [result] = results(turn)
    assert result.is_error
    assert answer_of(result) == (
        "Tool \"buy\" failed: the agent's calls p1 need a person's approval first; they did not run"
    )


async def test_inner_max_steps_is_an_error_result() -> None:
    @tool
    async def look() -> str:
        """Look."""
        return "nothing"

    inner = inner_agent([scripted_response("i1", [call("look", "l1")])], tools=[look], max_steps=1)
    outer = outer_agent([asks("research", "c1", "x"), "sorry"], inner.as_tool("research", "R."))

    [result] = results(await outer.prompt("go"))

    assert result.is_error
    assert "the agent used all 1 of its steps without finishing" in result.content


async def test_an_invalid_typed_output_past_the_retries_is_an_error_result() -> None:
    bad = ToolCall("out-1", OUTPUT_TOOL_NAME, {"name": "trio", "score": "high"})
    inner = inner_agent([scripted_response("i1", [bad])], output_type=Answer, output_retries=0)
    outer = outer_agent([asks("rate", "c1", "x"), "sorry"], inner.as_tool("rate", "R."))

    [result] = results(await outer.prompt("go"))

    assert result.is_error
    assert "OUTPUT_INVALID" in result.content and "$.score" in result.content


async def test_a_cut_answer_is_an_error_result_quoting_it() -> None:
    inner = inner_agent([scripted_response("i1", "half an ans", "length")])
    outer = outer_agent([asks("research", "c1", "x"), "ok"], inner.as_tool("research", "R."))

    [result] = results(await outer.prompt("go"))

    assert result.is_error
    assert "cut at its model's output limit" in result.content
    assert "half an ans" in result.content


async def test_a_max_seconds_cancels_the_inner_turn(autojump_clock: Any) -> None:
    @tool
    async def slow() -> str:
        """Slow."""
        await trio.sleep(100)
        return "late"

    inner = inner_agent([scripted_response("i1", [call("slow", "s1")])], tools=[slow])
    research = inner.as_tool("research", "R.", fresh=False, max_seconds=5)
    outer = outer_agent([asks("research", "c1", "x"), "ok"], research)

    start = trio.current_time()
    [result] = results(await outer.prompt("go"))

    assert trio.current_time() - start < 10
    assert result.is_error and "did not finish within 5 seconds" in result.content
    assert inner.messages[-1].role == "assistant"  # the open call is answered next turn
    validate_transcript(repair_transcript(inner.messages))


async def test_progress_is_reported_as_tool_updated(autojump_clock: Any) -> None:
    @tool
    async def search(query: str) -> str:
        """Search."""
        await trio.sleep(1)
        return f"found {query}"

    inner = inner_agent(
        [
            scripted_response("i1", [call("search", "s1", {"query": "trio"})]),
            scripted_response("i2", "Trio is a library. " * 20, text_chunks=40),
        ],
        tools=[search],
    )
    outer = outer_agent([asks("research", "c1", "x"), "done"], inner.as_tool("research", "R."))

    events, turn = await collect(outer, "go")

    updates = [e for e in events if isinstance(e, ToolUpdated)]
    assert updates and all(u.call.id == "c1" for u in updates)
    lines = [u.message for u in updates]
    assert "step 1: calling search" in lines  # sent once the interval passed, not lost
    assert all(len(line) <= 1000 for line in lines)
    finished = next(i for i, e in enumerate(events) if isinstance(e, ToolFinished))
    assert events.index(updates[-1]) < finished
    assert results(turn)[0].content == "Trio is a library. " * 20


async def test_text_deltas_are_summarized() -> None:
    inner = inner_agent([scripted_response("i1", "word " * 500, text_chunks=100)])
    outer = outer_agent([asks("research", "c1", "x"), "done"], inner.as_tool("research", "R."))

    events, _ = await collect(outer, "go")

    updates = [e for e in events if isinstance(e, ToolUpdated)]
    # a burst in no time: the first report goes out, the rest wait for the interval
    assert 1 <= len(updates) <= 3
    assert updates[0].message.startswith("step 1: writing: word")
    assert all(len(u.message) < 160 for u in updates)


async def test_a_structured_input_is_given_as_json() -> None:
    inner = inner_agent([scripted_response("i1", "three papers")])
    research = inner.as_tool("research", "Research.", input_type=Query)
    assert research.parameters["required"] == ["topic"]
    assert set(research.parameters["properties"]) == {"topic", "limit"}
    outer = outer_agent(
        [scripted_response("a1", [call("research", "c1", {"topic": "trio"})]), "done"], research
    )

    [result] = results(await outer.prompt("go"))

    assert result.content == "three papers"
    [request] = inner._state.model.requests  # type: ignore[attr-defined]
    assert prompt_of(request) == '{"topic":"trio","limit":3}'


async def test_a_structured_input_error_has_the_json_path() -> None:
    inner = inner_agent([])
    research = inner.as_tool("research", "Research.", input_type=Query)
    outer = outer_agent(
        [
            scripted_response("a1", [call("research", "c1", {"topic": "trio", "limit": "ten"})]),
            "done",
        ],
        research,
    )

    [result] = results(await outer.prompt("go"))

    assert result.is_error
    assert result.content == (
        'Invalid arguments for tool "research": Expected `int`, got `str` - at `$.limit`'
    )
    assert inner._state.model.call_count == 0  # type: ignore[attr-defined]


async def test_an_empty_text_input_is_refused_with_its_path() -> None:
    inner = inner_agent([])
    outer = outer_agent([asks("research", "c1", ""), "done"], inner.as_tool("research", "R."))

    [result] = results(await outer.prompt("go"))

    assert result.is_error and "$.input" in result.content


@dataclasses.dataclass
class Lookup:
    key: str


class Pair(TypedDict):
    left: int
    right: int


@pytest.mark.parametrize("kind", [Lookup, Pair])
def test_dataclass_and_typeddict_inputs(kind: Any) -> None:
    parameters = inner_agent([]).as_tool("t", "T.", input_type=kind).parameters
    assert parameters["type"] == "object" and "title" not in parameters
    assert set(parameters["required"]) == set(kind.__annotations__)


@pytest.mark.parametrize("kind", [int, list[str], object])
def test_an_input_type_that_is_not_an_object_is_refused(kind: Any) -> None:
    with pytest.raises(TypeError, match="input_type"):
        inner_agent([]).as_tool("t", "T.", input_type=kind)


def test_options_are_checked(tmp_path: Any) -> None:
    store = JsonlStore(tmp_path)
    with pytest.raises(ValueError, match="fresh=False"):
        Agent(model=ScriptedModel([]), store=store).as_tool("t", "T.")
    with pytest.raises(ValueError, match="store="):
        inner_agent([]).as_tool("t", "T.", fresh=False, store=store)
    with pytest.raises(ValueError, match="max_seconds"):
        inner_agent([]).as_tool("t", "T.", max_seconds=0)
    with pytest.raises(TypeError, match="fresh"):
        inner_agent([]).as_tool("t", "T.", fresh=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tool name"):
        inner_agent([]).as_tool("bad name", "T.")


async def test_a_fresh_call_records_a_linked_session(tmp_path: Any) -> None:
    store = JsonlStore(tmp_path)
    inner = inner_agent([scripted_response("i1", "recorded")])
    research = inner.as_tool("research", "Research.", store=store)
    outer = outer_agent([asks("research", "c1", "x"), "done"], research)

    [result] = results(await outer.prompt("go"))

    assert not result.is_error
    assert isinstance(result.content, tuple)
    text, link = result.content
    assert text == TextBlock("recorded")
    linked = linked_session(result)
    assert linked is not None and link == TextBlock(f"[agent session {linked[0]}, turn 1]")
    derived = derive((await store.load(linked[0])).records)
    assert derived.metadata == {"agent_tool": {"name": "research", "call_id": "c1"}}
    assert derived.closed_messages()[-1].content == (TextBlock("recorded"),)
    assert "session/closed" in store.path(linked[0]).read_text()


async def test_a_kept_conversation_links_its_own_session(tmp_path: Any) -> None:
    store = JsonlStore(tmp_path)
    inner = Agent(
        model=ScriptedModel([scripted_response("i1", "a"), ModelRequestError("400 nope")]),
        store=store,
    )
    research = inner.as_tool("research", "R.", fresh=False)
    outer = outer_agent(
        [asks("research", "c1", "x"), asks("research", "c2", "y"), "done"], research
    )

    first, second = results(await outer.prompt("go"))

    assert linked_session(first) == (inner.session_id, 1)
    assert linked_session(second) == (inner.session_id, 2)  # an error result links too
    assert second.is_error and answer_of(second).endswith(
        f"[agent session {inner.session_id}, turn 2]"
    )
    await inner.aclose()


def _slow_inner(log: list[str], **options: Any) -> tuple[Agent, Any]:
    running = [0]

    @tool
    async def work(key: str) -> str:
        """Work."""
        running[0] += 1
        log.append(f"start {key} ({running[0]} running)")
        await trio.sleep(1)
        running[0] -= 1
        return key

    def answer(request: ModelRequest) -> ScriptedResponse:
        last = request.messages[-1]
        if isinstance(last, UserMessage):
            key = content_text(last.content)
            return scripted_response(f"w-{key}", [call("work", f"w-{key}", {"key": key})])
        assert isinstance(last, ToolResultMessage)
        return scripted_response(f"r-{last.content}", f"did {last.content}")

    return Agent(model=CallableModel(answer), tools=[work], **options), running


def _two_calls(name: str) -> ScriptedResponse:
    return scripted_response(
        "both", [call(name, "c1", {"input": "a"}), call(name, "c2", {"input": "b"})]
    )


async def test_parallel_fresh_calls_run_at_once(autojump_clock: Any) -> None:
    log: list[str] = []
    inner, _ = _slow_inner(log)
    outer = outer_agent(
        [_two_calls("w"), "done"], inner.as_tool("w", "W."), tool_execution="parallel"
    )

    start = trio.current_time()
    turn = await outer.prompt("go")

    assert [r.content for r in results(turn)] == ["did a", "did b"]
    assert trio.current_time() - start == pytest.approx(1)
    assert sorted(log) == ["start a (1 running)", "start b (2 running)"] or sorted(log) == [
        "start a (2 running)",
        "start b (1 running)",
    ]


async def test_parallel_calls_of_a_kept_conversation_wait_their_turn(autojump_clock: Any) -> None:
    log: list[str] = []
    inner, _ = _slow_inner(log)
    outer = outer_agent(
        [_two_calls("w"), "done"],
        inner.as_tool("w", "W.", fresh=False),
        tool_execution="parallel",
    )

    start = trio.current_time()
    turn = await outer.prompt("go")

    assert [r.content for r in results(turn)] == ["did a", "did b"]
    assert not any(r.is_error for r in results(turn))
    assert trio.current_time() - start == pytest.approx(2)
    assert sorted(log) == ["start a (1 running)", "start b (1 running)"]  # one at a time
    assert inner.turns == 2
    validate_transcript(inner.messages)


def _nested_scenario(fresh: bool, store: Any = None) -> tuple[Agent, Agent]:
    @tool
    async def search(query: str) -> str:
        """Search."""
        await trio.lowlevel.checkpoint()
        return f"found {query}"

    inner = Agent(
        model=ScriptedModel(
            [
                scripted_response("i1", [call("search", "s1", {"query": "q"})], text_chunks=2),
                scripted_response("i2", "the inner answer", text_chunks=3),
                scripted_response("i3", "next inner turn"),
            ]
        ),
        tools=[search],
    )
    options: dict[str, Any] = {"fresh": fresh}
    if store is not None:
        options["store"] = store
    outer = outer_agent(
        [
            scripted_response("o1", [call("research", "c1", {"input": "look it up"})]),
            scripted_response("o2", "the outer answer", text_chunks=2),
            scripted_response("o3", "next outer turn"),
        ],
        inner.as_tool("research", "Research.", **options),
    )
    return outer, inner


def _check_outer(events: list[Any], result: TurnResult) -> list[ToolResultMessage]:
    assert_run_invariants(events, result)
    assert isinstance(result.end, (TurnCancelled, TurnCompleted))
    kept = results(result)
    assert kept == [e.result for e in events if isinstance(e, ToolFinished)]
    # a result only for an inner turn that finished: nothing invented
    assert all(answer_of(r) == "the inner answer" and not r.is_error for r in kept)
    return kept


async def test_cancel_the_outer_turn_at_every_checkpoint_kept_conversation() -> None:
    state: dict[str, Agent] = {}
    mid_inner_turn = [0]

    def scenario() -> Any:
        state["outer"], state["inner"] = _nested_scenario(fresh=False)
        return state["outer"].turn("go")

    async def check(events: list[Any], result: TurnResult) -> None:
        outer, inner = state["outer"], state["inner"]
        kept = _check_outer(events, result)
        assert not inner.running
        validate_transcript(repair_transcript(inner.messages))
        if kept:  # the inner turn finished before the cancel
            assert inner.messages[-1].content == (TextBlock("the inner answer"),)
        elif inner.turns:  # cut inside the inner turn (or as it handed its answer over)
            mid_inner_turn[0] += 1
            answered = "the inner answer" in str(inner.messages)
            assert not answered or inner.messages[-1].content == (TextBlock("the inner answer"),)
        # both sessions go on
        validate_transcript((await outer.prompt("again")).messages)
        if inner.turns:
            validate_transcript((await inner.prompt("again")).messages)

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 20
    assert set(report.outcomes) == {"cancelled", "completed"}
    assert mid_inner_turn[0] > 10  # many of the cancels landed inside the inner turn


async def test_cancel_the_outer_turn_at_every_checkpoint_fresh_with_a_store(
    tmp_path: Any,
) -> None:
    state: dict[str, Any] = {}
    runs = [0]
    mid_inner_turn = [0]

    def scenario() -> Any:
        runs[0] += 1
        state["store"] = store = JsonlStore(tmp_path / f"run-{runs[0]}")
        state["outer"], state["inner"] = _nested_scenario(fresh=True, store=store)
        return state["outer"].turn("go")

    async def check(events: list[Any], result: TurnResult) -> None:
        kept = _check_outer(events, result)
        assert state["inner"].messages == ()
        store = state["store"]
        sessions = sorted(store.directory.glob("*.jsonl")) if store.directory.exists() else []
        assert len(sessions) <= 1
        for path in sessions:  # the inner session is whole and closed, cancelled or not
            derived = derive((await store.load(path.stem)).records)
            validate_transcript(repair_transcript(derived.closed_messages()))
            assert "session/closed" in path.read_text()
            mid_inner_turn[0] += not kept
        if kept:  # the call finished: its result links the session it recorded
            linked = linked_session(kept[0])
            assert linked is not None and [p.stem for p in sessions] == [linked[0]]

    report = await explore_cancellation(scenario, check)
    assert set(report.outcomes) == {"cancelled", "completed"}
    assert mid_inner_turn[0] > 10


async def test_cancelling_the_parent_cancels_the_inner_turn(tmp_path: Any) -> None:
    started = trio.Event()

    @tool
    async def hang() -> str:
        """Hang."""
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    store = JsonlStore(tmp_path)
    inner = Agent(
        model=scripted([scripted_response("i1", [call("hang", "h1")])]), tools=[hang], store=store
    )
    outer = outer_agent([asks("research", "c1", "x")], inner.as_tool("research", "R.", fresh=False))

    with trio.CancelScope() as parent:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outer.prompt, "go")
            await started.wait()  # deep inside the inner turn
            parent.cancel()

    assert parent.cancelled_caught  # Cancelled came out of prompt(): no result was made
    assert not inner.running and not outer.running
    assert [m for m in outer.messages if isinstance(m, ToolResultMessage)] == []
    assert inner.messages[-1].role == "assistant"  # the hanging call has no result either
    validate_transcript(repair_transcript(inner.messages))
    validate_transcript(repair_transcript(outer.messages))
    await inner.aclose()
    assert inner.session_id is not None
    records = (await store.load(inner.session_id)).records
    [end] = [r for r in records if isinstance(r, TurnEndRecord)]
    assert isinstance(end.end, TurnCancelled)


def _self_calling(execution: str, fresh: bool) -> tuple[Agent, Agent, list[int]]:
    """An agent whose model calls its own tool (``me``) once, and an outer agent
    that calls ``me``; the inner model answers once it sees a result."""
    asked = [0]

    def inner_model(request: ModelRequest) -> Any:
        asked[0] += 1
        last = request.messages[-1]
        if type(last).__name__ == "ToolResultMessage":
            return scripted_response(f"i{asked[0]}", "inner saw: " + content_text(last.content))
        return scripted_response(f"i{asked[0]}", [call("me", f"ic{asked[0]}", {"input": "again"})])

    registry = ToolRegistry()
    agent = Agent(model=CallableModel(inner_model), tools=registry, tool_execution=execution)
    me = agent.as_tool("me", "Ask myself.", fresh=fresh)
    registry.register(me)

    def outer_model(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if type(last).__name__ == "ToolResultMessage":
            return scripted_response("o2", "outer: " + content_text(last.content)[:200])
        return scripted_response("o1", [call("me", "oc1", {"input": "go"})])

    outer = Agent(model=CallableModel(outer_model), tools=[me], tool_execution=execution)
    return agent, outer, asked


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_a_kept_agent_calling_itself_gets_an_error_result_not_a_deadlock(execution):
    _, outer, _ = _self_calling(execution, fresh=False)
    with trio.fail_after(60):  # a hang guard: a deadlock is for ever
        result = await outer.prompt("go")
    assert result.end.reason == "completed"
    assert "cannot call itself" in result.final_text


async def test_a_fresh_copy_of_an_agent_calling_itself_starts_from_its_settled_conversation():
    template, _, asked = _self_calling("sequential", fresh=True)
    with trio.fail_after(60):  # a hang guard: a deadlock is for ever
        result = await template.prompt("go", output_type=None)
    # the template's own turn called its tool: a copy of it ran from the conversation
    # before that step (no half-answered calls, no TranscriptError), and so on, until
    # the nesting limit answered the deepest call with an error
    assert result.end.reason == "completed"
    assert "TranscriptError" not in result.final_text
    assert asked[0] == MAX_NESTING + 1 + MAX_NESTING + 1  # down, then each answer
    assert "nested 8 deep" in result.messages[2].content
