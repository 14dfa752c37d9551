"""The ``run`` tool's sandbox: bubblewrap (``bwrap``) around every command.

Inside, a command sees the workspace read-write at its own path (paths in its
output mean the same outside), the system's programs and libraries
read-only, a minimal ``/etc`` (``passwd`` and ``group`` entries for the
current user, TLS certificates; ``resolv.conf`` and ``hosts`` only with
network), a private ``/tmp``, and ``/proc`` and ``/dev`` of its own. It runs
in new user, pid, ipc, uts, cgroup and network namespaces
(``--unshare-all``; ``--share-net`` gives the host's network back), in a new
session (no ``TIOCSTI`` into the caller's terminal), and dies with the
process that started it (``--die-with-parent``). The pid namespace makes
cleanup total: when its first process ends, the kernel ends every process in
it, those that left the process group and scrubbed their environment too.

Limits: ``prlimit`` caps the address space (``RLIMIT_AS``) and, for a user
other than root, the processes (``RLIMIT_NPROC``); where a ``pids`` cgroup
can be made (cgroup v1 or v2, writable: root, or a delegated subtree) the
command's processes are capped there too, which holds for root as well.

What it does not do: stop a kernel exploit; hide what the bound paths
(``ro_paths``, ``rw_paths``, the system directories) hold.
"""

from __future__ import annotations

import functools
import getpass
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal, final

import attrs

from .._log import TOOLS
from ._errors import WorkspaceError

__all__ = [
    "INSTALL_HINT",
    "SANDBOX_MODES",
    "Confinement",
    "Limits",
    "Sandbox",
    "SandboxMode",
    "bwrap_argv",
    "checked_paths",
    "choose_sandbox",
    "pids_cgroup",
    "remove_cgroup",
]

SandboxMode = Literal["auto", "bwrap", "none"]
SANDBOX_MODES: Final = ("auto", "bwrap", "none")
INSTALL_HINT: Final = (
    "install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap; Fedora: dnf "
    "install bubblewrap; Arch: pacman -S bubblewrap)"
)

_SYSTEM: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
_ETC: Final = (
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
)
_NETWORK_ETC: Final = ("/etc/resolv.conf", "/etc/hosts", "/etc/gai.conf")


@final
@attrs.frozen
class Limits:
    """What one sandboxed command may use: bytes of address space, processes."""

    memory_bytes: int
    processes: int


@final
@attrs.frozen
class Sandbox:
    """The sandbox in force: ``mode`` is ``"bwrap"`` or ``"none"``; ``note`` says
    why ``auto`` fell back to ``none`` ("" otherwise); ``bwrap`` is the
    program's path."""

    mode: Literal["bwrap", "none"]
    note: str = ""
    bwrap: str = ""


def choose_sandbox(requested: object) -> Sandbox:
    """The sandbox for ``requested`` (``auto``, ``bwrap`` or ``none``): ``bwrap`` when
    bubblewrap is installed and works here (probed once per process), else
    ``none`` for ``auto`` (with a warning in ``logging``) and ``WorkspaceError``
    for ``bwrap``, naming the package to install."""
    if requested not in SANDBOX_MODES:
        raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, got {requested!r}")
    if requested == "none":
        return Sandbox("none")
    program, why = _probe()
    if why is None:
        _identity_files()  # made now, with the probe: never file work in a command's path
        return Sandbox("bwrap", bwrap=program)
    if requested == "bwrap":
        raise WorkspaceError(f"sandbox='bwrap': {why}")
    note = f"{why}; commands run unconfined"
    TOOLS.warning("workspace: no sandbox for the run tool: %s", note)
    return Sandbox("none", note=note)


