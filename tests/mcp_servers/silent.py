"""A "server" that reads its stdin and never answers: ``initialize`` must be bounded."""

import sys

for _line in sys.stdin:
    print("got a line, answering nothing", file=sys.stderr, flush=True)
