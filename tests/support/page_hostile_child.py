"""Drives the serving page in headless Chromium (Debian's, through playwright's
synchronous API, in this child process) where a model or a visitor makes it
hard: ``python page_hostile_child.py BASE_URL SCENARIO`` (``replay``: the
session ``many`` holds ``TURNS`` finished turns already). It prints one JSON
value, what it saw in that scenario:

- ``hash``: an address whose ``#`` part is no valid percent-encoding: the
  page's errors and what it says;
- ``replay``: the requests for the sessions list while ``many`` is replayed;
- ``refused``: what the page says when the event stream is refused;
- ``twice``: the decisions sent when approve is clicked twice at once;
- ``early``: a held call seen before its turn's end: whether approve can be
  clicked then, and what it shows once the end has come (``many`` holds one);
- ``odd``: the results shown once calls of ids ``ODD_IDS`` (``.``, ``..``, one
  holding ``/``, one ``%``) are approved, each in a session of its own;
- ``follow``: how far from its end the transcript is after a long streamed answer;
- ``resume``: the event stream of ``many`` cut after its first turn and part
  of an event: the ``Last-Event-ID`` the page asks again with, and the turns
  it shows then;
- ``parser``: the page's SSE parser fed a stream whole and cut at every place;
- ``badtoken``: a token no header can carry typed into the token form: what
  the page keeps and says;
- ``elsewhere``: a held call of ``many`` decided by another client, its turn
  not started, then approved on the page: what the page shows;
- ``sendtwice``: send clicked and Ctrl+Enter pressed at once: the messages
  posted, and what the page shows;
- ``retried``: a turn whose failed attempts streamed calls (``RETRIED_CALLS``,
  given as ``many``'s event stream): the calls shown void and those shown live;
- ``unavailable``: ``many``'s event stream answered 503 once: the turns the
  page shows then (``many`` holds ``TURNS_RESUMED``), and what it says;
- ``longid``: a session of a 128-character id, a turn running: whether cancel
  is in view;
- ``switched``: a message sent, another session opened before the post is
  answered: what the message box holds then;
- ``unlisted``: the sessions list answered 503, ``many`` opened (it holds
  ``TURNS_RESUMED`` turns): the turns shown, and the status; then a session
  not made yet opened and a message sent: the answer;
- ``badids``: addresses naming ids no session can have (``BAD_IDS``): what
  the page says, and whether a message can be typed;
- ``markup``: every text of a turn given as HTML that would run
  (``HOSTILE_TEXT``): the elements shown, whether any of it ran;
- ``scrolledup``: ``many`` (``TURNS`` turns) scrolled to its top, then a
  message sent: how far from its end the transcript is after the answer;
- ``cancelled``: cancel turn clicked twice at once: the cancels posted, the
  turn's end, and what the page says.
"""

from __future__ import annotations

import json
import shutil
import sys
import urllib.request
from collections.abc import Callable

from playwright.sync_api import Page, Route, expect, sync_playwright

WAIT_MS = 60_000
TURNS = 30
TURNS_RESUMED = 3


def hash_part(page: Page, base_url: str, errors: list[str]) -> dict[str, object]:
    page.goto(f"{base_url}/#%E0%A4%A")
    expect(page.locator("#error")).to_be_visible(timeout=WAIT_MS)
    return {"errors": list(errors), "said": page.locator("#error").text_content()}


def counting(counter: str, matches: str) -> str:
    """A script run before the page's own: it counts in ``window[counter]`` the
    page's ``fetch`` calls whose ``path`` ``matches`` (a JavaScript expression)."""
    return f"""
window.{counter} = 0;
(() => {{
  const fetchBefore = window.fetch;
  window.fetch = (path, init) => {{
    if ({matches}) window.{counter} += 1;
    return fetchBefore(path, init);
  }};
}})();
"""


COUNT_LISTS = counting("listed", 'String(path) === "/sessions"')


