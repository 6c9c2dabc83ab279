"""The bwrap command line of a run: the mounts that make the sandbox's view of the file system (see
`sandbox.SandboxSettings`), the sizes of its private directories, its seccomp filter; and the command line that
gives commands run outside the sandbox a PID namespace of their own."""

from __future__ import annotations

import os
import stat
import sys

from anges.safety.sandbox import (
    SHARED_MEMORY,
    SandboxSettings,
    _depth,
    _inside,
    _inside_any,
    _unique,
    isolation,
    private_dirs,
    sealed_names,
)
from anges.util.paths import resolve

RESOLV_CONF = "/etc/resolv.conf"
RUNTIME_SIZE = 16 * 1024 * 1024
"""Bytes each private runtime directory (/run, /var/run, $XDG_RUNTIME_DIR) may hold."""
# The order of mounts at one depth: a later mount at the same path covers an earlier one.
_PRIVATE, _WRITABLE, _REBOUND, _SEALED, _READ_ONLY, _HIDDEN, _SOCKET = range(7)


def bwrap_argv(bwrap: str, settings: SandboxSettings, cwd: str, visible: list[str], features=frozenset(),
               seccomp_fd: int | None = None) -> list[str]:
    """The bwrap arguments for one run: a read-only root, the writable directories (minus the protected places),
    private /tmp, /dev/shm and runtime directories of bounded size, hidden credentials and host sockets; the
    `seccomp_fd` filter (see `seccomp.py`) when given. `features` are what this bwrap supports
    (`Availability.features`)."""
    argv = [bwrap, *isolation(settings.network, features, settings.user_namespaces)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    sized = "size" in features
    argv += [*(["--size", str(settings.tmp_size)] if sized else []), "--tmpfs", SHARED_MEMORY]
    private = private_dirs()
    if not _inside_any(resolve(cwd), settings.writable):
        visible = [resolve(cwd), *visible]  # read-only mode: the working directory is still there to read
    # The interpreter and the runner must stay visible when they live in a directory the sandbox makes private.
    visible = [*_lost_code(private, settings.writable), *visible]
    if settings.network:
        visible = [*_resolver_files(private), *visible]
    mounts, read_only = _mounts(settings, private, visible, sized)
    for _, _, mount in sorted(mounts, key=lambda item: (_depth(item[0]), item[1])):
        argv += mount
    # An empty directory is made read-only last, once what is bound into it is in place; /dev keeps its devices.
    for path in ["/dev", *sorted(read_only, key=_depth)]:
        argv += ["--remount-ro", path]
    return argv + ["--chdir", cwd]


def _mounts(settings: SandboxSettings, private: list[str], visible: list[str], sized: bool):
    """(path, rank, bwrap arguments) of each mount, and the directories to make read-only once filled."""
    shown = (*settings.writable, *visible)
    # A hidden directory that holds the work (a batch's work dirs are in ANGES_HOME) stays hidden but for the
    # work: an empty tmpfs, the work bound into it, then made read-only.
    around = [path for path in settings.hidden
              if os.path.isdir(path) and any(_inside(root, path) and root != path for root in shown)]
    mounts = [(path, _PRIVATE, [*_size(path, settings, sized), "--tmpfs", path]) for path in private]
    mounts += [(path, _PRIVATE, ["--tmpfs", path]) for path in around]
    mounts += [(path, _WRITABLE, ["--bind", path, path]) for path in settings.writable]
    protected = [path for path in settings.protected if os.path.lexists(path)]
    mounts += [(path, _READ_ONLY, ["--ro-bind", path, path]) for path in (*visible, *protected)]
    appeared = [path for path in settings.awaited if os.path.lexists(path)]  # made since the settings were
    for path in (*settings.hidden, *appeared):
        if path in around or path in shown:
            continue  # the work itself is never hidden
        if _inside_any(path, (*around, *private)) and not _inside_any(path, shown):
            continue  # already hidden with the directory around it, or gone with its private directory
        if os.path.isdir(path):
            around.append(path)
            mounts.append((path, _HIDDEN, ["--tmpfs", path]))
        else:
            mounts.append((path, _HIDDEN, ["--ro-bind", "/dev/null", path]))
    for path in host_sockets():
        if _inside_any(path, shown) or not _inside_any(path, (*settings.hidden, *private)):
            mounts.append((path, _SOCKET, ["--ro-bind", "/dev/null", path]))  # visible in the sandbox: cover it
    mounted = {path for path, _, _ in mounts}
    sealed = []
    for directory in settings.sealed():
        entries = _entries(directory, writable=_inside_any(directory, settings.writable))
        if entries is None:
            mounts.append((directory, _READ_ONLY, ["--ro-bind", directory, directory]))
            continue
        sealed.append(directory)
        mounts.append((directory, _SEALED, ["--tmpfs", directory]))
        mounts += [(path, _REBOUND, mount) for path, mount in entries if path not in mounted]
    # A mount moves with its folder: renaming a folder above a protected place would take it away, for a new one
    # to be made at its path. A mount point cannot be renamed, so each folder above one is bound onto itself.
    kept = [path for path, rank, _ in mounts if rank in (_SEALED, _READ_ONLY, _HIDDEN)]
    mounted = {path for path, _, _ in mounts}
    mounts += [(path, _WRITABLE, ["--bind", path, path]) for path in _folders_above(kept, settings.writable)
               if path not in mounted and not _inside_any(path, private)]
    return mounts, [*around, *sealed]


def _folders_above(paths: list[str], roots: tuple[str, ...]) -> list[str]:
    """The folders between each of `paths` and the writable root it lies in (both left out)."""
    found = []
    for path in paths:
        for root in roots:
            folder = os.path.dirname(path)
            while path != root and folder != root and _inside(folder, root):
                found.append(folder)
                folder = os.path.dirname(folder)
    return list(_unique(found))


def _entries(directory: str, writable: bool) -> list[tuple[str, list[str]]] | None:
    """The mounts that put a sealed directory's entries back as they are (read-only, but in a `writable` one); None
    when there are too many."""
    names = sealed_names(directory)
    if names is None:
        return None
    found = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue  # gone meanwhile
        if stat.S_ISLNK(mode):
            try:
                found.append((path, ["--symlink", os.readlink(path), path]))
            except OSError:
                continue
        elif not stat.S_ISSOCK(mode):
            found.append((path, ["--bind" if writable else "--ro-bind", path, path]))
    return found


def _size(path: str, settings: SandboxSettings, sized: bool) -> list[str]:
    if not sized:
        return []
    return ["--size", str(settings.tmp_size if path == "/tmp" else min(settings.tmp_size, RUNTIME_SIZE))]


def contained_argv(bwrap: str) -> list[str]:
    """bwrap arguments that change nothing but the PID namespace: for commands run outside the sandbox, so every
    process they start still ends with the run (and a command cannot see, or signal, the agent)."""
    return [bwrap, "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--proc", "/proc"]


def host_sockets() -> list[str]:
    """The path of every Unix socket bound on this machine (in this network namespace) that still exists.

    A read-only file system does not stop connect(): a daemon listening there would run what a command sends.
    """
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
            lines = table.read().splitlines()[1:]
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(None, 7)
        path = fields[7] if len(fields) == 8 else ""
        if not path.startswith("/"):
            continue  # unnamed, abstract (@name) or relative: the seccomp filter stops those
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    return list(dict.fromkeys(found))


def _lost_code(private: list[str], writable: tuple[str, ...]) -> list[str]:
    """What the runner needs (the interpreter, its prefixes, runner.py) where it lies in a private directory and
    would vanish in the sandbox. The runner runs isolated (`python -I -S`): no other `sys.path` entry is shown."""
    lost = []
    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, os.path.dirname(__file__)]
    if sys.executable:
        paths += [os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    for path in paths:
        real = resolve(path)
        if os.path.exists(real) and _inside_any(real, private) and not _inside_any(real, writable):
            lost.append(real)
    return list(_unique(lost))


def _resolver_files(private: list[str]) -> list[str]:
    """What name resolution reads from a private directory: /etc/resolv.conf is often a link into /run
    (systemd-resolved, resolvconf, NetworkManager)."""
    real = resolve(RESOLV_CONF)
    return [real] if real != RESOLV_CONF and os.path.isfile(real) and _inside_any(real, private) else []
