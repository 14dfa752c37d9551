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

The workspace and the extra paths are checked before every command and
bound by descriptor (``_binds``): a path that a command turned into a
symlink, or otherwise changed, refuses the next command instead of binding
something else.

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
from ._binds import Bind, HeldBinds, open_binds
from ._errors import WorkspaceError

__all__ = [
    "INSTALL_HINT",
    "SANDBOX_MODES",
    "Confinement",
    "Limits",
    "Sandbox",
    "SandboxMode",
    "Cgroups",
    "bwrap_argv",
    "checked_paths",
    "choose_sandbox",
    "make_cgroups",
    "remove_cgroups",
]

SandboxMode = Literal["auto", "bwrap", "none"]
SANDBOX_MODES: Final = ("auto", "bwrap", "none")
INSTALL_HINT: Final = (
    "install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap; Fedora: dnf "
    "install bubblewrap; Arch: pacman -S bubblewrap)"
)

_SYSTEM: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC: Final = (
    "/etc/ssl/certs",
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
_PROC_READ_ONLY: Final = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
# never bound by ro_paths/rw_paths: the machine itself, its kernel's and its services'
_NEVER_BOUND: Final = ("/proc", "/sys", "/dev", "/run", "/boot", "/var/run")
_START: Final = (
    # user namespace required (not the "-try" of --unshare-all: without one, root
    # would keep its capabilities on the host); every capability dropped, for root too
    *("--unshare-all", "--unshare-user", "--cap-drop", "ALL"),
    *("--die-with-parent", "--new-session"),
)


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
    program's path; ``bind_fds`` whether it binds descriptors (``--bind-fd``)."""

    mode: Literal["bwrap", "none"]
    note: str = ""
    bwrap: str = ""
    bind_fds: bool = True


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
        return Sandbox("bwrap", bwrap=program, bind_fds=_binds_fds(program))
    if requested == "bwrap":
        raise WorkspaceError(f"sandbox='bwrap': {why}")
    note = f"{why}; commands run unconfined"
    TOOLS.warning("workspace: no sandbox for the run tool: %s", note)
    return Sandbox("none", note=note)


@functools.cache
def _probe() -> tuple[str, str | None]:
    """bwrap's path and None if a command runs in the sandbox as real runs do
    (``/bin/sh`` under ``prlimit``), else why not (once per process: a few
    milliseconds). Also sweeps the empty cgroups of agents killed earlier."""
    if not sys.platform.startswith("linux"):
        return "", f"bubblewrap needs Linux, this is {sys.platform}"
    program = shutil.which("bwrap")
    if program is None:
        return "", f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        return program, "prlimit (util-linux), which the sandbox's limits need, is missing"
    _sweep_cgroups()
    argv = [program, *_START, *_system_binds(), "--proc", "/proc", "--dev", "/dev"]
    argv += ["--", prlimit, "--nproc=64", "--", "/bin/sh", "-c", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return program, f"bubblewrap does not start here: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[:300]
        return program, f"bubblewrap does not work here (user namespaces refused?): {said}"
    return program, None


@functools.cache
def _binds_fds(program: str) -> bool:
    """Whether bubblewrap binds descriptors (``--bind-fd``: 0.10, and older ones
    patched for CVE-2024-42472); when not, a warning (once per process): the
    paths are still checked before every command, then bound by path."""
    try:
        said = subprocess.run([program, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        said = None
    if said is not None and b"--ro-bind-fd" in said.stdout + said.stderr:
        return True
    TOOLS.warning(
        "workspace: this bubblewrap cannot bind descriptors (--bind-fd; 0.10 or a "
        "distribution's fix of CVE-2024-42472 can): the bound paths are checked before "
        "every command, then bound by path, which a command running at the same moment "
        "could redirect"
    )
    return False


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

    creator = os.getpid()

    def remove() -> None:  # not in a forked child that exits: the files stay in use
        if os.getpid() == creator:
            shutil.rmtree(directory, True)

    atexit.register(remove)
    return directory


def bwrap_argv(
    sandbox: Sandbox,
    root: Path,
    *,
    network: bool,
    binds: Sequence[str] = (),
    limits: Limits | None = None,
) -> list[str]:
    """The argv that runs a command (appended after it) in the sandbox, ``root``
    its working directory; ``binds`` bind the workspace and the extra paths
    (``HeldBinds.argv``: by descriptor, parents before children)."""
    argv = [sandbox.bwrap, *_START]
    if network:
        argv.append("--share-net")
    argv += _system_binds()
    identity = _identity_files()
    argv += ["--ro-bind", f"{identity}/passwd", "/etc/passwd"]
    argv += ["--ro-bind", f"{identity}/group", "/etc/group"]
    for path in _ETC + (_NETWORK_ETC if network else ()):
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in _PROC_READ_ONLY:  # root inside could write the kernel's settings
        argv += ["--ro-bind-try", path, path]
    argv += binds
    argv += ["--chdir", str(root), "--"]
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


@final
@attrs.frozen
class Cgroups:
    """The cgroups a sandboxed command is born in (made below the agent's own, so
    the agent's own limits still hold): ``pids`` caps its processes, ``memory``
    its memory, its ``/tmp`` and ``/dev/shm`` included."""

    pids: Path | None
    memory: Path | None

    @property
    def groups(self) -> tuple[Path, ...]:
        return tuple(group for group in (self.pids, self.memory) if group is not None)

    def notes(self) -> list[str]:
        """What the limits did, for the result: forks refused, processes ended."""
        notes = []
        refused = _count(self.pids, "pids.events", "max")
        if refused:
            notes.append(f"[the sandbox's process limit refused {refused} fork(s)]")
        killed = _count(self.memory, "memory.events", "oom_kill") or _count(
            self.memory, "memory.oom_control", "oom_kill"
        )
        if killed:
            notes.append(f"[the sandbox's memory limit ended {killed} process(es)]")
        return notes


def make_cgroups(limits: Limits) -> Cgroups | None:
    """New ``pids`` and ``memory`` cgroups below the agent's own, capped at
    ``limits``; None where neither can be made (no cgroup is writable here)."""
    pids = _new_group("pids", "pids.max", str(limits.processes))
    memory = _new_group("memory", "memory.max", str(limits.memory_bytes)) or _new_group(
        "memory", "memory.limit_in_bytes", str(limits.memory_bytes)
    )
    if pids is None and memory is None:
        return None
    return Cgroups(pids, memory)


def remove_cgroups(cgroups: Cgroups) -> None:
    """Remove the command's emptied cgroups (one with processes left is kept)."""
    for group in cgroups.groups:
        try:
            group.rmdir()
        except OSError:
            pass


def _count(group: Path | None, file: str, key: str) -> int:
    if group is None:
        return 0
    try:
        words = (group / file).read_text().split()
    except OSError:
        return 0
    pairs = dict(zip(words[::2], words[1::2], strict=False))
    try:
        return int(pairs.get(key, "0"))
    except ValueError:
        return 0


def _new_group(controller: str, limit_file: str, value: str) -> Path | None:
    base = _own_cgroup(controller)
    if base is None:
        return None
    group = base / f"trio-agent-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        group.mkdir()
    except OSError:
        return None
    try:
        (group / limit_file).write_text(f"{value}\n")
    except OSError:
        try:
            group.rmdir()
        except OSError:
            pass
        return None
    return group


def _controls(base: Path, controller: str) -> bool:
    """cgroup v2: whether ``base``'s children get ``controller``."""
    try:
        return controller in (base / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


@functools.cache
def _own_cgroup(controller: str) -> Path | None:
    """The directory of this process's cgroup for ``controller`` (v1), or its
    unified one (v2), when it is mounted where expected and writable."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            base = Path("/sys/fs/cgroup", controller, path.lstrip("/"))
        elif controllers == "" and _controls(Path("/sys/fs/cgroup", path.lstrip("/")), controller):
            base = Path("/sys/fs/cgroup", path.lstrip("/"))
        else:
            continue
        if base.is_dir() and os.access(base, os.W_OK):
            return base
    return None


def _sweep_cgroups() -> None:
    """Remove the empty cgroups that commands of agents killed earlier left (once
    per process). A group is named after the process that made it, and only a
    dead process's are removed: a live agent's group is empty for a moment
    between being made and its command joining it (removing it then failed that
    command with exit 125). A group in use is not empty and stays anyway."""
    for controller in ("pids", "memory"):
        base = _own_cgroup(controller)
        if base is None:
            continue
        for group in base.glob("trio-agent-*"):
            if _maker_alive(group.name):
                continue
            try:
                group.rmdir()
            except OSError:
                pass


def _maker_alive(name: str) -> bool:
    """Whether the process that made the group ``trio-agent-{pid}-{hex}`` lives (a
    reused pid keeps a group a while longer: harmless)."""
    parts = name.split("-")
    if len(parts) != 4 or not parts[2].isdigit():
        return False  # an older name, without its maker: swept as before
    try:
        os.kill(int(parts[2]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        for kernel in _NEVER_BOUND:
            if resolved.is_relative_to(kernel) or Path(kernel).is_relative_to(resolved):
                raise ValueError(
                    f"{name}: {str(given)!r} would expose the machine ({kernel}) to commands"
                )
        if writable:
            _check_writable(name, given, resolved)
        checked.append(resolved)
    return tuple(checked)


_SYSTEM_TREES: Final = (*_SYSTEM, "/etc", "/var", "/root", "/opt", "/srv", "/home")


def _check_writable(name: str, given: Path, resolved: Path) -> None:
    """A path made writable must hold no system tree, your home, nor lie inside a
    system tree (a directory of your own below ``/home``, ``/opt`` or ``/srv``,
    not your home itself, is allowed)."""
    home = Path.home().resolve()
    for tree in (*_SYSTEM_TREES, str(home)):
        if Path(tree).is_relative_to(resolved):
            raise ValueError(f"{name}: {str(given)!r} would make {tree} writable")
    for tree in (*_SYSTEM, "/etc", "/var", "/root"):
        if resolved.is_relative_to(tree) and not resolved.is_relative_to(home):
            raise ValueError(f"{name}: {str(given)!r} lies in the system ({tree})")


@final
@attrs.frozen
class Confinement:
    """How the workspace's commands run: the sandbox in force, whether they have the
    network, the paths bound (the workspace root and the extra paths, pinned
    by ``pin_binds``), and their limits."""

    sandbox: Sandbox
    network: bool | Literal["ask"]
    binds: tuple[Bind, ...] = ()
    limits: Limits = Limits(memory_bytes=2 * 1024**3, processes=256)

    @property
    def asks_network(self) -> bool:
        """Sandboxed with ``network="ask"``: a command may ask for the network, and
        waits for a person's approval (an ``Agent``'s approvals) first."""
        return self.sandbox.mode == "bwrap" and self.network == "ask"

    def prepare(self) -> tuple[HeldBinds, Cgroups | None]:
        """For one sandboxed command: its binds opened and checked (``open_binds``:
        ``WorkspaceError`` if one is no longer what it was, then nothing is made),
        and its cgroups (``make_cgroups``). Blocking: run it in a thread."""
        held = open_binds(self.binds, by_fd=self.sandbox.bind_fds)
        done = False
        try:
            cgroups = make_cgroups(self.limits)
            done = True
        finally:
            if not done:
                held.close()
        return held, cgroups

    def argv(
        self,
        root: Path,
        command: str,
        cgroups: Cgroups | None,
        *,
        network: bool = False,
        held: HeldBinds | None = None,
    ) -> list[str]:
        """The argv that runs ``command`` with ``sh -c`` in ``root``: inside the sandbox
        (binding ``held``, which ``prepare`` opened; joining ``cgroup`` first, when
        there is one; with the network when the workspace has it or ``network``
        asks), or as it is."""
        shell = ["/bin/sh", "-c", "--", command]  # "--": a command may start with - or +
        if self.sandbox.mode == "none":
            return shell
        if held is None:
            raise ValueError("a sandboxed command needs its binds, opened by prepare()")
        inner = bwrap_argv(
            self.sandbox,
            root,
            network=self.network is True or network,
            binds=held.argv,
            limits=self.limits,
        )
        if cgroups is None:
            return inner + shell
        # the process joins the cgroups before it becomes bwrap: every process of the
        # command is born in them
        procs = [str(group / "cgroup.procs") for group in cgroups.groups]
        join = 'for g in "$@"; do [ "$g" = -- ] && break; echo $$ > "$g" || exit 125; done'
        join += '; while [ "$1" != -- ]; do shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", join, "sh", *procs, "--", *inner, *shell]

    def describe(self) -> str:
        """One line for the ``run`` tool's description: what confines the commands."""
        if self.sandbox.mode == "none":
            why = f" ({self.sandbox.note})" if self.sandbox.note else ""
            return f"Commands run unconfined, as the user running the agent{why}."
        network = {
            True: "with network access",
            False: "without network access",
            "ask": "without network access unless the command asks for it (network=true), "
            "which a person must approve first",
        }[self.network]
        return (
            "Commands run in a bubblewrap sandbox: the workspace read-write at its own "
            f"path, the system read-only, a private /tmp, {network}."
        )
