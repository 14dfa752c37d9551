"""The sandbox's bound paths against a command that rearranges them (hardening
issue, item 1). A nested ``rw_paths``/``ro_paths`` entry (or the workspace root
inside a writable path) was resolved once, when the workspace was made, and
handed to bubblewrap as a path on every run: a command that moved a parent
away and put a symlink in its place had the next command bind whatever the
link named, read-write. Every test runs real bubblewrap."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import attrs
import pytest
import trio
from helpers import call, user

from trio_agent import run_agent_loop
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.workspace import Workspace, WorkspaceError, _sandbox


def up_to_root(directory: Path) -> str:
    """A relative symlink target that climbs from ``directory`` to ``/``."""
    return "../" * (len(directory.parts) - 1)


@pytest.fixture
def outside(tmp_path):
    """A secret beside the workspace, out of a command's reach."""
    (tmp_path / "outside.txt").write_text("outside secret")
    return tmp_path / "outside.txt"


def ok(result: str) -> bool:
    return result.startswith("[exit code 0]")


@pytest.mark.parametrize("nesting", [["sub"], ["a", "sub"]], ids=["two-deep", "three-deep"])
async def test_a_nested_rw_path_swapped_for_a_symlink_is_refused_not_bound(
    tmp_path, outside, nesting
):
    """The red team's escape: with ``rw_paths=[root/sub/cache]``, one command ran
    ``mv sub sub.old && mkdir sub && ln -s ../../../../tmp sub/cache`` and the next
    found the host's directory the link named bound read-write at sub/cache (here
    the directory holding the workspace, so nothing else of the host is bound):
    it read and overwrote files outside."""
    root = tmp_path / "ws"
    cache = root.joinpath(*nesting, "cache")
    cache.mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", rw_paths=[cache])
    link = up_to_root(cache.parent) + str(tmp_path.relative_to("/"))
    top = nesting[0]
    made = await box.run(
        f"mv {top} {top}.old && mkdir -p {cache.parent} && ln -s {link} {cache} && echo swapped"
    )
    assert "swapped" in made, made
    with pytest.raises(WorkspaceError) as refused:
        await box.run(f"cat {cache}/outside.txt; echo overwritten > {cache}/outside.txt")
    said = str(refused.value)
    assert f"rw_paths {str(cache)!r}" in said and "is a symlink" in said
    assert "the command was not run" in said
    assert outside.read_text() == "outside secret"


async def test_a_nested_ro_path_swapped_for_a_symlink_is_refused_not_bound(tmp_path, outside):
    """The same escape through ``ro_paths``: the next command read the host's
    directory the link named (the red team: the host's /tmp)."""
    root = tmp_path / "ws"
    ref = root / "sub" / "ref"
    ref.mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", ro_paths=[ref])
    link = up_to_root(ref.parent) + str(tmp_path.relative_to("/"))
    assert ok(await box.run(f"mv sub sub.old && mkdir sub && ln -s {link} sub/ref"))
    with pytest.raises(WorkspaceError, match=r"ro_paths .*ref'.* is a symlink"):
        await box.run("cat sub/ref/outside.txt")


@pytest.mark.parametrize("option", ["rw_paths", "ro_paths"])
async def test_a_path_nested_in_another_rw_path_outside_the_root_is_refused_once_swapped(
    tmp_path, outside, option
):
    """Outside the workspace the same: ``rw_paths=[scratch]`` and a path two levels
    inside it; a command swapped the path for a symlink through scratch, and the
    next one had the directory the link named bound."""
    root, scratch = tmp_path / "ws", tmp_path / "scratch"
    root.mkdir()
    nested = scratch / "a" / "cache"
    nested.mkdir(parents=True)
    extra = {"rw_paths": [scratch, nested]} if option == "rw_paths" else {}
    if option == "ro_paths":
        extra = {"rw_paths": [scratch], "ro_paths": [nested]}
    box = Workspace(root, sandbox="bwrap", **extra)
    link = up_to_root(nested.parent) + str(tmp_path.relative_to("/"))
    swap = f"cd {scratch} && mv a a.old && mkdir a && ln -s {link} a/cache && echo swapped"
    assert "swapped" in await box.run(swap)
    with pytest.raises(WorkspaceError, match=f"{option} .*cache'.* is a symlink"):
        await box.run(f"cat {nested}/outside.txt; echo overwritten > {nested}/outside.txt")
    assert outside.read_text() == "outside secret"


