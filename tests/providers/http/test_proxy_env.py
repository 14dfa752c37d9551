"""Which proxy a request goes through (pure): the environment read as curl reads
it (and HTTP_PROXY as urllib reads it), NO_PROXY matched as curl matches it,
proxy URLs parsed without ever quoting a password, and a Redactor hiding the
proxy's secrets with the API key (those long enough to tell from ordinary text)."""

from __future__ import annotations

import base64
import json
import os
import urllib.parse
import urllib.request

import pytest

from trio_agent.providers.http._proxy import (
    MIN_SECRET_CHARS,
    Proxy,
    absolute_target,
    cidr4_match,
    cidr6_match,
    no_proxy_matches,
    parse_proxy,
    proxy_for,
)
from trio_agent.providers.http._redirect import request_target
from trio_agent.providers.http._secrets import MAX_ERROR_TEXT, Redactor, scrub_text

_CIDR4 = [
    ("192.160.0.1", "192.160.0.1", 33, False),
    ("192.160.0.1", "192.160.0.1", 32, True),
    ("192.160.0.1", "192.160.0.1", 0, True),
    ("192.160.0.1", "192.160.0.1", 24, True),
    ("192.160.0.1", "192.160.0.1", 26, True),
    ("192.160.0.1", "192.160.0.1", 20, True),
    ("192.160.0.1", "192.160.0.1", 18, True),
    ("192.160.0.1", "192.160.0.1", 12, True),
    ("192.160.0.1", "192.160.0.1", 8, True),
    ("192.160.0.1", "10.0.0.1", 8, False),
    ("192.160.0.1", "10.0.0.1", 32, False),
    ("192.160.0.1", "10.0.0.1", 0, False),
]
_CIDR6 = [
    ("::1", "::1", 0, True),
    ("::1", "::1", 128, True),
    ("::1", "0:0::1", 128, True),
    ("::1", "0:0::1", 129, False),
    ("fe80::ab47:4396:55c9:8474", "fe80::ab47:4396:55c9:8474", 64, True),
]
_LONG = "127.0.0.1." * 12  # curl spells out the 128 and 127 bytes below
_NO_PROXY = [
    ("www.example.com", "localhost .example.com .example.de", False),
    ("www.example.com", "localhost,.example.com,.example.de", True),
    ("www.example.com.", "localhost,.example.com,.example.de", True),
    ("example.com", "localhost,.example.com,.example.de", True),
    ("example.com.", "localhost,.example.com,.example.de", True),
    ("www.example.com", "localhost,.example.com.,.example.de", True),
    ("www.example.com", "localhost,www.example.com.,.example.de", True),
    ("example.com", "localhost,example.com,.example.de", True),
    ("example.com.", "localhost,example.com,.example.de", True),
    ("nexample.com", "localhost,example.com,.example.de", False),
    ("www.example.com", "localhost,example.com,.example.de", True),
    ("127.0.0.1", "127.0.0.1,localhost", True),
    ("127.0.0.1", "127.0.0.1,localhost,", True),
    ("127.0.0.1", "127.0.0.1/8,localhost,", True),
    ("127.0.0.1", "127.0.0.1/28,localhost,", True),
    ("127.0.0.1", "127.0.0.1/31,localhost,", True),
    ("127.0.0.1", "localhost,127.0.0.1", True),
    ("127.0.0.1", f"localhost,{_LONG}127.0.0.", False),  # 128 bytes
    ("127.0.0.1", f"localhost,{_LONG}127.0.0", False),  # 127 bytes
    ("localhost", "localhost,127.0.0.1", True),
    ("localhost", "127.0.0.1,localhost", True),
    ("foobar", "barfoo", False),
    ("foobar", "foobar", True),
    ("192.168.0.1", "foobar", False),
    ("192.168.0.1", "192.168.0.0/16", True),
    ("192.168.0.1", "192.168.0.0/16a", False),
    ("192.168.0.1", "192.168.0.0/16 ", True),
    ("192.168.0.1", "192.168.0.0/a16", False),
    ("192.168.0.1", "192.168.0.0/ 16", False),
    ("192.168.0.1", "192.168.0.0/24", True),
    ("192.168.0.1", "192.168.0.0/32", False),
    ("192.168.0.1", "192.168.0.1/32", True),
    ("192.168.0.1", "192.168.0.1/33", False),
    ("192.168.0.1", "192.168.0.0", False),
    ("192.168.1.1", "192.168.0.0/24", False),
    ("192.168.1.1", "192.168.0.0/33", False),
    ("192.168.1.1", "foo, bar, 192.168.0.0/24", False),
    ("192.168.1.1", "foo, bar, 192.168.0.0/16", True),
    ("::1", "foo, bar, 192.168.0.0/16", False),
    ("::1", "foo, bar, ::1/64", True),
    ("::1", "::1/64", True),
    ("::1", "::1/96", True),
    ("::1", "::1/129", False),
    ("::1", "::1/128", True),
    ("::1", "::1/127", True),
    ("::1", "::1/a127", False),
    ("::1", "::1/127a", False),
    ("::1", "::1/ 127", False),
    ("::1", "::1/127 ", True),
    ("::1", "::1/126", True),
    ("::1", "::1/125", True),
    ("::1", "::1/124", True),
    ("::1", "::1/123", True),
    ("::1", "::1/122", True),
    *(("2001:db8:8000::1", f"2001:db8::/{bits}", False) for bits in range(65, 73)),
    *(("2001:db8::1", f"2001:db8::/{bits}", True) for bits in range(65, 73)),
    ("::1", "::1/129", False),
    ("bar", "foo, bar, ::1/64", True),
    ("BAr", "foo, bar, ::1/64", True),
    ("BAr", "foo,,,,,              bar, ::1/64", True),
    ("www.example.com", "foo, .example.com", True),
    ("www.example.com", "www2.example.com, .example.net", False),
    ("example.com", ".example.com, .example.net", True),
    ("nonexample.com", ".example.com, .example.net", False),
]


