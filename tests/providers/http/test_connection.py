"""One HTTP/1.1 connection (``_connection``): https to a private CA through
``ssl_context=``, refused without it, and one default TLS context shared."""

from __future__ import annotations

import pytest
import trio
from loopback import Reply, fixture
from sse_bodies import SECRET_KEY
from sse_bodies import read as read_stream

from trio_agent import ModelError, TextBlock, TransientModelError
from trio_agent.providers import AnthropicModel


async def test_https_to_a_private_ca_with_its_context_and_one_shared_default_context():
    # https is tested for real: a throwaway CA (trustme), the loopback server behind
    # TLS, and the adapter trusting that CA through ssl_context=. Without it, the
    # system's store refuses the certificate (a clear error, the key redacted).

    """https for real: a private CA trusted through ``ssl_context=``, refused without it (not
    retried, the key redacted), one default context shared, and a bad ``ssl_context`` refused."""
    from helpers import tls_contexts
    from loopback import Loopback

    from trio_agent.providers.http import _connection as _http

    server_context, client_context = tls_contexts()
    server = Loopback(tls=server_context)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        server.replies.append(Reply(body=fixture("anthropic_text.sse")))
        model = AnthropicModel(
            "m", api_key=SECRET_KEY, base_url=server.url, ssl_context=client_context
        )
        chunks, response = await read_stream(model)
        assert response.content == (TextBlock("The sum is 42."),)
        assert server.requests[0].headers["x-api-key"] == SECRET_KEY
        untrusting = AnthropicModel("m", api_key=SECRET_KEY, base_url=server.url)
        with pytest.raises(ModelError, match="CERTIFICATE_VERIFY_FAILED") as caught:
            await read_stream(untrusting)
        assert not isinstance(caught.value, TransientModelError)  # a retry cannot help
        assert SECRET_KEY not in str(caught.value)
        first = _http._default_tls
        assert first is not None and first is await _http.default_tls_context()
        nursery.cancel_scope.cancel()
    with pytest.raises(TypeError, match="ssl_context"):
        AnthropicModel("m", api_key=SECRET_KEY, ssl_context="yes")