async def test_a_workspace_root_inside_an_rw_path_is_refused_once_swapped_or_replaced(
    tmp_path, outside
):
    """The root is bound like the extra paths: inside ``rw_paths=[data]`` a command
    could swap it (two levels down) for a symlink, and the next command had the
    directory the link named bound read-write at the root's path. A plain
    directory put in its place is refused too: the file tools keep working on
    the workspace's directory, wherever it went, and the command's paths would
    no longer mean the same outside."""
    data = tmp_path / "data"
    root = data / "proj" / "ws"
    root.mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", rw_paths=[data])
    link = up_to_root(root.parent) + str(tmp_path.relative_to("/"))
    swap = f"cd {data} && mv proj proj.old && mkdir proj && ln -s {link} proj/ws && echo swapped"
    assert "swapped" in await box.run(swap)
    with pytest.raises(WorkspaceError, match=r"the workspace root .* is a symlink"):
        await box.run("echo overwritten > outside.txt")
    assert outside.read_text() == "outside secret"
    (root.parent / "ws").unlink()
    (root.parent / "ws").mkdir()  # a plain directory, but not the workspace's
    with pytest.raises(WorkspaceError, match=r"the workspace root .* is another directory"):
        await box.run("echo hi")


async def test_a_legitimate_nested_rw_path_is_bound_writable_and_no_descriptor_leaks(tmp_path):
    """What the binds by descriptor must keep: a nested rw path inside a read-only
    one is bound and writable; the descriptors bubblewrap bound never reach the
    command (one of a host directory would lead out of the sandbox by '..')."""
    root = tmp_path / "ws"
    vendor = root / "vendor"
    cache = vendor / "build" / "cache"
    cache.mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", ro_paths=[vendor], rw_paths=[cache])
    result = await box.run(
        "echo made > vendor/build/cache/new.txt && echo written; ls /proc/self/fd"
    )
    assert result.split("\n")[1:] == ["written", "0", "1", "2", "3", ""], result
    assert (cache / "new.txt").read_text() == "made\n"
    assert not ok(await box.run("echo x > vendor/tampered.txt"))
    assert not (vendor / "tampered.txt").exists()


async def test_a_nested_path_made_again_as_a_plain_directory_is_still_bound(tmp_path):
    """Decided: a bound path made again at the same place, with no symlink on the
    way (``rm -rf``, ``mkdir``, or a command's ``mv`` and ``mkdir``), is the same
    path: it is bound, with its mode, from the directory now there."""
    root = tmp_path / "ws"
    vendor = root / "vendor"
    cache = vendor / "build" / "cache"
    cache.mkdir(parents=True)
    (root / "sub" / "cache").mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", ro_paths=[vendor], rw_paths=[cache, root / "sub/cache"])
    shutil.rmtree(vendor / "build")  # by the user, outside: vendor is read-only inside
    cache.mkdir(parents=True)
    assert ok(await box.run("mv sub trash && mkdir -p sub/cache"))
    result = await box.run(
        "echo a > vendor/build/cache/a.txt && echo b > sub/cache/b.txt && "
        f"grep -c -e ' {cache} ' -e ' {root}/sub/cache ' /proc/self/mountinfo"
    )
    assert result == "[exit code 0]\n2\n", result
    assert (cache / "a.txt").read_text() == "a\n"
    assert (root / "sub" / "cache" / "b.txt").read_text() == "b\n"


async def test_a_nested_ro_path_moved_away_refuses_the_next_command(tmp_path):
    """A read-only path inside a writable one is pinned to its directory: a command
    moved its parent away (``mv sub sub.old && mkdir -p sub/ref``) and the next
    command found the original, no longer bound, writable at sub.old/ref."""
    root = tmp_path / "ws"
    ref = root / "sub" / "ref"
    ref.mkdir(parents=True)
    (ref / "lib.txt").write_text("pristine")
    box = Workspace(root, sandbox="bwrap", ro_paths=[ref])
    assert ok(await box.run("mv sub sub.old && mkdir -p sub/ref"))
    with pytest.raises(WorkspaceError, match=r"ro_paths .*ref'.* is another directory"):
        await box.run("echo TAMPERED > sub.old/ref/lib.txt")
    assert (root / "sub.old" / "ref" / "lib.txt").read_text() == "pristine"


