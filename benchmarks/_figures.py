"""The ``--json`` option the benchmark scripts share, for ``benchmarks/all.py``.

A script records its figures with ``record(name=value)`` beside the lines it
prints. Run plainly, it prints its human text as before and nothing else; with
``--json``, the human text goes to stderr and stdout gets one line: the
figures as one JSON object. What a script measures is the same either way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

FIGURES: dict[str, Any] = {}
"""What this process's script recorded, printed by ``json_output``."""


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the figures as one JSON object on stdout (the text goes to stderr)",
    )


def record(**figures: Any) -> None:
    """Keep ``figures`` for the JSON object (a later value of a name wins)."""
    FIGURES.update(figures)


@contextlib.contextmanager
def json_output(enabled: bool) -> Iterator[None]:
    """With ``enabled``, send the block's printing to stderr, then print the
    recorded figures on stdout as one line of JSON (not if the block raised)."""
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield
    print(json.dumps(FIGURES), flush=True)