def test_the_vectors_are_all_of_curls():
    assert (len(_CIDR4), len(_CIDR6), len(_NO_PROXY)) == (12, 5, 78)


@pytest.mark.parametrize(("address", "network", "bits", "match"), _CIDR4)
def test_curl_cidr4_vectors(address, network, bits, match):
    assert cidr4_match(address, network, bits) is match


@pytest.mark.parametrize(("address", "network", "bits", "match"), _CIDR6)
def test_curl_cidr6_vectors(address, network, bits, match):
    assert cidr6_match(address, network, bits) is match


@pytest.mark.parametrize(("host", "no_proxy", "match"), _NO_PROXY)
def test_curl_no_proxy_vectors(host, no_proxy, match):
    assert no_proxy_matches(host, no_proxy) is match


@pytest.mark.parametrize(
    ("host", "no_proxy", "match"),
    [
        ("anything.example", "*", True),  # '*' alone matches every host
        ("::1", "*", True),
        ("anything.example", "*, other", False),  # only alone: here it is a name
        ("anything.example", " *", False),
        ("host", "", False),
        ("", "*", False),  # no host: nothing to exempt
        ("EXAMPLE.COM", "example.com", True),  # case-insensitive either way
        ("www.example.com", "EXAMPLE.COM.", True),
        ("example.com", "www.example.com", False),  # a token longer than the host
        ("wwwexample.com", "example.com", False),  # only at a label boundary
        ("a.b", "\ta.b\t,\tc", True),  # tabs are blanks too
        ("c", "a.b\tc", False),  # a blank without a comma ends the list
        ("c", "a.b ,c", True),
        ("localhost", "127.0.0.1", False),  # names are never resolved
        ("127.0.0.1", "localhost", False),
        ("127.0.0.1", "127.0.0.0/8", True),
        ("10.1.2.3", "10.0.0.0/8", True),
        ("11.1.2.3", "10.0.0.0/8", False),
        ("10.1.2.3", "0.0.0.0/0", False),  # curl: /0 compares the whole address
        ("127.0.0.1", "::1", False),  # another family never matches
        ("::1", "127.0.0.1", False),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1", True),
        ("[::1]", "::1", True),  # a bracketed host is its address
        ("::1", "[::1]", True),  # beyond curl: a bracketed address in the list
        ("::1", "[::1]/64", True),
        ("2001:db8::1", "[2001:db8::]/32", True),
        ("2001:db9::1", "[2001:db8::]/32", False),
        ("::1", "[::1]x", False),
        ("127.0.0.1", "[127.0.0.1]", True),
    ],
)
def test_no_proxy_rules_beyond_the_vectors(host, no_proxy, match):
    assert no_proxy_matches(host, no_proxy) is match