async def test_a_symlink_swapped_in_after_the_check_makes_bubblewrap_refuse(tmp_path, monkeypatch):
    """Decided for the destination, which bubblewrap resolves inside the new mount
    namespace: the checked path is bound by descriptor, and a symlink put at its
    last component after the check (here climbing to the sandbox's /usr/bin) is
    caught by bubblewrap comparing the mount with the descriptor: the command
    is not run, and nothing is mounted over a system directory."""
    root = tmp_path / "ws"
    cache = root / "sub" / "cache"
    cache.mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", rw_paths=[cache])
    checked = _sandbox.Confinement.prepare

    def check_then_swap(self: _sandbox.Confinement) -> object:
        held = checked(self)
        cache.rename(root / "sub" / "cache.old")
        cache.symlink_to(up_to_root(cache.parent) + "usr/bin")
        return held

    monkeypatch.setattr(_sandbox.Confinement, "prepare", check_then_swap)
    result = await box.run("touch /usr/bin/trio-agent-planted; echo ran")
    assert "Race condition" in result and "ran" not in result, result
    assert not Path("/usr/bin/trio-agent-planted").exists()  # noqa: ASYNC240


async def test_an_inner_component_swapped_after_the_check_binds_only_inside_the_sandbox(
    tmp_path, outside, monkeypatch
):
    """The limit, pinned: a command running at the same moment with write access on
    the way could turn an inner component into a symlink between the check and
    the mount. The bind then lands where the link leads inside the new sandbox,
    from the directory that was checked: never the host's directory the link
    names, and nothing is mounted outside."""
    root = tmp_path / "ws"
    cache = root / "sub" / "cache"
    cache.mkdir(parents=True)
    (cache / "mine.txt").write_text("checked")
    box = Workspace(root, sandbox="bwrap", rw_paths=[cache])
    checked = _sandbox.Confinement.prepare

    def check_then_swap(self: _sandbox.Confinement) -> object:
        held = checked(self)
        (root / "sub").rename(root / "sub.old")
        (root / "sub").symlink_to(up_to_root(root) + "tmp")  # the sandbox's own /tmp
        return held

    monkeypatch.setattr(_sandbox.Confinement, "prepare", check_then_swap)
    result = await box.run(f"cat /tmp/cache/mine.txt; ls {tmp_path}")
    assert result.startswith("[exit code 0]\nchecked"), result
    assert "outside.txt" not in result
    assert outside.read_text() == "outside secret"


async def test_a_refused_command_is_an_error_result_and_the_run_goes_on(tmp_path):
    """The refusal is a tool error the model sees (then it can act on it), not a
    failure of the run."""
    root = tmp_path / "ws"
    cache = root / "sub" / "cache"
    cache.mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", rw_paths=[cache])
    swap = f"mv sub sub.old && mkdir sub && ln -s {up_to_root(cache.parent)}tmp sub/cache"
    script = [
        scripted_response("r1", [call("run", "c1", {"command": swap})]),
        scripted_response("r2", [call("run", "c2", {"command": "ls sub/cache"})]),
        scripted_response("r3", "noted"),
    ]
    with trio.fail_after(60):
        result = await run_agent_loop(
            messages=[user()], model=ScriptedModel(script), tools=box.tools(), max_steps=3
        ).wait()
    answers = [m for m in result.messages if getattr(m, "tool_call_id", "") == "c2"]
    assert len(answers) == 1 and answers[0].is_error
    assert "is a symlink" in str(answers[0].content)
    assert "the command was not run" in str(answers[0].content)
    assert result.status == "completed" and result.final_text == "noted"


