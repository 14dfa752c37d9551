"""Issue 17 item 7: a replay matches string prompts by their content (their ids
are random), and ``trio_seed`` / ``seeded_scheduler`` make a nested nursery's
order reproducible, putting trio's generator back afterwards."""

from __future__ import annotations

import pytest
import trio

from trio_agent import Agent, JsonlStore
from trio_agent.testing import ReplayDivergenceError, ReplayModel, ScriptedModel, scripted_response
from trio_agent.testing._explorer import seeded_scheduler


async def record(tmp_path) -> list:  # type: ignore[type-arg]
    store = JsonlStore(tmp_path)
    model = ScriptedModel([scripted_response("r1", "hi there"), scripted_response("r2", "bye")])
    async with Agent(model=model, store=store, session_id="s1") as agent:
        await agent.prompt("hello")
        await agent.prompt("goodbye")
    return list((await store.load("s1")).records)


async def test_a_session_recorded_with_string_prompts_replays(tmp_path):
    # Before: it diverged at message 0 (the prompt's random id differed).
    records = await record(tmp_path)
    async with Agent(model=ReplayModel(records)) as agent:
        first = await agent.prompt("hello")
        second = await agent.prompt("goodbye")
    assert first.final_text == "hi there" and second.final_text == "bye"


async def test_a_different_prompt_still_diverges(tmp_path):
    records = await record(tmp_path)
    async with Agent(model=ReplayModel(records)) as agent:
        result = await agent.prompt("hello?")
    assert result.end.reason == "failed"
    assert "diverges from the recording: message 0" in str(result.end)


def test_a_recorded_id_that_a_person_chose_still_counts():
    from trio_agent.messages import UserMessage
    from trio_agent.testing._replay import _same

    made_a, made_b = UserMessage("user-0123456789ab", "hi"), UserMessage("user-ba9876543210", "hi")
    assert _same(made_a, made_b)
    assert not _same(UserMessage("u1", "hi"), UserMessage("u2", "hi"))  # chosen ids must match
    assert not _same(made_a, UserMessage("user-ba9876543210", "ho"))
    assert ReplayDivergenceError is not None


def nested_order() -> list[int]:
    order: list[int] = []

    async def main() -> None:
        async def child(n: int) -> None:
            await trio.lowlevel.checkpoint()
            order.append(n)

        async with trio.open_nursery() as outer:
            for n in range(20):
                outer.start_soon(child, n)

    trio.run(main)
    return order


def test_a_seeded_scheduler_repeats_a_nested_nurserys_order_and_is_put_back():
    from trio._core import _run

    before = _run._r.getstate()
    with seeded_scheduler():
        first = nested_order()
    with seeded_scheduler():
        second = nested_order()
    assert first == second and sorted(first) == list(range(20))
    assert _run._r.getstate() == before


@pytest.mark.parametrize("run", [1, 2])
def test_the_trio_seed_fixture_gives_the_same_order_every_time(trio_seed, run):
    assert nested_order() == SEEDED


with seeded_scheduler():
    SEEDED = nested_order()
