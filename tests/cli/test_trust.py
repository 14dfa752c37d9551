"""A ledger's recorded configuration is acted on by ``resume`` only when this user
recorded it (``cli/_trust.py``): a ledger handed over, or edited, cannot start a
command, send the API key elsewhere or give the model a directory without the
flags saying so again. Each through a real subprocess against the loopback
server."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys

from cli_runner import BASE_ENV, TRIO_AGENT, cli, command, text_stream
from loopback import Reply

from trio_agent.cli._trust import TRUSTED, check_trusted, sealed


async def _recorded(loopback, tmp_path, env) -> tuple:
    """A session ``run`` recorded with a workspace, a server and a key variable."""
    (tmp_path / "ws").mkdir()
    ledger = tmp_path / "sessions" / "s.jsonl"
    loopback.replies.append(Reply(body=text_stream("first answer")))
    done = await cli(
        command(loopback, "ws", "run", "--api-key-env", "MY_KEY", "--ledger", str(ledger), "hi"),
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return ledger, tmp_path / "ws"


def _mine(tmp_path, name: str) -> dict:
    config = tmp_path / name
    config.mkdir()
    return {**BASE_ENV, "MY_KEY": "sk-mine-123", "XDG_CONFIG_HOME": str(config)}


async def test_a_ledger_from_another_user_needs_its_commands_key_and_directory_given_again(
    loopback, tmp_path
):
    """Review of issue 38: ``resume`` acted on whatever configuration the ledger
    recorded: a ledger someone handed over could name the server the key is sent
    to and the variable it is read from (or start a command, below). Another
    user's recording is refused until each such setting is given again, and then
    it runs."""
    ledger, workspace = await _recorded(loopback, tmp_path, _mine(tmp_path, "alice"))
    bob = _mine(tmp_path, "bob")
    asked = len(loopback.requests)
    refused = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "go on"], env=bob)
    said = refused.stderr.decode()
    assert refused.returncode == 2, said
    assert "not recorded by you on this machine" in said
    base_url = f"{loopback.url}/v1"
    for flag in (f"--base-url {base_url}", "--api-key-env MY_KEY", f"--workspace {workspace}"):
        assert flag in said, said
    assert len(loopback.requests) == asked  # nothing was sent

    loopback.replies.append(Reply(body=text_stream("second answer")))
    again = ["--base-url", base_url, "--api-key-env", "MY_KEY", "--workspace", str(workspace)]
    ran = await cli([*TRIO_AGENT, "resume", str(ledger), *again, "--message", "go on"], env=bob)
    assert ran.returncode == 0, ran.stderr
    assert loopback.requests[-1].headers["authorization"] == "Bearer sk-mine-123"


async def test_a_command_edited_into_a_ledger_is_never_started(loopback, tmp_path):
    """A server command written into a sealed recording (by hand, by anyone) breaks
    its seal: the resume starts nothing and names the flag that would start it."""
    alice = _mine(tmp_path, "alice")
    ledger, _ = await _recorded(loopback, tmp_path, alice)
    marker = tmp_path / "started"
    lines = ledger.read_bytes().splitlines()
    start = json.loads(lines[0])
    assert start["kind"] == "session/start"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    start["metadata"]["cli"]["mcp"] = [{"kind": "stdio", "prefix": "x", "command": command}]
    ledger.write_bytes(b"\n".join([json.dumps(start).encode(), *lines[1:]]) + b"\n")
    asked = len(loopback.requests)
    refused = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "go on"], env=alice)
    said = refused.stderr.decode()
    assert refused.returncode == 2, said
    assert f"--mcp {shlex.quote('x=' + shlex.join(command))}" in said, said
    assert not marker.exists() and len(loopback.requests) == asked


async def test_this_users_recording_needs_no_flags_and_its_key_is_private(loopback, tmp_path):
    alice = _mine(tmp_path, "alice")
    ledger, _ = await _recorded(loopback, tmp_path, alice)
    key = tmp_path / "alice" / "trio-agent" / "ledger-key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    loopback.replies.append(Reply(body=text_stream("second answer")))
    ran = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "go on"], env=alice)
    assert ran.returncode == 0, ran.stderr


def test_only_the_settings_that_reach_beyond_the_answer_are_held_back(tmp_path, monkeypatch):
    """The rule alone: settings that start commands, send the key or give a
    directory need this user's seal or a flag; the model and its limits do not,
    and settings a change of provider drops are not asked for."""
    import pytest

    from trio_agent.cli._config import Settings
    from trio_agent.cli._errors import UsageError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "me"))
    plain = {"format": 1, "provider": "openai", "model": "m", "max_steps": 3}
    check_trusted(plain, Settings(provider="openai", model="m"), Settings(), set())
    risky = {**plain, "base_url": "http://elsewhere/v1", "workspace": "/"}
    record = Settings(provider="openai", model="m", base_url="http://elsewhere/v1", workspace="/")
    with pytest.raises(UsageError, match=r"--base-url http://elsewhere/v1 --workspace /$"):
        check_trusted(risky, record, Settings(), set())
    check_trusted(risky, record, Settings(workspace="/w"), {"base_url"})  # given, dropped
    check_trusted(sealed(risky), record, Settings(), set())  # this user's own
    tampered = {**sealed(risky), "workspace": "/home"}
    with pytest.raises(UsageError, match="--workspace /home"):
        check_trusted(tampered, Settings(workspace="/home"), Settings(), set())
    assert set(TRUSTED) == {"mcp", "mcp_env", "base_url", "api_key_env", "ca_file", "workspace"}
    assert os.environ["XDG_CONFIG_HOME"] == str(tmp_path / "me")


def test_an_empty_recorded_workspace_needs_the_seal_as_any_other(tmp_path, monkeypatch):
    """Review: an unsealed record's settings were held back only when truthy, and a
    recorded ``"workspace": ""`` resolves to the current directory: a ledger handed
    over gave the model the workspace tools over wherever ``resume`` ran."""
    import pytest

    from trio_agent.cli._commands import _resumed_config
    from trio_agent.cli._config import Settings
    from trio_agent.cli._errors import UsageError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "me"))
    config = {"format": 1, "provider": "openai", "model": "m", "workspace": ""}
    with pytest.raises(UsageError, match="--workspace ''"):
        _resumed_config(Settings(), {"cli": config}, "system", "s")
    given = _resumed_config(Settings(workspace=str(tmp_path)), {"cli": config}, "system", "s")
    assert given.workspace == str(tmp_path)
    sealed_config = _resumed_config(Settings(), {"cli": sealed(config)}, "system", "s")
    assert sealed_config.workspace == os.getcwd()  # this user's own record, as recorded


def test_a_key_others_can_read_seals_nothing_and_a_refusal_says_so(tmp_path, monkeypatch):
    """Review: the key was used whatever its mode or owner: one others could read
    (a config directory copied with its modes lost, or a symlink to a shared
    file) let them seal a ledger of theirs as this user's."""
    import pytest

    from trio_agent.cli._config import Settings
    from trio_agent.cli._errors import UsageError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "me"))
    record = Settings(provider="openai", model="m", workspace="/")
    plain = {"format": 1, "provider": "openai", "model": "m", "workspace": "/"}
    config = sealed(plain)
    check_trusted(config, record, Settings(), set())  # sealed, and the key private
    key = tmp_path / "me" / "trio-agent" / "ledger-key"
    key.chmod(0o644)
    with pytest.raises(UsageError, match=r"read or written by others \(chmod 600 it\)"):
        check_trusted(config, record, Settings(), set())
    assert "seal" not in sealed(plain)  # nor does it seal
    shared = tmp_path / "shared-key"
    shared.write_bytes(key.read_bytes())
    shared.chmod(0o666)
    key.unlink()
    key.symlink_to(shared)
    with pytest.raises(UsageError, match="by others"):
        check_trusted(config, record, Settings(), set())