_PROXY = "http://proxy.example:3128"


def _host(found: Proxy | None) -> str | None:
    return None if found is None else found.host


@pytest.mark.parametrize(
    ("environ", "chosen"),
    [
        ({}, None),
        (
            {"https_proxy": "http://a:1", "HTTPS_PROXY": "http://b:1", "all_proxy": "http://c:1"},
            "a",
        ),
        ({"HTTPS_PROXY": "http://b:1", "all_proxy": "http://c:1"}, "b"),
        ({"https_proxy": "", "HTTPS_PROXY": "http://b:1"}, "b"),  # empty counts as unset
        ({"all_proxy": "http://c:1", "ALL_PROXY": "http://d:1"}, "c"),
        ({"ALL_PROXY": "http://d:1"}, "d"),
        ({"https_proxy": "", "HTTPS_PROXY": "", "all_proxy": "", "ALL_PROXY": ""}, None),
        ({"http_proxy": "http://e:1"}, None),  # the http ones are not for https
        ({"HTTP_PROXY": "http://e:1"}, None),
        ({"REQUEST_METHOD": "GET", "HTTPS_PROXY": "http://b:1"}, "b"),  # CGI: only HTTP_PROXY
    ],
)
def test_an_https_request_reads_https_proxy_then_all_proxy(environ, chosen):
    assert _host(proxy_for("https://api.example/v1", "environment", environ)) == chosen


_CGI = {"REQUEST_METHOD": "POST"}
"""Set under CGI, where a request's ``Proxy:`` header arrives as HTTP_PROXY."""


@pytest.mark.parametrize(
    ("environ", "chosen"),
    [
        ({"http_proxy": "http://a:1", "HTTP_PROXY": "http://b:1", "all_proxy": "http://c:1"}, "a"),
        ({"http_proxy": "http://a:1", "all_proxy": "http://c:1"}, "a"),
        ({"HTTP_PROXY": "http://b:1"}, "b"),  # as urllib, requests and httpx (curl: never)
        ({"HTTP_PROXY": "http://b:1", "all_proxy": "http://c:1"}, "b"),
        ({"HTTP_PROXY": "http://b:1", "ALL_PROXY": "http://d:1"}, "b"),
        ({"http_proxy": "", "HTTP_PROXY": "http://b:1"}, "b"),  # empty counts as unset
        ({"http_proxy": "", "all_proxy": "http://c:1"}, "c"),
        ({"http_proxy": "", "HTTP_PROXY": "", "ALL_PROXY": "http://d:1"}, "d"),
        ({"https_proxy": "http://f:1", "HTTPS_PROXY": "http://f:1"}, None),
        # under CGI HTTP_PROXY is a request's Proxy: header (httpoxy): skipped
        ({**_CGI, "HTTP_PROXY": "http://b:1"}, None),
        ({"REQUEST_METHOD": "", "HTTP_PROXY": "http://b:1"}, None),  # set, even empty
        ({**_CGI, "HTTP_PROXY": "http://b:1", "ALL_PROXY": "http://d:1"}, "d"),
        ({**_CGI, "HTTP_PROXY": "http://b:1", "all_proxy": "http://c:1"}, "c"),
        ({**_CGI, "http_proxy": "http://a:1", "HTTP_PROXY": "http://b:1"}, "a"),  # lower case
        ({"request_method": "GET", "HTTP_PROXY": "http://b:1"}, "b"),  # CGI's name is exact
    ],
)
def test_a_plain_http_request_reads_http_proxy_then_all_proxy(environ, chosen):
    assert _host(proxy_for("http://api.example/v1", "environment", environ)) == chosen


