"""Whether a ledger's recorded configuration is this user's own, before ``resume``
acts on it.

A ledger can come from anyone, and its recorded configuration says which
commands to start (``--mcp``), where to send the API key and which variable
holds it (``--base-url``, ``--api-key-env``, ``--ca-file``), and over which
directory the model gets its tools (``--workspace``). ``run`` seals what it
records with a key only this user can read (``ledger-key`` in
``$XDG_CONFIG_HOME/trio-agent``, else ``~/.config/trio-agent``, made on first
use, mode 0600, and not used when others could read or replace it). ``resume``
acts on those settings only when the seal is this user's; otherwise each must
be given again as a flag (fail closed), and the error says which, with their
recorded values. Settings that only shape the answer (the model, its limits,
the system prompt) are used either way.

The same key seals each decision ``approve``/``reject`` (and a run asking at the
terminal) records on a held call: the MAC covers the session, the call (its id,
tool and arguments) and the decision (approved or not, the arguments it runs
with, who, why), so a seal does not fit another call, session or decision. A
resume runs an approved call only under this user's seal (``decision_is_mine``);
else it asks again (``Driver``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shlex
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from ..events import ApprovalDecision
from ..ledger._records import (
    ApprovalDecidedRecord,
    ApprovalRequestedRecord,
    CompactedRecord,
    SnapshotRecord,
    ToolResultRecord,
)
from ..messages._ir import AssistantMessage, Message, ToolCall
from ._errors import UsageError

__all__ = [
    "SEAL",
    "TRUSTED",
    "check_trusted",
    "decision_is_mine",
    "decision_seal",
    "sealed",
    "unsealed_reruns",
]

SEAL: Final = "seal"
"""The key of the seal in the recorded configuration."""
TRUSTED: Final = ("mcp", "mcp_env", "base_url", "api_key_env", "ca_file", "workspace")
"""The settings a resume acts on only when this user recorded them."""
_FLAGS: Final = {name: "--" + name.replace("_", "-") for name in TRUSTED}
_KEY_BYTES: Final = 32


def _key_path() -> Path:
    """Where this user's key is: a relative ``XDG_CONFIG_HOME`` is ignored, as the
    XDG spec says (else the key would be whatever the directory ``resume`` runs
    in holds, a ledger's own folder say); ``ValueError`` when no absolute place
    is known (no home)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    if not os.path.isabs(base):
        raise ValueError("no home directory to keep the key in")
    return Path(base) / "trio-agent" / "ledger-key"


def _key(create: bool) -> bytes | None:
    """This user's sealing key (made when ``create`` and missing); None when there
    is none, or it cannot be read or made, or others could read or replace it
    (``_key_problem``: then nothing is sealed and a resume asks for the flags
    again)."""
    try:
        path = _key_path()
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    except (OSError, ValueError):
        return None
    try:
        return _make_key(path)
    except FileExistsError:  # another process made it meanwhile
        return _key(False)
    except OSError:
        return None


def _read_key(path: Path) -> bytes:
    """The key at ``path``; ValueError when it is not a key only this user can
    read and write (its owner, its mode, its length)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO does not hang; a symlink: its file
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise ValueError(f"{path} is not a file of yours")
        if info.st_mode & 0o077:
            raise ValueError(f"{path} can be read or written by others (chmod 600 it)")
        key = file.read(_KEY_BYTES + 1)
    if len(key) != _KEY_BYTES:
        raise ValueError(f"{path} holds no key of {_KEY_BYTES} bytes")
    return key


def _make_key(path: Path) -> bytes:
    """A new key at ``path``, whole once there: written aside, then linked in
    (FileExistsError when another process was first), so that no reader ever
    finds it empty or part written, even after a crash."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = secrets.token_bytes(_KEY_BYTES)
    aside = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(key)
            file.flush()
            os.fsync(file.fileno())
        os.link(aside, path)
    finally:
        aside.unlink(missing_ok=True)
    return key


def _key_problem() -> str:
    """Why this user's key cannot be used, or ``""``: said by a refused resume."""
    try:
        _read_key(_key_path())
    except FileNotFoundError:
        return ""
    except (OSError, ValueError) as exc:
        return f" (your key cannot be used: {exc})"
    return ""


def no_seal_reason() -> str:
    """Why ``decision_seal`` gave no seal: this user's key cannot be read or made."""
    problem = _key_problem()
    if problem:
        return problem.strip(" ()")
    try:
        return f"your key cannot be made at {_key_path()}"
    except ValueError as exc:
        return f"your key cannot be kept: {exc}"


def _mac(key: bytes, config: Mapping[str, Any]) -> str:
    body = msgspec.json.encode({k: v for k, v in config.items() if k != SEAL}, order="sorted")
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def sealed(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a configuration about to be recorded) with this user's seal,
    the key made if need be; as it is when no key can be had."""
    key = _key(create=True)
    return config if key is None else {**config, SEAL: _mac(key, config)}


def _is_mine(config: Mapping[str, Any]) -> bool:
    seal = config.get(SEAL)
    key = _key(create=False)
    if key is None or type(seal) is not str:
        return False
    return _same(seal, _mac(key, config))


def _decision_mac(
    key: bytes,
    session_id: str,
    call: ToolCall,
    approved: bool,
    arguments: Mapping[str, Any] | None,
    by: str,
    reason: str,
) -> str:
    # a list: never the encoding of a configuration (an object), so neither seal fits the other
    fields = [session_id, call.id, call.name, call.arguments, approved, arguments, by, reason]
    body = msgspec.json.encode(["approval/decided", *fields], order="sorted")
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def _same(seal: str, expected: str) -> bool:
    """Whether a recorded ``seal`` is the ``expected`` one, in constant time (as
    bytes: ``compare_digest`` raises on text that is not ASCII, which a ledger can
    hold)."""
    return hmac.compare_digest(seal.encode("utf-8", "surrogatepass"), expected.encode())


def decision_seal(
    session_id: str,
    call: ToolCall,
    approved: bool,
    *,
    arguments: Mapping[str, Any] | None = None,
    by: str = "",
    reason: str = "",
) -> str | None:
    """This user's seal on a decision about to be recorded on the held ``call`` of
    ``session_id`` (the key made if need be); None when no key can be had."""
    key = _key(create=True)
    if key is None:
        return None
    return _decision_mac(key, session_id, call, approved, arguments, by, reason)


def decision_is_mine(session_id: str, call: ToolCall, decision: ApprovalDecision) -> bool:
    """Whether ``decision`` on the held ``call`` of ``session_id`` bears this user's
    seal, as it stands (a seal made for another call, session or decision fails)."""
    seal = decision.seal
    key = _key(create=False)
    if key is None or type(seal) is not str or decision.call_id != call.id:
        return False
    expected = _decision_mac(
        key, session_id, call, decision.approved, decision.arguments, decision.by, decision.reason
    )
    return _same(seal, expected)


def unsealed_reruns(
    session_id: str, records: Iterable[Any], reruns: Sequence[ToolCall]
) -> list[ToolCall]:
    """Those of ``reruns`` (calls a resume runs again: dispatched, their process
    died mid-call) that were held for approval and whose approval bears no seal of
    this user's, from the ledger's ``records``: the held call as requested and its
    decision, as any replay a resume may have made finds them (an answer or a
    compaction ending each): the whole ledger's (no snapshot's state read) and,
    for each snapshot whose state decodes, that state's and the records after it
    (which snapshot a resume starts from is the store's to say, and it takes its
    state at its word). A call held in any of them without this user's sealed
    approval of the call as it runs counts (fail closed). Reads no key but
    ``decision_is_mine``'s."""
    wanted = {call.id for call in reruns}
    # what can change a view of the wanted calls, in order: few records
    relevant = [
        record
        for record in records
        if (kind := type(record)) is SnapshotRecord
        or kind is CompactedRecord
        or (kind is ToolResultRecord and record.result.tool_call_id in wanted)
        or (
            (kind is ApprovalRequestedRecord or kind is ApprovalDecidedRecord)
            and record.call_id in wanted
        )
    ]
    views: list[_View] = [({}, {})]  # the whole ledger's replay, then each snapshot's
    for record in relevant:  # one pass: each view a snapshot starts joins at its place
        kind = type(record)
        if kind is SnapshotRecord:
            restored = _restored(record, wanted)
            if restored is not None:
                views = _distinct([*views, restored])
            continue
        for held, decided in views:
            _apply(record, wanted, held, decided)
        if kind is CompactedRecord or kind is ToolResultRecord:  # views may meet here
            views = _distinct(views)
    return [
        call
        for call in reruns
        if any(_unsealed(session_id, call, held, decided) for held, decided in views)
    ]


