"""Testing agents offline, deterministically, under faults and cancellation.

- ``ScriptedModel`` / ``scripted_response``: a model that replays a script;
- ``FaultyModel`` and its faults: inject named, seeded faults into any model;
- ``ReplayModel``: replay the responses a session ledger recorded;
- ``explore_cancellation``: cancel a scenario after each checkpoint in turn;
- ``assert_run_invariants``: what the contract promises for any run;
- ``block_network``: real providers refuse to connect (``NetworkBlockedError``);
- ``trace``: an event stream as compact text, for snapshot asserts;
- ``trio_agent.testing.strategies``: hypothesis strategies;
- the pytest plugin (``trio_agent.testing.pytest_plugin``): fixtures.

Each is imported when first named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import lazy as _lazy

if TYPE_CHECKING:
    from ._callable import CallableModel as CallableModel
    from ._explorer import ExplorationFailure as ExplorationFailure
    from ._explorer import ExplorationReport as ExplorationReport
    from ._explorer import explore_cancellation as explore_cancellation
    from ._faults import CorruptChunk as CorruptChunk
    from ._faults import CutStream as CutStream
    from ._faults import DisagreeingResponse as DisagreeingResponse
    from ._faults import Fault as Fault
    from ._faults import FaultyModel as FaultyModel
    from ._faults import HangAt as HangAt
    from ._faults import RaiseOnCall as RaiseOnCall
    from ._guard import NetworkBlockedError as NetworkBlockedError
    from ._guard import block_network as block_network
    from ._invariants import InvariantError as InvariantError
    from ._invariants import assert_run_invariants as assert_run_invariants
    from ._replay import ReplayDivergenceError as ReplayDivergenceError
    from ._replay import ReplayModel as ReplayModel
    from ._schema_runs import SchemaModel as SchemaModel
    from ._schema_runs import schema_arguments as schema_arguments
    from ._schema_runs import tool_calls_for as tool_calls_for
    from ._schema_values import SchemaError as SchemaError
    from ._scripted import ScriptedModel as ScriptedModel
    from ._scripted import ScriptedResponse as ScriptedResponse
    from ._scripted import ScriptExhaustedError as ScriptExhaustedError
    from ._scripted import scripted_response as scripted_response
    from ._trace import trace as trace

__all__ = [
    "CallableModel",
    "CorruptChunk",
    "CutStream",
    "DisagreeingResponse",
    "ExplorationFailure",
    "ExplorationReport",
    "Fault",
    "FaultyModel",
    "HangAt",
    "InvariantError",
    "NetworkBlockedError",
    "RaiseOnCall",
    "ReplayDivergenceError",
    "ReplayModel",
    "SchemaError",
    "SchemaModel",
    "ScriptExhaustedError",
    "ScriptedModel",
    "ScriptedResponse",
    "assert_run_invariants",
    "block_network",
    "explore_cancellation",
    "schema_arguments",
    "scripted_response",
    "tool_calls_for",
    "trace",
]

# Each part is imported when first named: a test that only scripts a model loads
# neither the explorer nor the network guard (and with it our HTTP client).
__getattr__ = _lazy(
    globals(),
    {
        "CallableModel": "._callable",
        "CorruptChunk": "._faults",
        "CutStream": "._faults",
        "DisagreeingResponse": "._faults",
        "ExplorationFailure": "._explorer",
        "ExplorationReport": "._explorer",
        "Fault": "._faults",
        "FaultyModel": "._faults",
        "HangAt": "._faults",
        "InvariantError": "._invariants",
        "NetworkBlockedError": "._guard",
        "RaiseOnCall": "._faults",
        "ReplayDivergenceError": "._replay",
        "ReplayModel": "._replay",
        "SchemaError": "._schema_values",
        "SchemaModel": "._schema_runs",
        "ScriptExhaustedError": "._scripted",
        "ScriptedModel": "._scripted",
        "ScriptedResponse": "._scripted",
        "assert_run_invariants": "._invariants",
        "block_network": "._guard",
        "explore_cancellation": "._explorer",
        "schema_arguments": "._schema_runs",
        "scripted_response": "._scripted",
        "tool_calls_for": "._schema_runs",
        "trace": "._trace",
    },
)
