"""Testing agents offline, deterministically, under faults and cancellation.

- ``ScriptedModel`` / ``scripted_response``: a model that replays a script;
- ``FaultyModel`` and its faults: inject named, seeded faults into any model;
- ``ReplayModel``: replay the responses a session ledger recorded;
- ``explore_cancellation``: cancel a scenario after each checkpoint in turn;
- ``assert_run_invariants``: what the contract promises for any run;
- ``trio_agent.testing.strategies``: hypothesis strategies;
- the pytest plugin (``trio_agent.testing.pytest_plugin``): fixtures.
"""

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
from ._invariants import InvariantError as InvariantError
from ._invariants import assert_run_invariants as assert_run_invariants
from ._replay import ReplayDivergenceError as ReplayDivergenceError
from ._replay import ReplayModel as ReplayModel
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptedResponse as ScriptedResponse
from ._scripted import ScriptExhaustedError as ScriptExhaustedError
from ._scripted import scripted_response as scripted_response

__all__ = [
    "CorruptChunk",
    "CutStream",
    "DisagreeingResponse",
    "ExplorationFailure",
    "ExplorationReport",
    "Fault",
    "FaultyModel",
    "HangAt",
    "InvariantError",
    "RaiseOnCall",
    "ReplayDivergenceError",
    "ReplayModel",
    "ScriptExhaustedError",
    "ScriptedModel",
    "ScriptedResponse",
    "assert_run_invariants",
    "explore_cancellation",
    "scripted_response",
]
