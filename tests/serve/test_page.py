"""The web page at /: its files come from the package with a strict policy, and
driven in headless Chromium it shows a streamed answer, folded thinking and a
held call whose approve button runs it."""

from __future__ import annotations

import json
import sys

import pytest
import trio
from paths import SUPPORT
from serving import client, running
from waiting import WAIT

TOKEN = "a-token-for-the-page-0001;=%"  # printable, with what a cookie must encode


async def test_the_page_and_its_files_are_served_with_a_strict_policy(tmp_path):
    async with running(tmp_path) as (server, url), client(url) as http:
        page = await http.get("/")
        script = await http.get("/page/page.js")
        style = await http.get("/page/page.css")
        missing = await http.get("/page/secret.py")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/page/page.js"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == 200 and "EventSource" in script.text
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    assert missing.status_code == 404 and missing.json()["error"]


@pytest.mark.parametrize("token", [None, TOKEN])
async def test_the_page_streams_a_turn_and_approves_a_held_call_in_chromium(tmp_path, token):
    """Send a message, see the answer; ask for thinking (folded); a held call shows
    approve and reject; approve runs it and the answer follows; a reload rebuilds
    the same transcript from the event stream. With a token, the page asks for it
    and goes on with it as a cookie (EventSource sends no header)."""
    shot = tmp_path / "page.png"
    child = [sys.executable, str(SUPPORT / "page_child.py")]
    async with running(tmp_path / "store", token=token) as (server, url):
        with trio.fail_after(4 * WAIT):
            done = await trio.run_process(
                [*child, url, str(shot), *([] if token is None else [token])],
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