@functools.cache
def _probe() -> tuple[str, str | None]:
    """bwrap's path and None if a sandboxed ``true`` runs, else why not (once per
    process: a few milliseconds)."""
    if not sys.platform.startswith("linux"):
        return "", f"bubblewrap needs Linux, this is {sys.platform}"
    program = shutil.which("bwrap")
    if program is None:
        return "", f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
    argv = [program, "--unshare-all", "--die-with-parent", "--new-session"]
    argv += [*_system_binds(), "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return program, f"bubblewrap does not start here: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[:300]
        return program, f"bubblewrap does not work here (user namespaces refused?): {said}"
    return program, None


def _system_binds() -> list[str]:
    """The system directories, read-only; a top-level symlink (``/bin`` ->
    ``usr/bin``) made again as one."""
    argv: list[str] = []
    for path in _SYSTEM:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv


@functools.cache
def _identity_files() -> str:
    """A directory holding ``passwd`` and ``group`` with only the current user's
    entries (made once per process; removed at exit)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = f"user{uid}"
    directory = tempfile.mkdtemp(prefix="trio-agent-etc-")
    Path(directory, "passwd").write_text(f"{name}:x:{uid}:{gid}:{name}:/nonexistent:/bin/sh\n")
    Path(directory, "group").write_text(f"{name}:x:{gid}:\n")
    import atexit

    atexit.register(shutil.rmtree, directory, True)
    return directory


def bwrap_argv(
    sandbox: Sandbox,
    root: Path,
    *,
    network: bool,
    ro_paths: Sequence[Path] = (),
    rw_paths: Sequence[Path] = (),
    limits: Limits | None = None,
) -> list[str]:
    """The argv that runs a command (appended after it) in the sandbox, the
    workspace ``root`` read-write at its own path and its working directory."""
    argv = [sandbox.bwrap, "--unshare-all", "--die-with-parent", "--new-session"]
    if network:
        argv.append("--share-net")
    argv += _system_binds()
    identity = _identity_files()
    argv += ["--ro-bind", f"{identity}/passwd", "/etc/passwd"]
    argv += ["--ro-bind", f"{identity}/group", "/etc/group"]
    for path in _ETC + (_NETWORK_ETC if network else ()):
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for extra in ro_paths:
        argv += ["--ro-bind", str(extra), str(extra)]
    for extra in rw_paths:
        argv += ["--bind", str(extra), str(extra)]
    argv += ["--bind", str(root), str(root), "--chdir", str(root), "--"]
    if limits is not None:
        argv += [
            _prlimit(),
            f"--as={limits.memory_bytes}",
            f"--nproc={limits.processes}",
            "--",
        ]
    return argv


@functools.cache
def _prlimit() -> str:
    found = shutil.which("prlimit")
    if found is None:  # util-linux: on every Linux that has bwrap
        raise WorkspaceError("the sandbox's limits need prlimit (util-linux), not found")
    return found


def pids_cgroup(processes: int) -> Path | None:
    """A new ``pids`` cgroup capped at ``processes``, or None where none can be made
    (its ``cgroup.procs`` is what a command joins; ``rmdir`` it after)."""
    for base in _pids_roots():
        group = base / f"trio-agent-{uuid.uuid4().hex[:12]}"
        try:
            group.mkdir()
        except OSError:
            continue
        try:
            (group / "pids.max").write_text(f"{processes}\n")
        except OSError:
            remove_cgroup(group)
            continue
        return group
    return None


@functools.cache
def _pids_roots() -> tuple[Path, ...]:
    """Where a pids cgroup may be made: cgroup v1's ``pids`` hierarchy, or v2's
    unified one when it delegates the ``pids`` controller."""
    roots = []
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        roots.append(v1)
    v2 = Path("/sys/fs/cgroup")
    try:
        controllers = (v2 / "cgroup.subtree_control").read_text().split()
    except OSError:
        controllers = []
    if "pids" in controllers and os.access(v2, os.W_OK):
        roots.append(v2)
    return tuple(roots)


def remove_cgroup(group: Path) -> None:
    """Remove an emptied cgroup (a cgroup with processes left is kept: harmless)."""
    try:
        group.rmdir()
    except OSError:
        pass


def checked_paths(paths: object, name: str, *, writable: bool) -> tuple[Path, ...]:
    """``ro_paths`` / ``rw_paths``: existing absolute paths, resolved; never ``/``, and
    for writing never a system directory or one holding it."""
    if isinstance(paths, str | os.PathLike) or not isinstance(paths, Sequence | tuple | list):
        raise TypeError(f"{name} must be a sequence of paths, got {paths!r}")
    checked = []
    for path in paths:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"{name} holds {path!r}, not a path")
        given = Path(path)
        if not given.is_absolute():
            raise ValueError(f"{name}: {str(given)!r} is not an absolute path")
        resolved = given.resolve()
        if not resolved.exists():
            raise ValueError(f"{name}: {str(given)!r} does not exist")
        if resolved == Path("/"):
            raise ValueError(f"{name}: binding / would expose the whole system")
        if writable:
            for system in (*_SYSTEM, "/etc", "/proc", "/dev", "/sys", "/boot"):
                if resolved == Path(system) or Path(system).is_relative_to(resolved):
                    raise ValueError(
                        f"{name}: {str(given)!r} would make the system ({system}) writable"
                    )
        checked.append(resolved)
    return tuple(checked)


@final
@attrs.frozen
class Confinement:
    """How the workspace's commands run: the sandbox in force, whether they have the
    network, the extra binds, and their limits."""

    sandbox: Sandbox
    network: bool
    ro_paths: tuple[Path, ...] = ()
    rw_paths: tuple[Path, ...] = ()
    limits: Limits = Limits(memory_bytes=2 * 1024**3, processes=256)

    @property
    def asks_network(self) -> bool:
        """Sandboxed without the network: a command may ask for it (approved first)."""
        return self.sandbox.mode == "bwrap" and not self.network

    def argv(
        self, root: Path, command: str, cgroup: Path | None, *, network: bool = False
    ) -> list[str]:
        """The argv that runs ``command`` with ``sh -c`` in ``root``: inside the sandbox
        (joining ``cgroup`` first, when there is one; with the network when the
        workspace has it or ``network`` asks), or as it is."""
        shell = ["/bin/sh", "-c", command]
        if self.sandbox.mode == "none":
            return shell
        inner = bwrap_argv(
            self.sandbox,
            root,
            network=self.network or network,
            ro_paths=self.ro_paths,
            rw_paths=self.rw_paths,
            limits=self.limits,
        )
        if cgroup is None:
            return inner + shell
        # the process joins the cgroup before it becomes bwrap: every process of the
        # command is born in it
        join = 'echo $$ > "$1" && shift && exec "$@"'
        return ["/bin/sh", "-c", join, "sh", str(cgroup / "cgroup.procs"), *inner, *shell]

    def describe(self) -> str:
        """One line for the ``run`` tool's description: what confines the commands."""
        if self.sandbox.mode == "none":
            why = f" ({self.sandbox.note})" if self.sandbox.note else ""
            return f"Commands run unconfined, as the user running the agent{why}."
        network = "with network access" if self.network else "without network access"
        return (
            "Commands run in a bubblewrap sandbox: the workspace read-write at its own "
            f"path, the system read-only, a private /tmp, {network}."
        )