_HTTP_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


@pytest.mark.parametrize("cgi", [False, True])
@pytest.mark.parametrize("mask", range(16))
def test_http_proxy_is_read_as_urllib_reads_it(monkeypatch, mask, cgi):
    # every mix of the four variables set (non-empty), with and without CGI: the
    # proxy urllib's getproxies_environment gives for http (its "http", else its
    # "all", as requests and httpx pick) is ours
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    environ = {name: f"http://p{at}:1" for at, name in enumerate(_HTTP_VARIABLES) if mask >> at & 1}
    if cgi:
        environ["REQUEST_METHOD"] = "GET"
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    found = urllib.request.getproxies_environment()
    theirs = found.get("http", found.get("all"))
    ours = proxy_for("http://api.example/v1", "environment", environ)
    assert (None if ours is None else f"http://{ours.host}:1") == theirs


def test_the_variable_gives_the_whole_proxy():
    found = proxy_for("https://api.example", "environment", {"HTTPS_PROXY": "https://p.corp"})
    assert found == Proxy("https", "p.corp", 443)


@pytest.mark.parametrize(
    ("environ", "direct"),
    [
        ({"NO_PROXY": "api.example"}, True),
        ({"no_proxy": ".example"}, True),
        ({"no_proxy": "other", "NO_PROXY": "api.example"}, False),  # lower-case wins
        ({"no_proxy": "", "NO_PROXY": "api.example"}, True),  # empty counts as unset
        ({"no_proxy": "*"}, True),
        ({"no_proxy": "localhost,127.0.0.1"}, False),
    ],
)
def test_no_proxy_exempts_hosts(environ, direct):
    environ = {"https_proxy": _PROXY, **environ}
    found = proxy_for("https://api.example:8443/v1", "environment", environ)
    assert (found is None) is direct


def test_localhost_is_not_exempt_unless_no_proxy_says_so():
    environ = {"http_proxy": _PROXY, "https_proxy": _PROXY}
    for url in ("http://localhost:8000", "http://127.0.0.1:8000", "https://[::1]:8443"):
        assert proxy_for(url, "environment", environ) == Proxy("http", "proxy.example", 3128)
    only_the_name = {**environ, "NO_PROXY": "localhost"}  # no address is resolved
    assert proxy_for("http://localhost:8000", "environment", only_the_name) is None
    assert proxy_for("http://127.0.0.1:8000", "environment", only_the_name) is not None
    listed = {**environ, "no_proxy": "localhost, 127.0.0.0/8, ::1"}
    for url in ("http://localhost:8000", "http://127.0.0.2:8000", "https://[::1]:8443"):
        assert proxy_for(url, "environment", listed) is None


def test_an_excluded_host_never_parses_the_proxy_variable():
    environ = {"https_proxy": "socks5://p:1080", "no_proxy": "api.example"}
    assert proxy_for("https://api.example", "environment", environ) is None
    with pytest.raises(ValueError, match="https_proxy"):
        proxy_for("https://other.example", "environment", environ)


def test_proxy_none_means_no_proxy_whatever_the_environment():
    environ = {"https_proxy": _PROXY, "http_proxy": _PROXY, "ALL_PROXY": _PROXY}
    assert proxy_for("https://api.example", None, environ) is None
    assert proxy_for("http://api.example", None, environ) is None