def replay(page: Page, base_url: str, turns: int) -> int:
    """The requests for the sessions list the page made by the time it showed
    every turn's end (counted in the page, as it calls ``fetch``)."""
    page.add_init_script(COUNT_LISTS)
    page.goto(f"{base_url}/#many")
    expect(page.locator(".end")).to_have_count(turns, timeout=WAIT_MS)
    return int(page.evaluate("window.listed"))


ODD_IDS = [".", "..", "a/b", "50%"]


def odd(page: Page, base_url: str) -> list[str | None]:
    results = []
    for n, call_id in enumerate(ODD_IDS):
        page.goto(f"{base_url}/#odd-{n}")
        expect(page.locator("#title")).to_have_text(f"odd-{n}", timeout=WAIT_MS)
        page.fill("#message", f"guard call {call_id}")
        page.click("#send")
        page.locator(".tool button.approve").click(timeout=WAIT_MS)
        expect(page.locator(".tool .result")).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator(".end")).to_have_count(2, timeout=WAIT_MS)
        results.append(page.locator(".tool .result").text_content())
    return results


def follow(page: Page, base_url: str) -> float:
    page.goto(f"{base_url}/#long")
    page.fill("#message", "\n".join(f"line {n}" for n in range(300)))
    page.click("#send")
    expect(page.locator(".end")).to_have_count(1, timeout=WAIT_MS)
    page.evaluate("new Promise((done) => requestAnimationFrame(() => done()))")  # it scrolls
    return float(
        page.evaluate(
            "(() => { const t = document.getElementById('transcript');"
            " return t.scrollHeight - t.scrollTop - t.clientHeight; })()"
        )
    )


def refused(page: Page, base_url: str) -> str | None:
    """The session ``many``'s event stream is answered 401 (a token changed under
    the page), and the sessions list from then on: what the status says once
    the page shows the token form."""
    refused_yet: list[bool] = []

    def events(route: Route) -> None:
        refused_yet.append(True)  # before the page can see the refusal
        route.fulfill(status=401, body="{}")

    def sessions(route: Route) -> None:
        if refused_yet:
            route.fulfill(status=401, body="{}")
        else:
            route.continue_()

    page.route("**/sessions/many/events", events)
    page.route("**/sessions", sessions)
    page.goto(f"{base_url}/#many")
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#error")).to_be_visible(timeout=WAIT_MS)
    return page.locator("#status").text_content()


COUNT_DECISIONS = counting("decisions", 'String(path).includes("/approvals")')


def twice(page: Page, base_url: str) -> dict[str, object]:
    """approve clicked twice in one task (a double click faster than the
    server): the decisions the page sent, and what it showed."""
    page.add_init_script(COUNT_DECISIONS)
    page.goto(f"{base_url}/#twice")
    page.fill("#message", "guard")
    page.click("#send")
    expect(page.locator(".tool button.approve")).to_be_enabled(timeout=WAIT_MS)  # turn ended
    page.evaluate(
        "(() => { const approve = document.querySelector('.tool button.approve');"
        " approve.click(); approve.click(); })()"
    )
    expect(page.locator(".end")).to_have_count(2, timeout=WAIT_MS)  # the turn that ran it
    return {
        "decisions": page.evaluate("window.decisions"),
        "error": page.locator("#error").text_content(),
    }


def stream_until(base_url: str, kind: str) -> tuple[bytes, str]:
    """The event stream of ``many`` up to its first event of type ``kind``, as
    sent, and the id of that event."""
    sent: list[bytes] = []
    with urllib.request.urlopen(f"{base_url}/sessions/many/events", timeout=60) as stream:
        for line in stream:
            sent.append(line)
            if line.startswith(b"id: "):
                last = line[4:].strip().decode()
            if line.startswith(b"data: ") and f'"{kind}"'.encode() in line:
                sent.append(stream.readline())  # the blank line that ends it
                return b"".join(sent), last
    raise AssertionError(f"no {kind}")


