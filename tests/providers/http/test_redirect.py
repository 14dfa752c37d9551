"""Redirects in the HTTP client (issue 16 item 3, DESIGN 11.3): a 307 or 308 within the
same origin is followed with the same request, at most 3 in a row; another origin is
refused before anything is sent there; a 301, 302 or 303 stays an error that names
its Location; a target stays quoted through a forwarding proxy. Each over a real
loopback socket."""

from __future__ import annotations

import urllib.parse

import pytest
import trio
from loopback import Loopback, Reply
from sse_bodies import DONE, anthropic_hello, choice, read, sse
from waiting import WAIT, wait_until

from trio_agent import ModelRequest, ModelRequestError, TextDelta, UserMessage
from trio_agent.providers import AnthropicModel, OpenAIChatModel
from trio_agent.providers.http._proxy import absolute_target
from trio_agent.providers.http._redirect import Redirects

KEY = "sk-redirect/KEY+0123456789=abcdef"
REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())
HELLO = sse(choice({"content": "Hello"}), choice({"content": " world"}), choice({}, "stop")) + DONE
PATH = "/v1/chat/completions"


def openai(loopback: Loopback) -> OpenAIChatModel:
    return OpenAIChatModel("m", api_key=KEY, base_url=f"{loopback.url}/v1")