_Held = dict[str, ToolCall | None]
_View = tuple[_Held, dict[str, ApprovalDecision]]


def _apply(
    record: Any, wanted: set[str], held: _Held, decided: dict[str, ApprovalDecision]
) -> None:
    """``record``'s change to a view of the ``wanted`` calls held (as requested) and
    their decisions."""
    kind = type(record)
    if kind is ApprovalRequestedRecord and record.call_id in wanted:
        held[record.call_id] = record.call
    elif kind is ApprovalDecidedRecord and record.call_id in wanted:
        decided[record.call_id] = record.decision
    elif kind is ToolResultRecord or kind is CompactedRecord:  # answered, or dropped
        gone = {record.result.tool_call_id} if kind is ToolResultRecord else set(held)
        for call_id in gone:
            held.pop(call_id, None)
            decided.pop(call_id, None)


def _distinct(views: list[_View]) -> list[_View]:
    """``views`` less those equal to an earlier one (views of a few calls each, and
    most the same: so a ledger of many snapshots is read in one pass, not one a
    snapshot)."""
    seen: dict[bytes, _View] = {}
    for view in views:
        seen.setdefault(
            _encoder.encode(sorted(view[0].items()))
            + b"|"
            + _encoder.encode(sorted(view[1].items())),
            view,
        )
    return list(seen.values())


