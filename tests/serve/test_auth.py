"""A bearer token: required beyond loopback, and then on every request."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from serving import client, running
from sse_client import finished, read_until

from trio_agent.serve import Server
from trio_agent.serve._auth import check_binding, check_token, is_loopback

TOKEN = "t0ken-with-enough-characters"


def test_binding_beyond_loopback_needs_a_token(tmp_path):
    for host in ("0.0.0.0", "::", "192.168.1.2", "example.com"):
        with pytest.raises(ValueError, match="TRIO_AGENT_TOKEN"):
            Server(lambda *a: None, store=tmp_path, host=host)
        check_binding(host, TOKEN)
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host)
        check_binding(host, None)


def test_regression_server_beyond_loopback_without_a_token_names_its_token_keyword(
    tmp_path, monkeypatch
):
    """``Server(host="0.0.0.0")`` said "--token or TRIO_AGENT_TOKEN", the command
    line's words: a library user who set the variable got the same error, since
    ``Server`` reads no environment. It names ``token=`` too."""
    monkeypatch.setenv("TRIO_AGENT_TOKEN", TOKEN)
    with pytest.raises(ValueError, match=r"needs a bearer token: Server\(token=\.\.\.\)"):
        Server(lambda *a: None, store=tmp_path, host="0.0.0.0")


@pytest.mark.parametrize(
    "token", ["short", "x" * 15, "with a space in it here", "tab\there-is-long-enough", "é" * 20]
)
def test_an_unusable_token_is_refused(token):
    with pytest.raises(ValueError):
        check_token(token)


async def test_with_a_token_every_request_needs_it(tmp_path):
    """No header, a wrong token, a second header, another scheme: 401 with a JSON
    error and a challenge, on every route (the event stream too); the right
    token: served."""
    async with running(tmp_path, token=TOKEN) as (server, url), client(url) as http:
        wrong = [
            {},
            {"Authorization": f"Bearer {TOKEN}x"},
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": TOKEN},
        ]
        for headers in wrong:
            for method, path in [
                ("GET", "/sessions"),
                ("GET", "/sessions/s"),
                ("POST", "/sessions/s/turns"),
                ("GET", "/sessions/s/events"),
                ("POST", "/sessions/s/cancel"),
                ("POST", "/sessions/s/approvals/c1"),
                ("POST", "/ag-ui"),
                ("POST", "/v1/responses"),
            ]:
                response = await http.request(method, path, headers=headers, json={"message": "x"})
                assert response.status_code == 401, (headers, path)
                assert "bearer" in response.json()["error"]
                assert response.headers["www-authenticate"].startswith("Bearer")
        assert server.hub.running_turn("s") is None  # nothing reached the hub
        twice = [("Authorization", f"Bearer {TOKEN}"), ("Authorization", f"Bearer {TOKEN}")]
        assert (await http.get("/sessions", headers=twice)).status_code == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert (await http.get("/sessions", headers=good)).status_code == 200
        for scheme in ("bearer", "BEARER"):  # a scheme is any case (RFC 9110): it was a 401
            lower = {"Authorization": f"{scheme} {TOKEN}"}
            assert (await http.get("/sessions", headers=lower)).status_code == 200
        response = await http.post("/sessions/s/turns", headers=good, json={"message": "hi"})
        assert response.status_code == 202
        events = await read_until(url, "/sessions/s/events", finished(1), headers=good)
        assert events[-1][1]["event"]["result"]["final_text"] == "echo: hi"


async def test_the_token_as_a_cookie_is_refused_and_the_page_needs_none(tmp_path):
    """Bug: the token was also taken from the page's cookie ``trio_agent_token``,
    which a page served on another port of the same host can read and send
    (cookies are scoped by host, not port). Now a request with that cookie (and
    the page's old header) and no ``Authorization`` is a 401, on every route; a
    token in the URL is no token either. The page's files hold no data and are
    served without a token; nothing else is."""
    old = {
        "Cookie": f"other=1; trio_agent_token={quote(TOKEN, safe='')}",
        "x-trio-agent-page": "1",
    }
    async with running(tmp_path, token=TOKEN) as (server, url), client(url) as http:
        for path in ["/", "/page/page.js", "/page/page.css"]:
            assert (await http.get(path)).status_code == 200, path
        assert (await http.get("/page/index.html")).status_code == 401
        assert (await http.post("/", json={})).status_code == 401
        for method, path in [
            ("GET", "/sessions"),
            ("GET", "/sessions/s"),
            ("POST", "/sessions/s/turns"),
            ("GET", "/sessions/s/events"),
            ("POST", "/sessions/s/cancel"),
            ("POST", "/sessions/s/approvals"),
            ("POST", "/sessions/s/approvals/c1"),
            (
                "GET",
                f"/sessions?token={quote(TOKEN, safe='')}&access_token={quote(TOKEN, safe='')}",
            ),
        ]:
            response = await http.request(method, path, headers=old, json={"message": "hi"})
            assert response.status_code == 401, path
        assert server.hub.running_turn("s") is None  # nothing reached the hub
        good = {"Authorization": f"Bearer {TOKEN}"}
        response = await http.post("/sessions/s/turns", headers=good, json={"message": "hi"})
        assert response.status_code == 202
        events = await read_until(url, "/sessions/s/events", finished(1), headers=good)
        assert events[-1][1]["event"]["result"]["final_text"] == "echo: hi"


async def test_without_a_token_only_requests_to_loopback_from_no_other_site_are_served(tmp_path):
    """Bug: with no token (loopback), any web page open in the user's browser could
    drive the server: a form or a no-cors fetch of another site (``text/plain``, no
    preflight) started turns and decided held calls, and a page on a name rebound
    to 127.0.0.1 (DNS rebinding) read every session. Now a request whose Origin is
    another site, or whose Host is no loopback name, is a 403 with a JSON error."""
    async with running(tmp_path) as (server, url), client(url) as http:
        port = url.rpartition(":")[2]
        plain = {"content-type": "text/plain"}
        for origin in ["https://evil.example", "null", f"http://localhost:{int(port) + 1}"]:
            forged = await http.post(
                "/sessions/s/turns",
                content=b'{"message": "hi"}',
                headers={**plain, "origin": origin},
            )
            assert forged.status_code == 403, origin
            assert "loopback" in forged.json()["error"]
        for host in [f"evil.example:{port}", "127.0.0.1.evil.example", f"user@evil.example:{port}"]:
            assert (await http.get("/sessions", headers={"host": host})).status_code == 403, host
            assert (await http.get("/", headers={"host": host})).status_code == 403, host
        assert server.hub.running_turn("s") is None
        assert (await http.get("/sessions")).json() == {"sessions": []}
        own = await http.post("/sessions/s/turns", json={"message": "hi"}, headers={"origin": url})
        assert own.status_code == 202  # the page, from this server's own origin
        for host in [f"localhost:{port}", f"127.0.0.1:{port}", "localhost"]:
            assert (await http.get("/sessions", headers={"host": host})).status_code == 200
    async with running(tmp_path, token=TOKEN) as (server, url), client(url) as http:
        behind = {"host": "agents.example.com", "Authorization": f"Bearer {TOKEN}"}
        assert (await http.get("/sessions", headers=behind)).status_code == 200  # a proxy's name


async def test_no_other_site_is_let_send_the_token(tmp_path):
    """With no cookie, a request forged by another site's page (a form, or a
    ``fetch`` from another port of this host) carries no token: it is a 401;
    and the browser's question before a ``fetch`` with an ``Authorization``
    header (a CORS preflight) is answered with no leave to send one."""
    async with running(tmp_path, token=TOKEN) as (server, url), client(url) as http:
        port = int(url.rpartition(":")[2])
        for origin in ["https://evil.example", f"http://127.0.0.1:{port + 1}", "null"]:
            form = await http.post(
                "/sessions/s/turns",
                content=b"message=hi",
                headers={"origin": origin, "content-type": "application/x-www-form-urlencoded"},
            )
            assert form.status_code == 401, origin
            preflight = await http.options(
                "/sessions/s/approvals",
                headers={
                    "origin": origin,
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "authorization, content-type",
                },
            )
            assert preflight.status_code >= 400, origin
            assert not any(name.startswith("access-control-") for name in preflight.headers)
        assert server.hub.running_turn("s") is None
