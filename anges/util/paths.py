"""Paths as the sandbox's rules judge them: resolved once, then reached without following a symlink, so a link
swapped in after the check makes the action fail instead of sending it elsewhere; and every file anges writes on the
host (`write_file`, `open_file`, `make_dirs`): never through a link a command may have planted (docs/safety.md)."""

from __future__ import annotations

import errno
import os
import secrets
from contextlib import suppress

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PASSAGE = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
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


def open_directory(real_dir: str, create: bool = False, mode: int = 0o777) -> int:
    """A descriptor of the directory at `real_dir` (absolute and resolved), reached from / without following any
    symlink; with `create`, missing directories are made (with `mode`). OSError (ELOOP, ENOTDIR) where a symlink
    now stands."""
    parts = [p for p in real_dir.split(os.sep) if p]
    fd = os.open("/", _DIRECTORY if not parts else _PASSAGE)
    try:
        for count, part in enumerate(parts, 1):
            flags = _DIRECTORY if count == len(parts) else _PASSAGE  # a folder on the way need not be readable
            try:
                inner = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
                inner = os.open(part, flags, dir_fd=fd)
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


def links_on_the_way(path: str, roots=None) -> list[tuple[str, str]]:
    """(link, where it points) for the symlink at `path` itself and, on the way to it, those lying in one of `roots`
    (resolved folders commands may write; None: every one): what a write to `path` would go through."""
    parts = os.path.normpath(os.path.abspath(os.path.expanduser(path))).split(os.sep)
    found = []
    for count in range(2, len(parts) + 1):
        link = os.sep.join(parts[:count])
        last = count == len(parts)
        if os.path.islink(link) and (last or roots is None or any(inside(resolve(os.path.dirname(link)), root)
                                                                  for root in roots)):
            with suppress(OSError):
                found.append((link, os.path.join(os.path.dirname(link), os.readlink(link))))
    return found


def links_text(links: list[tuple[str, str]]) -> str:
    """The links a write would go through, as a person reads them: `a.md is a link to /root/.bash_profile`."""
    return "; ".join(f"{link} is a link to {os.path.normpath(target)}" for link, target in links)


def make_dirs(path: str, mode: int = 0o700) -> None:
    """Create the folder `path` and its missing parents (each with `mode`), without following a symlink past the
    part of the path that exists (resolved once)."""
    os.close(open_directory(resolve(path), create=True, mode=mode))


def open_file(path: str, flags: int, mode: int = 0o600, parents: bool = False) -> int:
    """A descriptor for the file at `path`: its folder resolved once and reached without following a symlink (made,
    with its parents, when `parents`), and the file itself never a link (ELOOP)."""
    directory, name = _parent(path, parents)
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)
    finally:
        os.close(directory)


def write_file(path: str, data: bytes, mode: int = 0o600, durable: bool = False, parents: bool = False) -> None:
    """Put `data` at `path` whole: a new file beside it (`mode`, less the umask) renamed into place, its folder
    reached as `open_file` does. A link at `path` is replaced, never written through, and a file there that has
    other hard links is replaced too: they keep what they held."""
    directory, name = _parent(path, parents)
    try:
        write_file_in(directory, name, data, mode, durable)
    finally:
        os.close(directory)


def write_file_in(directory: int, name: str, data: bytes, mode: int = 0o600, durable: bool = False) -> None:
    """`write_file` into the folder open as `directory` (a descriptor), for a caller that keeps one open."""
    temp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=directory)
        raise


def open_folder_in(directory: int, name: str, create: bool = True) -> int:
    """A descriptor of the folder `name` inside the one open as `directory`, never through a link (made if
    missing, with `create`)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=directory)
    except FileNotFoundError:
        if not create:
            raise
    with suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=directory)
    return os.open(name, flags, dir_fd=directory)


def _parent(path: str, create: bool) -> tuple[int, str]:
    """A descriptor of the folder of `path` (resolved once, reached without following a symlink) and the name."""
    full = os.path.abspath(os.fspath(path))
    name = os.path.basename(full)
    if not name or name in (".", ".."):
        raise IsADirectoryError(errno.EISDIR, f"{path} names a folder, not a file")
    return open_directory(resolve(os.path.dirname(full)), create=create, mode=0o700), name
