"""The web page at /: its files come from the package with a strict policy, and
driven in headless Chromium it shows a streamed answer, folded thinking and a
held call whose approve button runs it."""

from __future__ import annotations

import json
import shutil
import sys
from unittest.mock import ANY

import page_hostile_child
import pytest
import serve_agents
import trio
from paths import SUPPORT
from serving import client, running
from sse_client import finished, read_until
from waiting import WAIT, wait_until

TOKEN = "a-token-for-the-page-0001;=%&#"  # printable, with what a URL must encode


async def test_the_page_and_its_files_are_served_with_a_strict_policy(tmp_path):
    async with running(tmp_path) as (server, url), client(url) as http:
        page = await http.get("/")
        script = await http.get("/page/page.js")
        style = await http.get("/page/page.css")
        missing = await http.get("/page/secret.py")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/page/page.js"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == 200 and "text/event-stream" in script.text
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    assert missing.status_code == 404 and missing.json()["error"]


@pytest.mark.parametrize("how", [None, "form", "fragment"])
async def test_the_page_streams_a_turn_and_approves_a_held_call_in_chromium(tmp_path, how):
    """Send a message, see the answer; ask for thinking (folded); a held call shows
    approve and reject; approve runs it and the answer follows; a reload rebuilds
    the same transcript from the event stream. With a token, the page asks for it
    (or takes it from ``#token=``) and sends it as ``Authorization: Bearer``, the
    event stream's requests too.

    Bug: the page kept the token in a cookie, which a page served on another port
    of the same host can read and send (cookies are scoped by host, not port).
    Now no cookie is set, the token is kept in the tab's ``sessionStorage``, and
    it is in no request's URL or ``Referer`` nor left in the address bar."""
    shot = tmp_path / "page.png"
    child = [sys.executable, str(SUPPORT / "page_child.py")]
    token = None if how is None else TOKEN
    async with running(tmp_path / "store", token=token) as (server, url):
        with trio.fail_after(4 * WAIT):
            done = await trio.run_process(
                [*child, url, str(shot), *([] if how is None else [how, TOKEN])],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    assert done.returncode == 0, done.stderr.decode()
    seen = json.loads(done.stdout)
    assert seen["answer"] == "echo: hi"
    assert (seen["thinking"], seen["thinking_folded"]) == ("pondering", True)
    assert seen["held"] == "guarded" and "web-1" in seen["sessions"]
    assert (seen["decision"], seen["after"]) == ("approved", "after guard")
    assert seen["same_after_reload"] is True
    assert seen["errors"] == []
    assert shot.stat().st_size > 10_000
    assert seen["cookies"] == [] and seen["stored"] == token
    assert "token" not in seen["address"]
    leaks = [r for r in seen["requests"] if "a-token" in r["url"] or r["referer"]]
    assert leaks == []
    api = [r for r in seen["requests"] if "/sessions" in r["url"]]
    if token is None:
        assert not any(r["auth"] for r in api)
    else:  # from the token given on (the form: after the 401s that asked for it)
        given = next(n for n, r in enumerate(api) if r["auth"])
        assert all(r["auth"] for r in api[given:]) and (how == "form") == (given > 0)
    assert any("/events" in r["url"] and r["auth"] == (token is not None) for r in api)


async def hostile(
    tmp_path, scenario: str, turns: int = 0, token: str | None = None, said: str = "m"
) -> object:
    """What ``page_hostile_child.py`` saw in ``scenario``, the session ``many``
    holding ``turns`` finished turns first, on messages ``said`` (``m`` gives
    ``m0``, ``m1``...; the server's token: ``token``)."""
    child = [sys.executable, str(SUPPORT / "page_hostile_child.py")]
    auth = {} if token is None else {"authorization": f"Bearer {token}"}
    async with (
        running(tmp_path / "store", token=token) as (server, url),
        client(url, headers=auth) as http,
    ):
        for n in range(turns):
            message = f"m{n}" if said == "m" else said
            posted = await http.post("/sessions/many/turns", json={"message": message})
            assert posted.status_code == 202, posted.text
            await read_until(url, "/sessions/many/events", finished(n + 1))
            await wait_until(lambda: server.hub.running_turn("many") is None)
        with trio.fail_after(4 * WAIT):
            done = await trio.run_process(
                [*child, url, scenario], capture_stdout=True, capture_stderr=True, check=False
            )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


async def test_an_address_of_bad_percent_encoding_is_said_not_thrown(tmp_path):
    """``#%E0%A4%A`` made ``decodeURIComponent`` throw an uncaught URIError: the
    page said nothing and opened nothing."""
    seen = await hostile(tmp_path, "hash")
    assert seen == {"errors": [], "said": ANY}
    assert "percent-encoding" in seen["said"]


async def test_a_reload_asks_for_the_sessions_list_a_bounded_number_of_times(tmp_path):
    """A reload replays every turn's end, and each asked for the sessions list:
    30 turns, 32 requests at once (thousands for a long session)."""
    turns = page_hostile_child.TURNS
    requests = await hostile(tmp_path, "replay", turns)
    assert requests <= 4  # on loading, then after the turns' ends: one, and one after it


async def test_a_refused_event_stream_is_said_and_asks_for_the_token(tmp_path):
    """An event stream answered 401 (or any refusal) is closed by the browser for
    good; the page said "reconnecting…" for ever and never asked for the token."""
    seen = await hostile(tmp_path, "refused", 1)
    assert seen == "disconnected"


async def test_a_held_call_is_decided_once_however_often_approve_is_clicked(tmp_path):
    """A second click before the first decision's answer sent a second one, which
    the server refused (decided already) and the page showed as an error."""
    seen = await hostile(tmp_path, "twice")
    assert seen == {"decisions": 1, "error": ""}


async def test_calls_of_odd_ids_are_approved_from_the_page(tmp_path):
    """A model names its calls: one named ``a/b`` was held for good, as its
    decision (``approvals/a%2Fb``, decoded before routing) matched no route: 404.
    Then ``.`` and ``..`` were: the browser takes them out of the path
    (``approvals/..`` is ``/sessions``). The page now names the call in the
    body of ``POST /sessions/{id}/approvals``."""
    ids = page_hostile_child.ODD_IDS
    assert await hostile(tmp_path, "odd") == ["done n"] * len(ids)


async def test_a_call_held_before_its_turn_ends_is_approved_once_it_has_ended(tmp_path):
    """Bug (CI, on a loaded machine): a call is held (``approval.requested``)
    before its turn ends, and the page showed approve at once. Clicked before the
    turn's end, the decision was refused (409: the turn is running) and nothing
    ran. Now approve and reject are enabled once the turn has ended."""
    seen = await hostile(tmp_path, "early", 1, said="guard")
    assert (seen["enabled_while_running"], seen["decisions_while_running"]) == (False, 0)
    assert (seen["result"], seen["error"]) == ("done n", "")


async def test_a_held_call_decided_elsewhere_is_run_when_approved_on_the_page(tmp_path):
    """Bug: a decision is in the event stream only once the turn that runs it
    starts, so a call decided in another tab (or in this one before a reload)
    whose turn was not started was shown held; approve then said "decided
    already" and started nothing: the call was never run (with two held calls,
    two tabs deciding one each both waited for the other's). Now, after a
    decision, the page asks the server what still waits and, when nothing does,
    starts the turn that runs what was decided."""
    seen = await hostile(tmp_path, "elsewhere", 1, said="guard")
    assert seen == {"result": ["done n"], "error": ""}


async def test_a_message_is_sent_once_however_often_send_is_pressed(tmp_path):
    """Bug: send (or Ctrl+Enter) pressed again before the server answered posted
    the message again: a 409 (a turn runs) shown as an error, or, once a fast
    turn had ended, the same message twice in the session."""
    seen = await hostile(tmp_path, "sendtwice")
    assert seen == {"posted": 1, "users": 1, "error": ""}


async def test_a_call_of_a_failed_attempt_is_shown_void(tmp_path):
    """Bug: a model's attempt that streamed a call and then failed (retried) left
    that call shown as a call under way for ever, never run, never voided (its
    text is struck through); one retried under the same id was shown once, in
    the failed attempt's place. Now a failed attempt's calls are shown void, and
    a retry's call is a box of its own with its result."""
    seen = await hostile(tmp_path, "retried", 1)
    assert seen == {"void": ["a1", "b"], "live": ["a2", "b"], "results": ["done a2", "done b"]}


async def test_an_event_stream_answered_503_is_asked_for_again(tmp_path):
    """Bug: any answer to the event stream but a 200 was taken as a refusal for
    good ("reload the page"), a 502, 503 or 504 of a proxy while its server
    restarts, or a 500 of a store's blip, too. Now a 5xx is asked for again
    (as a dropped connection is), and only a 4xx is a refusal."""
    turns = page_hostile_child.TURNS_RESUMED
    assert await hostile(tmp_path, "unavailable", turns) == {"ends": turns, "error": ""}


async def test_cancel_is_in_view_for_a_session_of_the_longest_id(tmp_path):
    """Bug: the title (the session's id, up to 128 characters with no space) did
    not wrap, and pushed cancel turn out of the window to its right."""
    assert await hostile(tmp_path, "longid") == {"cancel_in_view": True}


async def test_a_message_sent_is_out_of_the_box_when_another_session_is_opened(tmp_path):
    """Bug: a message whose post was answered once another session was open
    stayed in the box (one box for every session), to be sent to that one at
    the next press. The box is read-only while its message is posted (text
    typed then was emptied with it), and emptied once it is."""
    seen = await hostile(tmp_path, "switched")
    assert seen == {"box": "", "error": "", "posted": 1}


async def test_a_session_is_shown_when_the_sessions_list_fails(tmp_path):
    """Bug: a session was opened (its event stream read) only if the sessions
    list named it; with the list failing (a 503, the network), a session of
    many turns was shown empty, as "new session: send a message to start it".
    Now, the list not had, the event stream is asked for (a 404: a new session)."""
    turns = page_hostile_child.TURNS_RESUMED
    seen = await hostile(tmp_path, "unlisted", turns)
    assert seen == {"ends": turns, "status": "idle", "fresh": ["echo: hi"]}


async def test_an_address_of_an_id_no_session_can_have_is_said_at_once(tmp_path):
    """Bug: ``#my session``, ``#a%2Fb``... were opened as a new session ("send a
    message to start it"); the message was refused then, ``a/b``'s with a bare
    "Not Found". Now the page says what an id is, and offers no message box."""
    seen = await hostile(tmp_path, "badids")
    expected = {"said": ANY, "composer": False}
    assert seen == [expected] * len(page_hostile_child.BAD_IDS)
    assert all("letters, digits" in said["said"] for said in seen)


async def test_what_a_model_a_tool_or_a_person_wrote_is_shown_as_text(tmp_path):
    """A guard, not a bug seen: a message, thinking, an answer, a call's name, id
    and arguments, a result, a rejection's reason and a failure's detail, each
    an ``<img onerror>`` and a ``<script>``, are shown as text and none runs."""
    seen = await hostile(tmp_path, "markup", 1)
    tags = {"DIV", "DETAILS", "SUMMARY", "PRE", "STRONG", "SPAN", "CODE"}
    assert set(seen["tags"]) <= tags and seen["ran"] is None
    assert seen["texts"] == 7  # the message, answer, name, result, reason, code, detail


async def test_a_turn_is_cancelled_once_however_often_cancel_is_clicked(tmp_path):
    """Bug: cancel turn clicked again before the first cancel's answer posted a
    second cancel (once the turn had ended, a 409, "no turn is running", shown
    as an error after a cancel that worked). One cancel is under way at a time."""
    seen = await hostile(tmp_path, "cancelled")
    assert seen == {"cancels": 1, "end": "turn 1 ended: cancelled", "error": ""}


async def test_the_transcript_follows_a_streamed_answer(tmp_path):
    """The answer grew below the view (only a new element scrolled, and only if
    the view was at the end before it), each chunk copying the whole text so
    far (``textContent +=``)."""
    distance = await hostile(tmp_path, "follow")
    assert distance < 40


async def test_the_transcript_follows_again_once_a_message_is_sent(tmp_path):
    """Bug: a reader who had scrolled up and then sent a message saw neither it
    nor its answer: they came below the view. Sending brings the end back."""
    seen = await hostile(tmp_path, "scrolledup", page_hostile_child.TURNS)
    assert seen["top"] == 0 and seen["distance"] < 40


async def test_a_cut_event_stream_is_resumed_after_the_last_event_seen(tmp_path):
    """The page reads its event stream with fetch (an EventSource can send no
    Authorization header): a stream that ends, here in the middle of an event,
    is asked for again with ``Last-Event-ID``, the id of the last whole event,
    and the transcript goes on with no turn shown twice or missing."""
    turns = page_hostile_child.TURNS_RESUMED
    seen = await hostile(tmp_path, "resume", turns)
    assert seen["asked"] == [None, seen["last"]]
    assert (seen["marks"], seen["users"]) == (turns, turns)


async def test_the_page_parses_server_sent_events_however_they_are_cut(tmp_path):
    """Lines end in CRLF, LF or CR, a CR last in a chunk may be half of a CRLF,
    comments are skipped, data lines are joined, an event with no data or no
    blank line after it is not dispatched."""
    seen = await hostile(tmp_path, "parser")
    assert seen["whole"] == [
        {"id": "1", "type": "message", "data": '{"a":\n 1}'},
        {"id": "1", "type": "other", "data": "x"},
        {"id": "2", "type": "message", "data": "é"},
        {"id": "2", "type": "message", "data": ""},
    ]
    assert all(seen["cuts"]) and seen["single"]


async def test_a_token_no_header_can_carry_is_refused_by_the_page(tmp_path):
    """A token typed with a character no HTTP header can carry (``é``) was kept:
    every request of the page then failed in ``fetch`` itself (no status, a
    message about ISO-8859-1), and the event stream was asked for again for
    ever. Now the page says what a token is and keeps nothing."""
    seen = await hostile(tmp_path, "badtoken", token=TOKEN)
    assert seen["stored"] is None and seen["login"] is True
    assert "printable ASCII" in seen["said"]


async def test_a_turn_cut_off_by_a_crash_is_not_shown_running_for_ever(tmp_path):
    """Bug: a turn cut off by a crash of its server has no ``turn.finished``, so
    the page, and every reload of it, said "running" and offered Cancel (which
    answered "no turn is running") until another turn ended. Now, once the event
    stream is idle (a keep-alive), the page asks the server, which runs no turn
    of the session any more, and says idle."""
    async with running(tmp_path / "live") as (server, url), client(url) as http:
        await http.post("/sessions/s/turns", json={"message": "hold cut"})
        await wait_until(lambda: "cut" in serve_agents.holding)
        await read_until(url, "/sessions/s/events", lambda e: e["type"] == "tool.started")
        shutil.copytree(tmp_path / "live", tmp_path / "crashed")  # the store as a crash left it
        serve_agents.release("cut")
    serve_agents.reset()
    child = [sys.executable, str(SUPPORT / "page_cut_child.py")]
    async with running(tmp_path / "crashed", keepalive_seconds=0.2) as (server, url):
        with trio.fail_after(4 * WAIT):
            done = await trio.run_process(
                [*child, url, "s"], capture_stdout=True, capture_stderr=True, check=False
            )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(done.stdout) == {"status": "idle", "listed_running": 0}
