"""Opens the serving page in headless Chromium (Debian's) on a session whose last
turn was cut off by a crash: ``python page_cut_child.py BASE_URL SESSION``. It
waits for the cut turn's running tool to be shown, then for the page to say the
session is idle; prints one JSON object of what it saw."""

from __future__ import annotations

import json
import shutil
import sys
from urllib.parse import quote

from playwright.sync_api import expect, sync_playwright

WAIT_MS = 60_000


def main(base_url: str, session_id: str) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page()
        page.goto(f"{base_url}/#{quote(session_id, safe='')}")
        expect(page.locator(".tool .state")).to_have_text(" running…", timeout=WAIT_MS)
        expect(page.locator("#cancel")).to_be_hidden(timeout=WAIT_MS)
        seen = {
            "status": page.locator("#status").text_content(),
            "listed_running": page.locator("#sessions .running").count(),
        }
        browser.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
