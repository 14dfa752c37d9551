"""The web page at ``/``: plain HTML, CSS and JavaScript shipped in the package
(``serve/page/``), no build step and nothing from elsewhere. A strict Content
Security Policy lets it load only its own files and talk only to this server.
The files are read once, in a worker thread, and kept."""

from __future__ import annotations

from importlib import resources
from typing import Final, final

import trio
from starlette.requests import Request
from starlette.responses import Response

__all__ = ["Page"]

FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
}
HEADERS: Final = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "cache-control": "no-cache",
    "referrer-policy": "no-referrer",
}


def _read(name: str) -> bytes:
    return resources.files("trio_agent.serve").joinpath("page", name).read_bytes()


@final
class Page:
    """The page's files, read on first use."""

    def __init__(self) -> None:
        self._files: dict[str, bytes] = {}

    async def file(self, name: str) -> Response:
        body = self._files.get(name)
        if body is None:
            body = self._files[name] = await trio.to_thread.run_sync(_read, name)
        return Response(body, 200, headers=HEADERS, media_type=FILES[name])

    async def index(self, request: Request) -> Response:
        return await self.file("index.html")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in FILES or name == "index.html":
            return Response(b'{"error": "no such file"}', 404, media_type="application/json")
        return await self.file(name)
