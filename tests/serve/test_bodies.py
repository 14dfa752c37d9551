"""Hostile input is a 4xx with a JSON error, never a 500: bad JSON, wrong types,
unknown fields, huge bodies, odd ids and cursors, on every route."""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serving import FRESH, in_a_thread

from trio_agent.serve import MAX_BODY_BYTES
from trio_agent.serve._bodies import ApiError, cursor_of

ALLOWED = {200, 202, 400, 404, 405, 409, 413}


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    with in_a_thread(tmp_path_factory.mktemp("store")) as url:
        yield url


@pytest.fixture(scope="module")
def http(base_url):
    with httpx.Client(base_url=base_url, timeout=60, limits=FRESH) as session:
        yield session


def check(response: httpx.Response) -> None:
    assert response.status_code in ALLOWED, (response.status_code, response.text)
    if response.status_code >= 400:
        assert isinstance(response.json()["error"], str)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", 400),
        (b"{", 400),
        (b"null", 400),
        (b"[]", 400),
        (b'"hi"', 400),
        (b'{"message": 3}', 400),
        (b'{"message": ["a"]}', 400),
        (b'{"message": "a", "extra": 1}', 400),
        (b"\xff\xfe", 400),
        (b'{"message": "' + b"[" * 10_000 + b'"}', 202),  # a string, however odd
        (b"[" * 100_000, 400),
        (b" " * (MAX_BODY_BYTES + 1), 413),
    ],
)
def test_bad_turn_bodies_are_refused_with_a_json_error(http, body, status):
    response = http.post("/sessions/table/turns", content=body)
    check(response)
    assert response.status_code in (status, 409)  # 409: the one accepted turn still runs


@pytest.mark.parametrize(
    "body",
    [b"{}", b'{"approved": "yes"}', b'{"approved": 1}', b'{"approved": true, "reason": 5}'],
)
def test_bad_decisions_are_refused_with_a_json_error(http, body):
    response = http.post("/sessions/unknown/approvals/c1", content=body)
    check(response)
    assert response.status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/sessions/..",
        "/sessions/.hidden",
        "/sessions/%00",
        "/sessions/a%2Fb",
        "/sessions/" + "x" * 129,
        "/sessions/%E2%80%AE",
        "/sessions/s/approvals/" + "c" * 300,
    ],
)
def test_odd_ids_are_refused_with_a_json_error(http, path):
    for method in ("GET", "POST"):
        response = http.request(method, path, json={"approved": True})
        if response.url.path == "/" and method == "GET":  # the client resolved ".." away
            assert response.headers["content-type"].startswith("text/html")  # the page
            continue
        check(response)
        assert response.status_code in (400, 404, 405)


@pytest.mark.parametrize("cursor", ["-1", "x", "1.5", "99999999999999999999", "١٢"])
def test_bad_cursors_are_refused(http, cursor):
    response = http.get("/sessions/any/events", params={"after": cursor})
    check(response)
    assert response.status_code == 400
    response = http.get("/sessions/any/events", headers={"Last-Event-ID": cursor.encode()})
    assert response.status_code == 400


def test_last_event_id_wins_over_after_as_a_browser_reconnects():
    """EventSource keeps its URL (``?after=`` of the first connection) and sends
    ``Last-Event-ID`` on reconnecting: the header is where to go on from."""
    assert cursor_of("7", "2") == 7
    assert cursor_of(None, "2") == 2
    assert cursor_of("", "2") == 2
    assert cursor_of(None, None) == -1
    with pytest.raises(ApiError):
        cursor_of("7x", None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    session=st.text(max_size=40),
    call=st.text(min_size=1, max_size=40),
    body=st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())),
    route=st.sampled_from(["turns", "approvals", "cancel", "state", "events", "ag-ui"]),
)
def test_no_input_gets_a_server_error(http, session, call, body, route):
    """Whatever the id, call id and body: a 2xx or a 4xx with a JSON error."""
    quoted = quote(session, safe="") or "%20"
    if route == "turns":
        response = http.post(f"/sessions/{quoted}/turns", content=body)
    elif route == "approvals":
        response = http.post(f"/sessions/{quoted}/approvals/{quote(call, safe='')}", content=body)
    elif route == "cancel":
        response = http.post(f"/sessions/{quoted}/cancel", content=body)
    elif route == "ag-ui":
        response = http.post("/ag-ui", content=body)
    elif route == "state":
        response = http.get(f"/sessions/{quoted}")
    else:  # a cursor of the body's bytes; a session no turn was started on
        cursor = body.decode("latin-1").replace("\n", " ").replace("\r", " ")
        response = http.get(f"/sessions/never-{quoted}/events", params={"after": cursor})
    check(response)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/ag-ui", b'{"threadId": "t", "runId": "r", "messages": [], "state": %s}'),
        ("/ag-ui", b'{"threadId": "t", "runId": "r", "messages": [{"role": "u", "content": %s}]}'),
        ("/v1/responses", b'{"input": %s}'),
        ("/v1/responses", b'{"input": "hi", "tools": %s}'),
    ],
)
def test_json_nested_too_deeply_is_a_400(http, path, body):
    """Deeply nested JSON where any value is taken (a payload, content, unused
    fields) made msgspec raise RecursionError, which no handler caught: a 500."""
    deep = b"[" * 100_000 + b"]" * 100_000
    response = http.post(path, content=body % deep)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "nested" in (error if isinstance(error, str) else error["message"])