def text_of(chunks: list[object]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


def assert_same_request(loopback: Loopback, paths: list[str]) -> None:
    """Every request the server saw is the first one again, at ``paths``."""
    assert [seen.path for seen in loopback.requests] == paths
    first = loopback.requests[0]
    assert first.method == "POST" and first.body
    key = first.headers.get("x-api-key") or first.headers["authorization"].removeprefix("Bearer ")
    assert key == KEY
    for seen in loopback.requests[1:]:
        assert seen.method == first.method
        assert seen.body == first.body
        assert seen.headers == first.headers


@pytest.mark.parametrize("status", [307, 308])
async def test_a_same_origin_redirect_is_followed_with_the_same_request(loopback, status):
    loopback.replies = [
        Reply(status, b'{"moved": true}', headers={"location": f"{loopback.url}/v2/chat"}),
        Reply(body=HELLO, chunked=True, piece=17),
    ]
    chunks, response = await read(openai(loopback), REQUEST)
    assert text_of(chunks) == "Hello world"
    assert response.stop_reason == "stop"
    assert_same_request(loopback, [PATH, "/v2/chat"])


async def test_a_relative_location_is_resolved_against_the_request_url(loopback):
    loopback.replies = [
        Reply(307, headers={"location": "completions-new?x=1"}),
        Reply(308, headers={"location": "/root"}),
        Reply(body=HELLO),
    ]
    chunks, _ = await read(openai(loopback), REQUEST)
    assert text_of(chunks) == "Hello world"
    assert_same_request(loopback, [PATH, "/v1/chat/completions-new?x=1", "/root"])


async def test_an_anthropic_request_keeps_its_key_header_across_a_redirect(loopback):
    loopback.replies = [
        Reply(308, headers={"location": "/v9/messages"}),
        Reply(body=anthropic_hello()),
    ]
    chunks, _ = await read(AnthropicModel("m", api_key=KEY, base_url=loopback.url), REQUEST)
    assert text_of(chunks) == "Hi"
    assert_same_request(loopback, ["/v1/messages", "/v9/messages"])
    assert loopback.requests[1].headers["x-api-key"] == KEY


async def test_a_redirect_to_another_origin_is_refused_and_nothing_is_sent_there(loopback):
    other = Loopback()
    async with trio.open_nursery() as nursery:
        await nursery.start(other.serve)
        other.replies = [Reply(body=HELLO)]
        elsewhere = f"{other.url}/v1/chat/completions"
        loopback.replies = [Reply(307, headers={"location": elsewhere})]
        with pytest.raises(ModelRequestError) as caught:
            await read(openai(loopback), REQUEST)
        nursery.cancel_scope.cancel()
    text = str(caught.value)
    assert "HTTP 307" in text and elsewhere in text and "another origin" in text
    assert other.requests == []
    assert len(loopback.requests) == 1


@pytest.mark.parametrize(
    "location",
    [
        "http://localhost:{port}/v1/chat/completions",  # another host, same port
        "https://127.0.0.1:{port}/v1/chat/completions",  # another scheme
        "http://127.0.0.1:1/v1/chat/completions",  # another port
        "ftp://127.0.0.1:{port}/x",  # not http at all
    ],
)
async def test_every_part_of_the_origin_counts(loopback, location):
    location = location.format(port=loopback.port)
    loopback.replies = [Reply(308, headers={"location": location})]
    with pytest.raises(ModelRequestError, match="another origin"):
        await read(openai(loopback), REQUEST)
    assert len(loopback.requests) == 1


async def test_three_redirects_are_followed_and_a_fourth_is_refused(loopback):
    loopback.replies = [Reply(307, headers={"location": f"/r{i}"}) for i in (1, 2, 3)]
    loopback.replies.append(Reply(body=HELLO))
    chunks, _ = await read(openai(loopback), REQUEST)
    assert text_of(chunks) == "Hello world"
    assert len(loopback.requests) == 4

    loopback.requests.clear()
    loopback.replies = [Reply(307, headers={"location": f"/r{i}"}) for i in (1, 2, 3, 4)]
    loopback.replies.append(Reply(body=HELLO))
    with pytest.raises(ModelRequestError) as caught:
        await read(openai(loopback), REQUEST)
    text = str(caught.value)
    assert "more than 3 redirects" in text
    chain = [f"{loopback.url}{p}" for p in (PATH, "/r1", "/r2", "/r3", "/r4")]
    assert " -> ".join(chain) in text
    assert [seen.path for seen in loopback.requests] == [PATH, "/r1", "/r2", "/r3"]


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_redirect_that_would_become_a_get_is_an_error_naming_its_location(loopback, status):
    loopback.replies = [Reply(status, b"moved", headers={"location": "/v2/chat/completions"})]
    with pytest.raises(ModelRequestError) as caught:
        await read(openai(loopback), REQUEST)
    text = str(caught.value)
    assert f"HTTP {status}" in text and "'/v2/chat/completions'" in text and "moved" in text
    assert len(loopback.requests) == 1


@pytest.mark.parametrize("status", [302, 307])
async def test_a_location_carrying_the_key_is_redacted(loopback, status):
    other = "http://elsewhere.invalid" if status == 307 else ""  # 307: cross-origin
    loopback.replies = [Reply(status, headers={"location": f"{other}/v1/chat?key={KEY}"})]
    with pytest.raises(ModelRequestError) as caught:
        await read(openai(loopback), REQUEST)
    text = str(caught.value)
    assert "/v1/chat?key=[redacted]" in text
    assert KEY not in text and "0123456789" not in text


async def test_a_key_in_a_redirect_chain_is_redacted(loopback):
    loopback.replies = [Reply(307, headers={"location": f"/r{i}?k={KEY}"}) for i in range(4)]
    with pytest.raises(ModelRequestError, match="more than 3 redirects") as caught:
        await read(openai(loopback), REQUEST)
    assert "0123456789" not in str(caught.value)
    assert str(caught.value).count("[redacted]") == 4


async def test_a_location_cannot_break_the_request_line(loopback):
    loopback.replies = [
        Reply(307, headers={"location": "/a b/\u00e9"}),
        Reply(body=HELLO),
    ]
    chunks, _ = await read(openai(loopback), REQUEST)
    assert text_of(chunks) == "Hello world"
    assert loopback.requests[1].path == "/a%20b/%C3%A9"


async def test_cancelled_during_the_redirected_request_closes_its_connection(loopback):
    loopback.replies = [
        Reply(307, headers={"location": "/next"}),
        Reply(head=b"HTTP/1.1 200 X\r\n", hang_after=0),  # a head that never ends
    ]
    with trio.CancelScope() as scope:  # cancelled once the redirected request was sent
        async with trio.open_nursery() as nursery:

            async def stream() -> None:
                async with openai(loopback).stream(REQUEST):
                    pytest.fail("the second response never opens")

            nursery.start_soon(stream)
            await wait_until(lambda: len(loopback.requests) == 2)
            scope.cancel()
    assert scope.cancelled_caught
    with trio.fail_after(WAIT):
        await loopback.client_closed.wait()
    assert [seen.path for seen in loopback.requests] == [PATH, "/next"]


def test_a_redirect_through_a_forwarding_proxy_keeps_the_target_quoted():
    """Issue 16 (review of the transport): a redirect target sent through a forwarding proxy lost
    its quoting."""
    redirects = Redirects("http://h:8/v1/chat/completions", "P")
    target = redirects.follow(307, {"location": "/v2/chat completions"})
    assert target == "/v2/chat%20completions"
    # what HTTPStream sends through a forwarding proxy
    assert absolute_target(urllib.parse.urljoin(redirects.url, target)) == (
        "http://h:8/v2/chat%20completions"
    )