def resume(page: Page, base_url: str, turns: int) -> dict[str, object]:
    """The first event stream is the first turn and half an event, then it ends."""
    body, last = stream_until(base_url, "turn.finished")
    asked: list[str | None] = []

    def events(route: Route) -> None:
        asked.append(route.request.headers.get("last-event-id"))
        if len(asked) == 1:
            cut = body + b'id: 999999\ndata: {"schema": 1, "ev'
            headers = {"content-type": "text/event-stream"}
            route.fulfill(status=200, headers=headers, body=cut)
        else:
            route.continue_()

    page.route("**/sessions/many/events", events)
    page.goto(f"{base_url}/#many")
    expect(page.locator(".end")).to_have_count(turns, timeout=WAIT_MS)
    return {
        "asked": asked[:2],
        "last": last,
        "marks": page.locator(".turn-mark").count(),
        "users": page.locator(".user").count(),
    }


def early(page: Page, base_url: str) -> dict[str, object]:
    """The session ``many`` holds a call (its turn ended awaiting approval). The
    page's first event stream ends just after ``approval.requested``, so the page
    sees the turn still running; its next one waits until the approve button
    has been looked at and clicked (in the page's own code), then goes on: is
    the button enabled while the turn runs, the decisions sent then, and what
    the page shows once the turn's end has come and approve is clicked."""
    body, _ = stream_until(base_url, "approval.requested")
    later: list[Route] = []
    released: list[bool] = []

    def events(route: Route) -> None:
        if released:
            route.continue_()
        elif not later:
            later.append(route)
            route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=body)
        else:
            later.append(route)  # answered below, once the button has been looked at

    page.add_init_script(COUNT_DECISIONS)
    page.route("**/sessions/many/events", events)
    page.goto(f"{base_url}/#many")
    approve = page.locator(".tool button.approve")
    expect(approve).to_be_visible(timeout=WAIT_MS)
    seen: dict[str, object] = {"enabled_while_running": approve.is_enabled()}
    page.evaluate("document.querySelector('.tool button.approve').click()")
    seen["decisions_while_running"] = page.evaluate("window.decisions")
    if seen["decisions_while_running"]:
        return seen  # decided already: there is no approve left to click
    for _ in range(WAIT_MS // 50):  # the page asks again a second after the stream ends
        if len(later) > 1:
            break
        page.wait_for_timeout(50)
    released.append(True)
    for route in later[1:]:
        route.continue_()
    approve.click(timeout=WAIT_MS)  # once enabled: the turn's end has come
    expect(page.locator(".tool .result")).to_have_count(1, timeout=WAIT_MS)
    seen["result"] = page.locator(".tool .result").text_content()
    seen["error"] = page.locator("#error").text_content()
    return seen


def decide_outside(base_url: str) -> None:
    """The call ``many`` holds approved by another client (another tab, or this
    page before a reload): recorded, and no turn started after it."""
    with urllib.request.urlopen(f"{base_url}/sessions/many", timeout=60) as answer:
        (call,) = json.load(answer)["pending_approvals"]
    body = json.dumps({"call_id": call["id"], "approved": True}).encode()
    asked = urllib.request.Request(
        f"{base_url}/sessions/many/approvals",
        data=body,
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(asked, timeout=60):
        pass


def elsewhere(page: Page, base_url: str) -> dict[str, object]:
    """``many`` holds a call decided already, its turn not started (a decision is in
    the event stream only once that turn starts, so the page shows it held): what
    the page shows once approve is clicked there, the call's result or an error."""
    decide_outside(base_url)
    page.goto(f"{base_url}/#many")
    page.locator(".tool button.approve").click(timeout=WAIT_MS)  # once enabled
    shown = page.locator(".tool .result").or_(page.locator("#error:visible"))
    expect(shown.first).to_be_visible(timeout=WAIT_MS)
    return {
        "result": page.locator(".tool .result").all_text_contents(),
        "error": page.locator("#error").text_content(),
    }


COUNT_TURNS = counting("posted", 'String(path).endsWith("/turns")')

SEND_TWICE = """
(() => {
  document.getElementById("send").click();
  const keys = { key: "Enter", ctrlKey: true, bubbles: true, cancelable: true };
  document.getElementById("message").dispatchEvent(new KeyboardEvent("keydown", keys));
})()
"""


def sendtwice(page: Page, base_url: str) -> dict[str, object]:
    """send clicked, then Ctrl+Enter pressed, in one task (faster than the
    server answers): the messages the page posted, and what it showed."""
    page.add_init_script(COUNT_TURNS)
    page.goto(f"{base_url}/#twice")
    expect(page.locator("#message")).to_be_enabled(timeout=WAIT_MS)
    page.fill("#message", "hi")
    page.evaluate(SEND_TWICE)
    expect(page.locator(".end")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#message")).to_have_value("", timeout=WAIT_MS)  # the post answered
    return {
        "posted": page.evaluate("window.posted"),
        "users": page.locator(".user").count(),
        "error": page.locator("#error").text_content(),
    }


def call(call_id: str) -> dict[str, object]:
    return {"type": "tool_call", "id": call_id, "name": "guarded", "arguments": {"note": "n"}}


def chunk(request: str, attempt: int, what: dict[str, object]) -> dict[str, object]:
    return {"type": "model.chunk", "request_id": request, "attempt": attempt, "chunk": what}


def ran(call_id: str) -> list[dict[str, object]]:
    result = {
        "role": "tool_result",
        "id": f"tool-result-{call_id}",
        "tool_call_id": call_id,
        "tool_name": "guarded",
        "content": f"done {call_id}",
        "is_error": False,
    }
    return [
        {"type": "tool.started", "call": call(call_id)},
        {"type": "tool.finished", "call": call(call_id), "result": result},
    ]


def failed(request: str) -> dict[str, object]:
    return {"type": "attempt.failed", "request_id": request, "attempt": 1, "error": "cut"}


# a turn whose model's first attempts stream a call, then fail and are retried:
# with a call of another id (as models name calls afresh), then of the same id
RETRIED_CALLS = [
    {"type": "turn.started", "turn": 1},
    {"type": "message.accepted", "message": {"role": "user", "id": "u", "content": "go"}},
    chunk("r1", 1, call("a1")),
    failed("r1"),
    chunk("r1", 2, call("a2")),
    *ran("a2"),
    chunk("r2", 1, call("b")),
    failed("r2"),
    chunk("r2", 2, call("b")),
    *ran("b"),
    chunk("r3", 1, {"type": "text_delta", "text": "fine"}),
    {"type": "turn.finished", "turn": 1, "result": {"end": {"reason": "completed"}}},
]


def served_once(page: Page, pattern: str, body: bytes) -> None:
    """The page's first request for ``pattern`` (an event stream) answered with
    ``body``; those after it (asked again once it ends) left unanswered."""
    held: list[Route] = []

    def events(route: Route) -> None:
        held.append(route)
        if len(held) == 1:
            headers = {"content-type": "text/event-stream"}
            route.fulfill(status=200, headers=headers, body=body)

    page.route(pattern, events)


def stream_of(events: list[dict[str, object]]) -> bytes:
    return b"".join(
        f"id: {n}\ndata: {json.dumps({'schema': 1, 'event': {**e, 'sequence': n}})}\n\n".encode()
        for n, e in enumerate(events)
    )


def retried(page: Page, base_url: str) -> dict[str, object]:
    """``many``'s event stream answered with ``RETRIED_CALLS`` (then held): the
    calls shown void (of a failed attempt), and those shown live with their results."""
    served_once(page, "**/sessions/many/events", stream_of(RETRIED_CALLS))
    page.goto(f"{base_url}/#many")
    expect(page.locator(".end")).to_have_count(1, timeout=WAIT_MS)
    live = page.locator(".tool:not(.void)")
    return {
        "void": page.locator(".tool.void").evaluate_all("(all) => all.map((b) => b.dataset.call)"),
        "live": live.evaluate_all("(all) => all.map((b) => b.dataset.call)"),
        "results": page.locator(".tool:not(.void) .result").all_text_contents(),
    }


def unavailable(page: Page, base_url: str) -> dict[str, object]:
    """``many``'s event stream answered 503 once (a proxy in front of a server
    that restarts, or a store's blip: 500), then served: the turns the page
    shows, or what it says."""
    asked: list[bool] = []

    def events(route: Route) -> None:
        asked.append(True)
        if len(asked) == 1:
            route.fulfill(status=503, headers={"content-type": "text/html"}, body="<h1>503</h1>")
        else:
            route.continue_()

    page.route("**/sessions/many/events", events)
    page.goto(f"{base_url}/#many")
    shown = page.locator(".end").nth(TURNS_RESUMED - 1).or_(page.locator("#error:visible"))
    expect(shown.first).to_be_visible(timeout=WAIT_MS)
    return {"ends": page.locator(".end").count(), "error": page.locator("#error").text_content()}


LONG_ID = "a-session-of-a-long-id-" + "x" * 105  # 128 characters, as many as an id may


def longid(page: Page, base_url: str) -> dict[str, object]:
    """A session of a 128-character id whose turn runs (its event stream and the
    sessions list given by the test): whether the cancel button is in view."""
    listed = json.dumps({"sessions": [{"id": LONG_ID, "running_turn": 1}]})
    started = stream_of([{"type": "turn.started", "turn": 1}])
    page.route("**/sessions", lambda route: route.fulfill(status=200, body=listed))
    served_once(page, f"**/sessions/{LONG_ID}/events", started)
    page.goto(f"{base_url}/#{LONG_ID}")
    cancel = page.locator("#cancel")
    expect(cancel).to_be_visible(timeout=WAIT_MS)
    box = cancel.bounding_box()
    assert box is not None
    width = page.evaluate("document.documentElement.clientWidth")
    return {"cancel_in_view": box["x"] + box["width"] <= width}


def switched(page: Page, base_url: str) -> dict[str, object]:
    """A message sent in ``sent``, its post held until the page has opened
    ``other``, then answered: what the box holds then (in ``other``), what the
    page says, and the messages posted."""
    posts: list[Route] = []
    page.add_init_script(COUNT_TURNS)

    def post(route: Route) -> None:
        posts.append(route)  # answered below

    page.route("**/sessions/sent/turns", post)
    page.goto(f"{base_url}/#sent")
    expect(page.locator("#message")).to_be_enabled(timeout=WAIT_MS)
    page.fill("#message", "for sent")
    page.click("#send")
    for _ in range(WAIT_MS // 50):
        if posts:
            break
        page.wait_for_timeout(50)
    page.goto(f"{base_url}/#other")
    expect(page.locator("#title")).to_have_text("other", timeout=WAIT_MS)
    posts[0].continue_()
    expect(page.locator("#send")).to_be_enabled(timeout=WAIT_MS)  # the post answered
    return {
        "box": page.locator("#message").input_value(),
        "error": page.locator("#error").text_content(),
        "posted": page.evaluate("window.posted"),
    }


def unlisted(page: Page, base_url: str) -> dict[str, object]:
    """The sessions list answered 503 (a proxy, a store's blip), ``many``'s event
    stream served: the turns the page shows, and its status."""
    page.route("**/sessions", lambda route: route.fulfill(status=503, body="{}"))
    page.goto(f"{base_url}/#many")
    new = page.locator("#status", has_text="new session")
    expect(page.locator(".end").nth(TURNS_RESUMED - 1).or_(new)).to_be_visible(timeout=WAIT_MS)
    seen = {"ends": page.locator(".end").count(), "status": page.locator("#status").text_content()}
    page.goto(f"{base_url}/#fresh")  # no such session: its event stream is a 404
    expect(new).to_be_visible(timeout=WAIT_MS)
    page.fill("#message", "hi")
    page.click("#send")
    expect(page.locator(".end")).to_have_count(1, timeout=WAIT_MS)
    seen["fresh"] = page.locator(".assistant").all_text_contents()
    return seen


BAD_IDS = ["a%2Fb", "my%20session", ".hidden", "x" * 129, "%C3%A9t%C3%A9"]


def badids(page: Page, base_url: str) -> list[dict[str, object]]:
    """Addresses naming sessions no session can have (a ``/``, a space, a first
    ``.``, 129 characters, letters not ASCII): for each, what the page says and
    whether a message can be typed."""
    seen = []
    for n, given in enumerate(BAD_IDS):
        page.goto(f"{base_url}/#ok-{n}")  # a session between two: each one a change
        expect(page.locator("#title")).to_have_text(f"ok-{n}", timeout=WAIT_MS)
        page.goto(f"{base_url}/#{given}")
        expect(page.locator("#title")).not_to_have_text(f"ok-{n}", timeout=WAIT_MS)
        seen.append(
            {
                "said": page.locator("#error").text_content(),
                "composer": page.locator("#message").is_enabled(),
            }
        )
    return seen


HTML = '<img src=x onerror="window.ran=1"><script>window.ran=2</script>&amp;'


def hostile_call() -> dict[str, object]:
    return {"type": "tool_call", "id": HTML, "name": HTML, "arguments": {HTML: HTML}}


def hostile_result() -> dict[str, object]:
    return {
        "role": "tool_result",
        "id": "r",
        "tool_call_id": HTML,
        "tool_name": HTML,
        "content": [{"type": "text", "text": HTML}],
        "is_error": True,
    }


# every text a model, a tool or a person gave, as HTML that would run
HOSTILE_TEXT = [
    {"type": "turn.started", "turn": 1},
    {"type": "message.accepted", "message": {"role": "user", "id": "u", "content": HTML}},
    chunk("r1", 1, {"type": "thinking_delta", "thinking": HTML}),
    chunk("r1", 1, {"type": "text_delta", "text": HTML}),
    chunk("r1", 1, hostile_call()),
    {"type": "approval.requested", "call": hostile_call()},
    {"type": "approval.decided", "call": hostile_call(), "approved": False, "reason": HTML},
    {"type": "message.accepted", "message": hostile_result()},
    {
        "type": "turn.finished",
        "turn": 1,
        "result": {"end": {"reason": "failed", "code": HTML, "detail": HTML}},
    },
]


def markup(page: Page, base_url: str) -> dict[str, object]:
    """``many``'s event stream answered with ``HOSTILE_TEXT`` (then held): the
    elements the transcript holds, whether any of it ran, and the texts shown."""
    served_once(page, "**/sessions/many/events", stream_of(HOSTILE_TEXT))
    page.goto(f"{base_url}/#many")
    expect(page.locator(".end")).to_have_count(1, timeout=WAIT_MS)
    page.evaluate("new Promise((done) => requestAnimationFrame(() => done()))")  # text in
    return {
        "tags": page.evaluate(
            "[...new Set([...document.querySelectorAll('#transcript *')].map((e) => e.tagName))]"
        ),
        "ran": page.evaluate("window.ran === undefined ? null : window.ran"),
        "texts": page.locator("#transcript").inner_text().count(HTML),
    }


SCROLL_UP = """
new Promise((done) => {
  document.getElementById("transcript").scrollTop = 0;
  requestAnimationFrame(() => done());  // the scroll event has come by then
})
"""


def scrolledup(page: Page, base_url: str, turns: int) -> dict[str, object]:
    """``many`` (``turns`` turns) read from its top, then a message sent: how far
    from its end the transcript is once the answer has come."""
    page.goto(f"{base_url}/#many")
    expect(page.locator(".end")).to_have_count(turns, timeout=WAIT_MS)
    page.evaluate(SCROLL_UP)
    top = page.evaluate("document.getElementById('transcript').scrollTop")
    page.fill("#message", "hi")
    page.click("#send")
    expect(page.locator(".end")).to_have_count(turns + 1, timeout=WAIT_MS)
    page.evaluate("new Promise((done) => requestAnimationFrame(() => done()))")  # it scrolls
    distance = page.evaluate(
        "(() => { const t = document.getElementById('transcript');"
        " return t.scrollHeight - t.scrollTop - t.clientHeight; })()"
    )
    return {"top": top, "distance": float(distance)}


COUNT_CANCELS = counting("cancels", 'String(path).endsWith("/cancel")')


def cancelled(page: Page, base_url: str) -> dict[str, object]:
    """A turn held (a ``hold`` call no one releases), cancel turn clicked twice
    in one task: the cancels the page posted, the turn's end, what it said."""
    page.add_init_script(COUNT_CANCELS)
    page.goto(f"{base_url}/#cancelled")
    expect(page.locator("#message")).to_be_enabled(timeout=WAIT_MS)
    page.fill("#message", "hold cancelled-twice")
    page.click("#send")
    expect(page.locator(".tool .state")).to_have_text(" running…", timeout=WAIT_MS)
    page.evaluate(
        "(() => { const cancel = document.getElementById('cancel');"
        " cancel.click(); cancel.click(); })()"
    )
    expect(page.locator(".end")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#cancel")).to_be_enabled(timeout=WAIT_MS)  # the post answered
    return {
        "cancels": page.evaluate("window.cancels"),
        "end": page.locator(".end").text_content(),
        "error": page.locator("#error").text_content(),
    }


PARSE = r"""
(() => {
  const text = ": hi\r\nid: 1\r\ndata: {\"a\":\r\ndata:  1}\r\n\r\n" +
    "event: other\rdata: x\r\rid: 2\ndata:é\n\ndata\n\nid\n: keep-alive\n\n" +
    "data: no end";
  const parse = (chunks) => {
    const out = [];
    const push = sseParser((event) => out.push(event));
    for (const chunk of chunks) push(chunk);
    return JSON.stringify(out);
  };
  const whole = parse([text]);
  const cuts = [];
  for (let at = 0; at <= text.length; at++) {
    cuts.push(parse([text.slice(0, at), text.slice(at)]) === whole);
  }
  return { whole: JSON.parse(whole), cuts, single: parse(text.split("")) === whole };
})()
"""


def parser(page: Page, base_url: str) -> object:
    page.goto(f"{base_url}/")
    return page.evaluate(PARSE)


def badtoken(page: Page, base_url: str) -> dict[str, object]:
    page.goto(f"{base_url}/#bad")
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    page.fill("#token", "é" * 20)
    page.click("#login button")
    expect(page.locator("#error")).to_contain_text("token", timeout=WAIT_MS)
    return {
        "stored": page.evaluate("sessionStorage.getItem('trio-agent-token')"),
        "login": page.locator("#login").is_visible(),
        "said": page.locator("#error").text_content(),
    }


def main(base_url: str, scenario: str) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page(viewport={"width": 1100, "height": 760})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        scenarios: dict[str, Callable[[], object]] = {
            "hash": lambda: hash_part(page, base_url, errors),
            "replay": lambda: replay(page, base_url, TURNS),
            "refused": lambda: refused(page, base_url),
            "twice": lambda: twice(page, base_url),
            "resume": lambda: resume(page, base_url, TURNS_RESUMED),
            "badtoken": lambda: badtoken(page, base_url),
            "parser": lambda: parser(page, base_url),
            "early": lambda: early(page, base_url),
            "odd": lambda: odd(page, base_url),
            "elsewhere": lambda: elsewhere(page, base_url),
            "sendtwice": lambda: sendtwice(page, base_url),
            "retried": lambda: retried(page, base_url),
            "unavailable": lambda: unavailable(page, base_url),
            "longid": lambda: longid(page, base_url),
            "switched": lambda: switched(page, base_url),
            "unlisted": lambda: unlisted(page, base_url),
            "badids": lambda: badids(page, base_url),
            "markup": lambda: markup(page, base_url),
            "scrolledup": lambda: scrolledup(page, base_url, TURNS),
            "cancelled": lambda: cancelled(page, base_url),
            "follow": lambda: follow(page, base_url),
        }
        seen = scenarios[scenario]()
        browser.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
