"""A bare JSON-RPC MCP server (no SDK, so it can send what the SDK would not),
over stdio or, with ``--http PORT``, streamable HTTP answering in JSON. Tools:
`ok(a)`, and with DEPTH=N `deep`, whose inputSchema nests N object schemas. With
NOT_JSON=1 (HTTP) a tools/call is answered as application/json with a body that
is not JSON."""

import http.server
import json
import os
import socket
import sys

DEPTH = int(os.environ.get("DEPTH", "0"))
NOT_JSON = os.environ.get("NOT_JSON") == "1"


def tools() -> str:
    ok = {"type": "object", "properties": {"a": {"type": "integer"}}}
    listed = [json.dumps({"name": "ok", "inputSchema": ok})]
    if DEPTH:
        nested = '{"type": "string"}'  # built as text: json.dumps would recurse too deep
        for _ in range(DEPTH):
            nested = '{"type": "object", "properties": {"x": ' + nested + "}}"
        listed.append('{"name": "deep", "inputSchema": ' + nested + "}")
    return "[" + ", ".join(listed) + "]"


def answer(message: dict) -> str | None:
    """The JSON text answering ``message`` (None for a notification)."""
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None
    if method == "initialize":
        result = json.dumps(
            {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "0"},
            }
        )
    elif method == "tools/list":
        result = '{"tools": ' + tools() + "}"
    elif method == "tools/call":
        result = '{"content": [{"type": "text", "text": "done"}]}'
    else:
        result = "{}"
    return f'{{"jsonrpc": "2.0", "id": {json.dumps(ident)}, "result": {result}}}'


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(405)

    def do_DELETE(self):
        self.reply(200)

    def do_POST(self):
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = answer(message)
        if text is None:
            self.reply(202)
        elif NOT_JSON and message.get("method") == "tools/call":
            self.reply(200, b"<html>an error page, not JSON</html>")
        else:
            self.reply(200, text.encode())


if "--http-fd" in sys.argv:  # a listening socket the tests bound and handed over
    served = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
    served.socket.close()
    served.socket = socket.socket(fileno=int(sys.argv[sys.argv.index("--http-fd") + 1]))
    served.server_address = served.socket.getsockname()
    served.serve_forever()
elif "--http" in sys.argv:
    port = int(sys.argv[sys.argv.index("--http") + 1])
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
else:
    for line in sys.stdin:
        text = answer(json.loads(line))
        if text is not None:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
