"""Drives the serving page in headless Chromium (Debian's, through playwright's
synchronous API: its own event loop, in this child process, never in the
suite's): ``python page_child.py BASE_URL SCREENSHOT.png [form|fragment TOKEN]``;
with a token, it is typed into the page's token form first (``form``), or given
in the address, ``#token=...`` (``fragment``).

It opens a session, sends a message and waits for the streamed answer, asks
for thinking, then for a call held for approval (the screenshot is taken
then), approves it and waits for its result and the answer after it, then
reloads the page (the transcript is rebuilt from the event stream). It prints
one JSON object of what it saw, and where the token went: every request's URL
and ``Referer``, the cookies, the address, the tab's ``sessionStorage``."""

from __future__ import annotations

import json
import shutil
import sys
from urllib.parse import quote

from playwright.sync_api import Request, expect, sync_playwright

WAIT_MS = 60_000


def main(base_url: str, screenshot: str, how: str | None, token: str | None) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    seen: dict[str, object] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        context = browser.new_context(viewport={"width": 1100, "height": 760})
        page = context.new_page()
        requests: list[dict[str, object]] = []

        def sent(request: Request) -> None:
            headers = request.headers
            auth = "authorization" in headers
            requests.append({"url": request.url, "referer": headers.get("referer"), "auth": auth})

        page.on("request", sent)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        if how == "fragment":
            assert token is not None
            page.goto(f"{base_url}/#token={quote(token, safe='')}")
            expect(page.locator("#sessions")).to_be_attached(timeout=WAIT_MS)
            page.fill("#new-session-id", "web-1")
            page.click("#new-session button")
        else:
            page.goto(f"{base_url}/#web-1")
        expect(page.locator("#title")).to_have_text("web-1", timeout=WAIT_MS)
        if how == "form":
            expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
            page.fill("#token", token)
            page.click("#login button")
            expect(page.locator("#login")).to_be_hidden(timeout=WAIT_MS)
            errors.clear()  # the 401s that asked for the token

        def say(text: str, ends: int) -> None:
            page.fill("#message", text)
            page.click("#send")
            expect(page.locator(".end")).to_have_count(ends, timeout=WAIT_MS)

        say("hi", 1)
        seen["answer"] = page.locator(".assistant").nth(0).text_content()
        say("think", 2)
        seen["thinking"] = page.locator("details.thinking pre").text_content()
        seen["thinking_folded"] = page.locator("details.thinking").get_attribute("open") is None
        say("guard", 3)
        approve = page.locator(".tool button.approve")
        expect(approve).to_be_visible(timeout=WAIT_MS)
        seen["held"] = page.locator(".tool strong").text_content()
        seen["sessions"] = page.locator("#sessions a").all_text_contents()
        page.screenshot(path=screenshot, full_page=True)
        approve.click()
        expect(page.locator(".tool .result")).to_have_text("done n", timeout=WAIT_MS)
        expect(page.locator(".end")).to_have_count(4, timeout=WAIT_MS)
        seen["after"] = page.locator(".assistant").last.text_content()
        seen["decision"] = page.locator(".tool .decision").text_content()
        before = page.locator("#transcript").inner_text()
        page.reload()
        expect(page.locator(".end")).to_have_count(4, timeout=WAIT_MS)
        seen["same_after_reload"] = page.locator("#transcript").inner_text() == before
        seen["errors"] = errors
        seen["address"] = page.url
        seen["cookies"] = context.cookies()
        seen["stored"] = page.evaluate("sessionStorage.getItem('trio-agent-token')")
        seen["requests"] = requests
        browser.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    how, token = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else (None, None)
    main(sys.argv[1], sys.argv[2], how, token)