def test_an_explicit_proxy_serves_every_request_no_proxy_or_not():
    environ = {"https_proxy": "http://env:1", "NO_PROXY": "*"}
    for url in ("https://api.example", "http://localhost:1"):
        assert proxy_for(url, "http://mine:8080", environ) == Proxy("http", "mine", 8080)
    with pytest.raises(ValueError, match=r"^proxy=: socks5:// proxies are not supported"):
        proxy_for("https://api.example", "socks5://mine:1080", {})


def test_a_url_that_is_not_http_is_refused():
    with pytest.raises(ValueError, match="not an http or https URL"):
        proxy_for("ftp://files.example", "environment", {"all_proxy": _PROXY})


@pytest.mark.parametrize(
    ("url", "proxy"),
    [
        ("proxy.corp:3128", Proxy("http", "proxy.corp", 3128)),  # no scheme: http, as curl
        ("proxy.corp", Proxy("http", "proxy.corp", 80)),
        ("http://proxy.corp", Proxy("http", "proxy.corp", 80)),
        ("https://proxy.corp", Proxy("https", "proxy.corp", 443)),
        ("HTTP://Proxy.Corp:8080/", Proxy("http", "proxy.corp", 8080)),
        ("  http://proxy.corp:1/ignored/path  ", Proxy("http", "proxy.corp", 1)),
        ("http://[::1]:3128", Proxy("http", "::1", 3128)),
        ("[::1]:3128", Proxy("http", "::1", 3128)),
        ("http://10.0.0.1:65535", Proxy("http", "10.0.0.1", 65535)),
    ],
)
def test_parse_proxy(url, proxy):
    assert parse_proxy(url, "HTTPS_PROXY") == proxy


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("socks5://user:hunter2@p:1080", "socks5:// proxies are not supported"),
        ("socks5h://p:1080", "socks5h:// proxies are not supported"),
        ("socks4://p:1080", "socks4:// proxies are not supported"),
        ("socks4a://p:1080", "socks4a:// proxies are not supported"),
        ("ftp://p:21", "ftp:// proxies are not supported"),
        ("://p:1", "a URL without a scheme is not supported"),
        ("", "an empty proxy URL"),
        ("   ", "an empty proxy URL"),
        ("http://", "no host"),
        ("http://user:hunter2@", "no host"),
        ("http://user:hunter2@:3128", "no host"),
        ("http://user:hunter2@p:port", "port is not a number"),
        ("http://user:hunter2@p:0", "port is not a number"),
        ("http://user:hunter2@p:65536", "port is not a number"),
        ("http://user:hunter2@p:-1", "port is not a number"),
        ("http://user:hun/ter2@p:3128", "percent-encode"),  # else 'hun' would be the port
        ("http://user:12/34@p:3128", "percent-encode"),  # else a port 12 of host 'user'
        ("http://user:hun?ter2@p", "percent-encode"),
        ("http://user:hun#ter2@p", "percent-encode"),
        ("http://user:hun[ter2@p", "does not parse"),
        ("http://[::1:3128", "does not parse"),
        ("http://pro xy:3128", "not a host name"),
        ("http://user:hunter2@pro\x00xy", "not a host name"),
    ],
)
def test_a_bad_proxy_url_names_its_source_and_never_its_password(url, message):
    with pytest.raises(ValueError) as caught:
        parse_proxy(url, "HTTPS_PROXY")
    text = str(caught.value)
    assert text.startswith("HTTPS_PROXY: ")
    assert message in text
    for secret in ("hunter2", "hun", "ter2", "34"):
        assert secret not in text
    assert caught.value.__context__ is None  # no chained urllib error quoting the URL