class _HeldState(msgspec.Struct):
    """What of a snapshot's state says which calls are held and decided; its
    messages left raw, decoded only when a wanted call is held."""

    held: tuple[str, ...] = ()
    decided: tuple[ApprovalDecision, ...] = ()
    messages: msgspec.Raw = msgspec.Raw(b"[]")


_encoder: Final = msgspec.json.Encoder()
_held_state: Final = msgspec.json.Decoder(_HeldState)
_messages: Final = msgspec.json.Decoder(tuple[Message, ...])


def _restored(record: SnapshotRecord, wanted: set[str]) -> _View | None:
    """The ``wanted`` calls a snapshot's state holds and their decisions; None for
    a state that does not decode (no resume starts from it). Its messages are read
    only for a wanted call it holds (one not found there: held as None, unsealed)."""
    try:
        state = _held_state.decode(record.state)
    except msgspec.DecodeError:
        return None
    holds = [call_id for call_id in state.held if call_id in wanted]
    calls: dict[str, ToolCall] = {}
    if holds:
        try:
            messages = _messages.decode(state.messages)
        except msgspec.DecodeError:
            messages = ()
        calls = {
            call.id: call
            for message in messages
            if type(message) is AssistantMessage
            for call in message.content
            if type(call) is ToolCall and call.id in wanted
        }
    held: _Held = {call_id: calls.get(call_id) for call_id in holds}
    decided = {d.call_id: d for d in state.decided if d.call_id in wanted}
    return held, decided


def _unsealed(
    session_id: str, call: ToolCall, held: _Held, decided: dict[str, ApprovalDecision]
) -> bool:
    """Whether ``call`` (as it runs again) is held in ``held`` and not approved, as
    it runs, under this user's seal (held with no decision or no call found: fail
    closed). Never held: the turn asks the approval rule, as for a fresh call."""
    if call.id not in held:
        return False
    requested, found = held[call.id], decided.get(call.id)
    if requested is None or found is None or not found.approved:
        return True
    arguments = requested.arguments if found.arguments is None else found.arguments
    if call.name != requested.name or call.arguments != arguments:
        return True  # not the call the decision let run
    return not decision_is_mine(session_id, requested, found)


def check_trusted(config: Mapping[str, Any], record: Any, flags: Any, dropped: set[str]) -> None:
    """A usage error when the recorded ``config`` (its ``record``, read) would have a
    resume act on a ``TRUSTED`` setting no flag gives again (``dropped``: those a
    change of provider leaves unused), and this user did not seal it."""
    unsure = [
        name
        for name in TRUSTED
        if getattr(record, name) not in (None, [])  # "" is a workspace too: the cwd
        and getattr(flags, name) is None
        and name not in dropped
    ]
    if not unsure or _is_mine(config):
        return
    again = " ".join(_as_flags(name, getattr(record, name)) for name in unsure)
    raise UsageError(
        "the ledger's recorded configuration was not recorded by you on this machine (it "
        "bears no seal of yours), and it would start commands, send your API key or give "
        f"the model a directory{_key_problem()}: give each such setting again if you mean "
        f"it: {again}"
    )


def _as_flags(name: str, value: Any) -> str:
    """The flags that give ``value`` again, quoted for a shell."""
    flag = _FLAGS[name]
    if name == "mcp":
        return " ".join(server.as_flag() for server in value)
    if name == "mcp_env":
        return " ".join(f"{flag} {shlex.quote(str(item))}" for item in value)
    return f"{flag} {shlex.quote(str(value))}"
