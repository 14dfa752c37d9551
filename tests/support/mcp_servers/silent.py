"""A "server" that never answers: ``initialize`` must be bounded. With
``--answer-initialize`` it answers ``initialize`` (a bare JSON-RPC result) and
then nothing more, so the first ``tools/list`` must be bounded too."""

import json
import sys

answer_initialize = "--answer-initialize" in sys.argv[1:]
for line in sys.stdin:
    print("got a line", file=sys.stderr, flush=True)
    if not answer_initialize:
        continue
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "silent", "version": "0"},
        }
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