def _basic(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("url", "raw"),
    [
        ("http://user:pass@p", b"user:pass"),
        ("http://us%20er:p%40ss%3Aw%2Frd%C3%A4%25@p", "us er:p@ss:w/rdä%".encode()),
        ("http://user:pa:ss@p", b"user:pa:ss"),  # a ':' in the password needs no encoding
        ("http://user:p@ss@p", b"user:p@ss"),  # nor an '@' (the last one ends it)
        ("http://user@p", b"user:"),
        ("http://user:@p", b"user:"),
        ("http://:pass@p", b":pass"),
        ("http://user:%FF@p", b"user:\xff"),  # bytes as they are, not decoded text
        ("http://user:a+b@p", b"user:a+b"),  # a '+' is not a space in a URL
    ],
)
def test_credentials_become_a_basic_proxy_authorization(url, raw):
    proxy = parse_proxy(url, "proxy=")
    assert proxy.authorization == _basic(raw)
    assert proxy.host == "p"


def test_no_credentials_no_authorization():
    for url in ("http://p:1", "http://@p:1"):
        proxy = parse_proxy(url, "proxy=")
        assert proxy.authorization is None and proxy.secrets == ()


def test_repr_and_shown_never_hold_the_credentials():
    proxy = parse_proxy("http://agent:s%3Acr%C3%A9t@[::1]:3128", "proxy=")
    token = base64.b64encode("agent:s:crét".encode()).decode()
    assert proxy.authorization == f"Basic {token}"
    assert proxy.shown == "http://[::1]:3128"
    assert repr(proxy) == "Proxy(scheme='http', host='::1', port=3128)"
    for text in (repr(proxy), str(proxy), proxy.shown):
        for secret in ("s:crét", "s%3Acr", "agent", token):
            assert secret not in text
    assert set(proxy.secrets) == {token, "s:crét", "s%3Acr%C3%A9t"}


def test_a_secret_is_at_least_six_characters():
    assert MIN_SECRET_CHARS == 6


@pytest.mark.parametrize(
    ("password", "kept"),
    [
        ("1", ()),
        ("12345", ()),
        ("123456", ("123456",)),
        ("p%40ss", ("p%40ss",)),  # as written, 6; decoded, "p@ss", 4
        ("p%40ssw", ("p%40ssw",)),  # "p@ssw", 5
        ("p%40sswd", ("p@sswd", "p%40sswd")),
        ("%C3%A4%C3%B6%C3%BC", ("%C3%A4%C3%B6%C3%BC",)),  # "äöü": 3 characters
    ],
)
def test_only_password_forms_of_six_characters_or_more_are_secrets(password, kept):
    proxy = parse_proxy(f"http://user:{password}@127.0.0.1:9", "proxy=")
    assert proxy.authorization is not None
    token = proxy.authorization.split()[1]
    assert len(token) >= 8  # "user:" and anything: 5 bytes or more, 8 characters of base64
    assert proxy.secrets == (token, *kept)


@pytest.mark.parametrize(
    ("url", "raw"), [("http://a:b@p", b"a:b"), ("http://ab@p", b"ab:"), ("http://:@p", b":")]
)
def test_credentials_of_three_bytes_or_fewer_leave_no_secret(url, raw):
    # their token is 4 characters of base64 (8 from 4 bytes on): nothing to tell
    # apart from ordinary text, standing for a password of 2 characters at most
    proxy = parse_proxy(url, "proxy=")
    assert proxy.authorization == _basic(raw)
    assert len(proxy.authorization.split()[1]) == 4
    assert proxy.secrets == ()
    longer = parse_proxy("http://a:bc@p", "proxy=")  # 4 bytes: 8 characters
    assert longer.secrets == (_basic(b"a:bc").split()[1],)


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("http://api.example/v1/chat?x=1#frag", "http://api.example/v1/chat?x=1"),
        ("http://api.example", "http://api.example/"),
        ("http://api.example:8080?q", "http://api.example:8080/?q"),
        ("http://user:secret@Api.Example:80/a", "http://Api.Example:80/a"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("https://api.example/x", "https://api.example/x"),
    ],
)
def test_absolute_target(url, target):
    assert absolute_target(url) == target
    assert absolute_target(url).endswith(request_target(url))  # the origin form's tail