@pytest.mark.parametrize("route", ["/sessions/s/turns", "/ag-ui", "/v1/responses"])
def test_a_body_announced_over_the_cap_is_refused_before_it_is_read(base_url, route):
    """Review of issue 38: a body whose Content-Length passed the cap was read up
    to the cap before the 413, so a client announcing 2 MiB and sending nothing
    held the request open. The announced length alone is refused at once."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(base_url)
    with socket.create_connection((where.hostname, where.port), timeout=60) as sock:
        sock.sendall(
            f"POST {route} HTTP/1.1\r\nHost: {where.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
            "{".encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer:  # observed: no answer until the body came
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


@pytest.mark.parametrize(
    ("announced", "refused"),
    [
        ("5", False),
        (str(MAX_BODY_BYTES), False),
        (str(MAX_BODY_BYTES + 1), True),
        ("9" * 40, True),
        ("²", False),
        ("-1", False),
        ("0" * 30 + "1", False),
    ],
)
async def test_only_an_announced_length_over_the_cap_is_refused_unread(announced, refused):
    """The Content-Length check: a decimal over the cap is refused before a byte
    is read; anything else is left to the read's own count (which takes ``{}``)."""
    from trio_agent.serve._bodies import read_body

    read: list[bytes] = []

    async def chunks():
        read.append(b"{}")
        yield b"{}"

    if refused:
        with pytest.raises(ApiError) as caught:
            await read_body(chunks(), announced=announced)
        assert caught.value.status == 413 and read == []
    else:
        assert await read_body(chunks(), announced=announced) == b"{}"


response_texts = st.text(st.characters(codec="utf-8"), max_size=12).filter(
    lambda text: "hold" not in text  # the test agent's call that waits for its release
) | st.sampled_from(["echo", "guard", "", "\x00"])
odd = st.sampled_from([None, 0, 1.5, True, [], {}, "x", [{}], {"text": "x"}])
part = (
    st.fixed_dictionaries(
        {"type": st.sampled_from(["input_text", "text", "input_image"]), "text": response_texts}
    )
    | st.fixed_dictionaries({"type": st.sampled_from(["input_text", "text"]) | odd})
    | odd
)
message_item = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "user", "system", "developer", "assistant", "tool", ""]),
        "content": st.one_of(
            st.lists(part, max_size=3), st.lists(part, min_size=1), response_texts
        ),
    },
    optional={"type": st.just("message")},
)
approval_item = st.fixed_dictionaries(
    {
        "type": st.just("mcp_approval_response"),
        "approval_request_id": st.sampled_from(["c-request-001", ""]) | odd,
        "approve": st.booleans() | odd,
    },
    optional={"reason": response_texts | odd},
)
response_items = st.one_of(
    message_item, message_item, approval_item, st.fixed_dictionaries({"type": odd}), odd
)
response_bodies = st.fixed_dictionaries(
    {"input": st.lists(response_items, min_size=1, max_size=3)},
    optional={
        "instructions": response_texts | odd,
        "previous_response_id": st.sampled_from(["resp_table_1", "resp__1", "resp_x_0", "resp_"]),
        "tools": odd,
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=response_bodies)
def test_no_responses_request_gets_a_server_error(http, body):
    """``POST /v1/responses`` with request-shaped bodies of every odd kind (items,
    roles, contents, approval answers, response ids): a 2xx or an OpenAI-shaped
    4xx, never a 500."""
    response = http.post("/v1/responses", content=json.dumps(body).encode())
    assert response.status_code in ALLOWED, (response.status_code, response.text)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["type"], str) and isinstance(error["message"], str)
