"""A hostile MCP server over stdio: bare JSON-RPC (no SDK), so it can send what a
well-behaved server never would. ``MODE`` (an environment variable) picks the
misbehaviour; ``RECORD`` (a file) gets a line for what it saw.

Modes: ``tools`` lists TOOLS (JSON: a list of tool objects) and answers calls
with "done"; ``hang_list`` answers tools/list once, then never again;
``hang_call`` never answers a tools/call (``IGNORE_TERM=1``: it ignores
SIGTERM too); ``cursor_loop`` pages its listing with the same cursor for
ever; ``ask`` answers a tools/call only after asking the client for sampling
(of MESSAGES messages), elicitation and roots (the answers go to RECORD);
``progress`` sends progress notifications with bogus tokens and values before answering; ``result``
answers a call with RESULT (JSON) as it is.
"""

import json
import os
import signal
import sys

MODE = os.environ.get("MODE", "tools")
RECORD = os.environ.get("RECORD")
if os.environ.get("IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

OK_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
TOOLS = (
    json.load(open(os.environ["TOOLS_FILE"]))
    if "TOOLS_FILE" in os.environ
    else json.loads(os.environ.get("TOOLS", "null")) or [{"name": "ok", "inputSchema": OK_SCHEMA}]
)
lists = 0


def record(text: str) -> None:
    if RECORD:
        with open(RECORD, "a") as f:
            f.write(text + "\n")


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def result(ident, value) -> None:
    send({"jsonrpc": "2.0", "id": ident, "result": value})


def read() -> dict:
    line = sys.stdin.readline()
    if not line:
        if MODE == "hang_call" and os.environ.get("IGNORE_TERM") == "1":
            while True:  # deaf to the end of stdin and to SIGTERM: only SIGKILL ends it
                signal.pause()
        sys.exit(0)
    return json.loads(line)


def ask(method: str, params: dict, ident: str) -> None:
    send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
    while True:
        message = read()
        if message.get("id") == ident and "method" not in message:
            record(f"{method}: {json.dumps(message)}")
            return


def on_call(message: dict) -> None:
    ident = message["id"]
    record(f"call {json.dumps(message['params'])}")
    if MODE == "hang_call":
        if os.environ.get("DEAF") == "1":  # reads nothing more: our writes fill the pipe
            while True:
                signal.pause()
        return
    if MODE == "ask":
        hi = {"role": "user", "content": {"type": "text", "text": "hi"}}
        sampling = {
            "messages": [hi] * int(os.environ.get("MESSAGES", "1")),
            "maxTokens": 10,
        }
        ask("sampling/createMessage", sampling, "s1")
        ask(
            "elicitation/create",
            {"message": "name?", "requestedSchema": {"type": "object", "properties": {}}},
            "e1",
        )
        ask("roots/list", {}, "r1")
    if MODE == "progress":
        token = message["params"].get("_meta", {}).get("progressToken")
        for bogus in ("nope", 12345, None, {"x": 1}):
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": bogus, "progress": 1},
                }
            )
        for value in (float("nan"), float("inf"), -1e308):
            params = {"progressToken": token, "progress": value, "total": value}
            sys.stdout.write(
                json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
                + "\n"
            )
        sys.stdout.flush()
    if MODE == "flood":  # requests and notifications it never reads the answers of
        kind = os.environ.get("FLOOD", "ping")
        for i in range(int(os.environ.get("COUNT", "100000"))):
            if kind == "ping":
                send({"jsonrpc": "2.0", "id": f"p{i}", "method": "ping"})
            elif kind == "garbage":
                sys.stdout.write("this is not JSON " + str(i) + "\n")
            else:
                send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": {"level": "info", "data": "x"},
                    }
                )
        sys.stdout.flush()
    if MODE == "result":
        result(ident, json.loads(os.environ["RESULT"]))
        return
    if MODE == "error":
        message = "x" * int(os.environ["ERROR_CHARS"])
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": message}})
        return
    result(ident, {"content": [{"type": "text", "text": "done"}]})


def main() -> None:
    global lists
    while True:
        message = read()
        method, ident = message.get("method"), message.get("id")
        record(f"got {method}")
        if ident is None or method is None:
            continue
        if method == "initialize":
            result(
                ident,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": "hostile", "version": "0"},
                },
            )
        elif method == "tools/list":
            lists += 1
            if MODE == "hang_list" and lists > 1:
                continue
            page = {"tools": TOOLS}
            if MODE == "cursor_loop":
                page["nextCursor"] = "same"
            result(ident, page)
        elif method == "tools/call":
            on_call(message)
        else:
            result(ident, {})


main()