def test_absolute_target_needs_an_http_url():
    with pytest.raises(ValueError):
        absolute_target("ftp://files.example/x")


KEY = "sk-live-0123456789"


def test_one_redactor_hides_the_key_and_the_proxys_secrets_in_any_form():
    proxy = parse_proxy("http://agent:p%40ss%2Fw%C3%B6rd@proxy:3128", "proxy=")
    redactor = Redactor(KEY, *proxy.secrets)
    token = proxy.authorization.split()[1]
    for secret in (KEY, "p@ss/wörd", token):
        forms = [secret, urllib.parse.quote(secret, safe=""), json.dumps(secret)[1:-1]]
        forms += [secret.upper(), repr(secret.encode())[2:-1]]
        for form in forms:
            text = f"got <{form}> back"
            assert redactor.redact(text) == "got <[redacted]> back", form
    text = f"key {KEY}, header Proxy-Authorization: {proxy.authorization}, pw p%40ss%2Fw%C3%B6rd"
    assert redactor.redact(text) == (
        "key [redacted], header Proxy-Authorization: Basic [redacted], pw [redacted]"
    )
    assert repr(redactor) == "Redactor()"


def test_a_short_password_leaves_messages_readable_and_the_token_hidden():
    proxy = parse_proxy("http://user:1@127.0.0.1:9", "proxy=")
    assert proxy.authorization == _basic(b"user:1")
    redactor = Redactor("key", *proxy.secrets)
    text = f"connect to 127.0.0.1:9 failed, 1 of 1; sent Proxy-Authorization: {proxy.authorization}"
    assert redactor.redact(text) == (
        "connect to 127.0.0.1:9 failed, 1 of 1; sent Proxy-Authorization: Basic [redacted]"
    )


def test_a_password_of_six_characters_is_redacted():
    proxy = parse_proxy("http://user:hunter@127.0.0.1:9", "proxy=")
    redactor = Redactor("key", *proxy.secrets)
    text = f"127.0.0.1:9 said: bad password hunter (HUNTER, hunt%65r) in {proxy.authorization}"
    assert redactor.redact(text) == (
        "127.0.0.1:9 said: bad password [redacted] ([redacted], [redacted]) in Basic [redacted]"
    )


def test_reach_is_the_longest_secrets():
    assert Redactor("abc").reach == Redactor("abc", "x").reach == Redactor("x", "abc").reach
    assert Redactor("x", "abcdef").reach == 2 * Redactor("abc").reach


def test_secrets_must_not_be_empty():
    for secrets in (("",), (KEY, ""), ("", KEY)):
        with pytest.raises(ValueError, match="non-empty"):
            Redactor(*secrets)


def test_overlapping_secrets_are_hidden_whole():
    redactor = Redactor("abcd", "cdef", "ab")
    assert redactor.redact("xabcdefx") == "x[redacted]x"  # no 'ef' left behind
    assert redactor.redact("xcdefabx") == "x[redacted][redacted]x"  # touching: each its own
    assert redactor.redact("ab abcd cdef") == "[redacted] [redacted] [redacted]"


def test_one_secret_redacts_as_before():
    redactor = Redactor(KEY, KEY)  # the same one twice is one
    text = f"{KEY}{KEY} and {KEY.upper()}"
    assert redactor.redact(text) == "[redacted][redacted] and [redacted]"


def test_a_long_secret_cut_at_the_cap_leaves_nothing():
    password = "correct horse battery staple " * 3
    redactor = Redactor(KEY, password)
    for at in range(MAX_ERROR_TEXT - len(password), MAX_ERROR_TEXT + 3, 7):
        text = "x" * at + urllib.parse.quote(password) + "y" * 5000
        scrubbed = scrub_text(text, redactor)
        assert len(scrubbed) <= MAX_ERROR_TEXT
        assert "horse" not in scrubbed and "batt" not in scrubbed
