"""Paths as the sandbox's rules judge them: resolved once, then reached without following a symlink, so a link
swapped in after the check makes the action fail instead of sending it elsewhere."""

from __future__ import annotations

import errno
import os
from contextlib import suppress

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RESOLVE_ATTEMPTS = 20


class PathChanging(OSError):
    """A path kept changing while it was resolved (a symlink on the way replaced again and again)."""


def resolve(path: str) -> str:
    """The absolute path with every symlink resolved, as the sandbox's rules judge it. A symlink replaced meanwhile
    is tried again; PathChanging when it keeps changing."""
    for _ in range(RESOLVE_ATTEMPTS):
        try:
            return os.path.realpath(os.path.expanduser(path))
        except OSError:
            continue  # a link vanished between its lstat and its readlink
    raise PathChanging(errno.ESTALE, f"{path} kept changing while it was checked (a symlink on the way is being "
                                     "replaced); try again once it is settled")


def link_in(path: str, roots) -> str:
    """The first symlink on the way to `path` (absolute) that lies in one of `roots` (resolved directories), where a
    command could have made it or pointed it elsewhere; "" when none does."""
    parts = os.path.normpath(path).split(os.sep)
    for count in range(2, len(parts) + 1):
        link = os.sep.join(parts[:count])
        if os.path.islink(link) and any(inside(resolve(os.path.dirname(link)), root) for root in roots):
            return link
    return ""


def inside(path: str, root: str) -> bool:
    """True when `path` is `root` or lies under it (both absolute and resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def open_directory(real_dir: str, create: bool = False) -> int:
    """A descriptor of the directory at `real_dir` (absolute and resolved), reached from / without following any
    symlink; with `create`, missing directories are made. OSError (ELOOP, ENOTDIR) where a symlink now stands."""
    fd = os.open("/", _DIRECTORY)
    try:
        for part in (p for p in real_dir.split(os.sep) if p):
            try:
                inner = os.open(part, _DIRECTORY, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                inner = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_nofollow(real_path: str, flags: int = os.O_RDONLY) -> int:
    """Open the file at `real_path` (absolute and resolved) without following any symlink on the way."""
    directory = open_directory(os.path.dirname(real_path))
    try:
        return os.open(os.path.basename(real_path), flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    finally:
        os.close(directory)