async def test_a_bound_path_is_pinned_by_type_and_a_file_in_its_place_is_refused(tmp_path):
    """A path given through a symlink is bound resolved, as before; its type is
    pinned: a file where a directory was refuses the command."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    (tmp_path / "ws").mkdir()
    box = Workspace(tmp_path / "ws", sandbox="bwrap", ro_paths=[tmp_path / "link"])
    bound = [bind.path for bind in box.confinement.binds]
    assert bound == [tmp_path / "ws", tmp_path / "real"]
    os.rmdir(tmp_path / "real")
    (tmp_path / "real").write_text("now a file")
    with pytest.raises(WorkspaceError, match="is a regular file, not a directory"):
        await box.run("true")


async def test_without_bind_fd_the_paths_are_still_checked_then_bound_by_path(tmp_path, outside):
    """A bubblewrap older than ``--bind-fd`` must not bring the escape back, nor
    make every command fail on an unknown option: the paths are checked before
    every command as with it, then bound by path, and no descriptor is passed
    on (an inherited one would lead out of the sandbox)."""
    root = tmp_path / "ws"
    cache = root / "sub" / "cache"
    cache.mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", rw_paths=[cache])
    older = attrs.evolve(box.confinement.sandbox, bind_fds=False)
    box.confinement = attrs.evolve(box.confinement, sandbox=older)
    result = await box.run("echo x > sub/cache/new.txt && ls /proc/self/fd")
    assert result == "[exit code 0]\n0\n1\n2\n3\n", result
    assert (cache / "new.txt").read_text() == "x\n"
    link = up_to_root(cache.parent) + str(tmp_path.relative_to("/"))
    assert ok(await box.run(f"mv sub sub.old && mkdir sub && ln -s {link} sub/cache"))
    with pytest.raises(WorkspaceError, match=r"rw_paths .*cache'.* is a symlink"):
        await box.run("echo overwritten > sub/cache/outside.txt")
    assert outside.read_text() == "outside secret"


def test_a_bubblewrap_without_bind_fd_is_noticed_with_a_warning(tmp_path, caplog):
    """Which binding the sandbox uses is probed once per bubblewrap: ``--bind-fd``
    when its help lists it (0.10, or an older one patched for CVE-2024-42472)."""
    old = tmp_path / "bwrap"
    old.write_text(
        "#!/bin/sh\necho 'usage: bwrap [OPTIONS...] [--] COMMAND'\necho '  --bind SRC DEST'\n"
    )
    old.chmod(0o755)
    with caplog.at_level("WARNING", logger="trio_agent.tools"):
        assert _sandbox._binds_fds(str(old)) is False
    assert "cannot bind descriptors (--bind-fd" in caplog.text
    installed = shutil.which("bwrap")
    assert installed is not None and _sandbox._binds_fds(installed) is True
    assert Workspace(tmp_path, sandbox="bwrap").confinement.sandbox.bind_fds


class _CancelAfter(trio.abc.Instrument):
    """Cancel ``scope`` once the task named ``name`` has taken ``k`` steps."""

    def __init__(self, scope: trio.CancelScope, name: str, k: int) -> None:
        self.scope, self.name, self.k, self.steps = scope, name, k, 0

    def after_task_step(self, task) -> None:
        if task.name == self.name:
            self.steps += 1
            if self.steps == self.k:
                self.scope.cancel()


async def test_the_bound_descriptors_are_closed_wherever_a_cancellation_lands(tmp_path):
    """The binds' descriptors are opened for each command and handed to bubblewrap:
    a cancellation at any checkpoint of ``run`` (the check's thread, the start,
    the command) must leave none of them open in the agent."""
    root = tmp_path / "ws"
    cache = root / "sub" / "cache"
    cache.mkdir(parents=True)
    box = Workspace(root, sandbox="bwrap", rw_paths=[cache], grace_seconds=0.2)
    await box.run("true")  # warm: the thread cache, the probes

    def bound_open() -> list[str]:
        # Only descriptors that point into the workspace: the rest of the process
        # (a garbage-collected pipe of an earlier test, a thread's wakeup fd) may
        # open and close its own at any moment, so the whole table is no measure.
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue  # closed between the listing and the look
            if target.startswith(str(tmp_path)):
                found.append(target)
        return sorted(found)

    before = bound_open()  # the workspace's own root, held for its life
    k, finished = 1, False
    while not finished:
        scope = trio.CancelScope()
        instrument = _CancelAfter(scope, "swept-run", k)

        async def swept(scope: trio.CancelScope) -> None:
            nonlocal finished
            with scope:
                await box.run("true")
                finished = True

        trio.lowlevel.add_instrument(instrument)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(swept, scope, name="swept-run")
        finally:
            trio.lowlevel.remove_instrument(instrument)
        assert bound_open() == before, f"cancelled after {k} steps"
        k += 1
        assert k < 2000
    assert k > 3  # the sweep walked through the run