def test_a_key_that_could_not_be_written_leaves_no_key_behind(tmp_path, monkeypatch):
    """Review: the key was written in place: a write that failed (a full disk, a
    crash) raised out of ``run`` and left an empty key file, which sealed
    nothing ever after, without a word."""
    import errno

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "me"))
    real_fdopen = os.fdopen

    def full_disk(fd: int, *args, **kwargs):
        os.close(fd)
        raise OSError(errno.ENOSPC, "No space left on device")

    config = {"format": 1, "provider": "openai", "model": "m"}
    monkeypatch.setattr(os, "fdopen", full_disk)
    assert "seal" not in sealed(config)  # this run goes on, unsealed
    monkeypatch.setattr(os, "fdopen", real_fdopen)
    folder = tmp_path / "me" / "trio-agent"
    assert list(folder.iterdir()) == []
    assert "seal" in sealed(config)  # the next run makes the key
    assert [p.name for p in folder.iterdir()] == ["ledger-key"]


def test_a_relative_config_home_is_not_where_the_key_is(tmp_path, monkeypatch):
    """Review: a relative ``XDG_CONFIG_HOME`` (which the XDG spec says to ignore) was
    taken from the directory ``resume`` ran in: a folder handed over with a ledger
    and a key of its own under it had its ledger taken for this user's."""
    import hashlib
    import hmac

    import msgspec
    import pytest

    from trio_agent.cli._config import Settings
    from trio_agent.cli._errors import UsageError

    theirs = tmp_path / "handed" / "trio-agent"
    theirs.mkdir(parents=True)
    key = theirs / "ledger-key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o600)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", "handed")
    plain = {"format": 1, "provider": "openai", "model": "m", "workspace": "/"}
    body = msgspec.json.encode(plain, order="sorted")
    forged = {**plain, "seal": hmac.new(b"k" * 32, body, hashlib.sha256).hexdigest()}
    record = Settings(provider="openai", model="m", workspace="/")
    with pytest.raises(UsageError, match="--workspace /"):
        check_trusted(forged, record, Settings(), set())
    check_trusted(sealed(plain), record, Settings(), set())  # the key under $HOME
    assert (tmp_path / "home" / ".config" / "trio-agent" / "ledger-key").exists()


def test_run_reads_the_sealing_key_before_trio_starts(tmp_path, monkeypatch):
    """Review: ``run`` (and each new session of a fleet worker) sealed its record as
    the agent was made, reading the key file (and making it, with an fsync) on the
    trio thread, a blocking call there."""
    import trio

    import trio_agent.cli._trust as trust
    from trio_agent.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "me"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (tmp_path / "ws").mkdir()
    in_trio: list[bool] = []
    real_key = trust._key

    def key(create: bool) -> bytes | None:
        try:
            trio.lowlevel.current_task()
            in_trio.append(True)
        except RuntimeError:
            in_trio.append(False)
        return real_key(create)

    monkeypatch.setattr(trust, "_key", key)
    args = ["run", "--provider", "openai", "--model", "m", "--workspace", str(tmp_path / "ws")]
    args += ["--base-url", "http://127.0.0.1:1/v1", "--retries", "0", "--ledger"]
    code = main([*args, str(tmp_path / "s.jsonl"), "hello"])
    assert code == 1  # nothing answers on port 1
    assert in_trio == [False]
    assert b'"seal"' in (tmp_path / "s.jsonl").read_bytes().splitlines()[0]
