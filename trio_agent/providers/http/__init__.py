"""Our HTTP/1.1 client, on trio's own streams (no HTTP library): what the provider
adapters send their requests through.

``_http`` sends a request and streams its answer (``HTTPStream``), over a
connection from ``_pool``'s keep-alive pool (``ConnectionPool``, public in
``trio_agent.providers``); ``_connection`` opens one (TCP, TLS, through a proxy
chosen by ``_proxy``); ``_wire`` reads heads and bodies as small state machines
fed bytes; ``_sse`` parses server-sent events; ``_inflate`` undoes a content
coding; ``_redirect`` follows a 307/308 within an origin; ``_secrets`` keeps the
key out of every message; ``_errors`` says what a failure stands for. The
adapters import what they need from those modules; nothing here is public.
"""

__all__: list[str] = []
