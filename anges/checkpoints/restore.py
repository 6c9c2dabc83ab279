"""Writing a checkpoint's files back into a folder. Every path is reached from the folder through descriptors, never
by name from /: a link (or a file) found where the checkpoint has a folder is replaced by the folder, and each file
is written new and renamed into place, so nothing is written through a link a step planted and nothing outside the
folder is touched (docs/checkpoints.md)."""

from __future__ import annotations

import errno
import os
import secrets
from contextlib import suppress

from anges.checkpoints.diffs import FileChange
from anges.checkpoints.git import PrivateGit
from anges.util.paths import open_directory, write_file_in

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_A_FOLDER = (errno.ELOOP, errno.ENOTDIR)
LINK, EXECUTABLE, GITLINK = "120000", "100755", "160000"


def write_back(git: PrivateGit, changes: list[FileChange]) -> list[str]:
    """Make the folder of `git` hold what `changes` (from the files now to the checkpoint) say: files deleted first,
    then written; what could not be done, one line each."""
    errors: list[str] = []
    root = open_directory(git.root)
    try:
        gone = sorted((c.name for c in changes if c.status == "deleted"), key=lambda name: (-name.count("/"), name))
        for name in gone:
            _remove(root, name, errors)
        for folder in sorted({os.path.dirname(name) for name in gone} - {""}, key=lambda n: -n.count("/")):
            _remove_if_empty(root, folder)
        written = [c for c in changes if c.status != "deleted" and c.mode != GITLINK]
        contents = _contents(git, sorted({change.blob for change in written}))
        for change in sorted(written, key=lambda c: c.name):
            try:
                _write(root, change.name, contents[change.blob], change.mode)
            except OSError as exc:
                errors.append(f"{change.name}: {exc.strerror or exc}")
    finally:
        os.close(root)
    return errors


def _folder(root: int, parts: list[str], make: bool) -> int | None:
    """A descriptor of the folder `parts` below `root`; where something else stands on the way, it is replaced by a
    folder (`make`) or None is returned."""
    fd = os.dup(root)
    try:
        for part in parts:
            try:
                inner = os.open(part, _FOLDER, dir_fd=fd)
            except OSError as exc:
                if not make:
                    os.close(fd)
                    return None
                if exc.errno in _NOT_A_FOLDER:
                    os.unlink(part, dir_fd=fd)  # a link or a file where the checkpoint has a folder
                elif exc.errno != errno.ENOENT:
                    raise
                os.mkdir(part, 0o777, dir_fd=fd)
                inner = os.open(part, _FOLDER, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write(root: int, name: str, content: bytes, mode: str) -> None:
    *parts, base = name.split("/")
    folder = _folder(root, parts, make=True)
    assert folder is not None
    try:
        if mode != LINK:
            write_file_in(folder, base, content, 0o777 if mode == EXECUTABLE else 0o666)
            return
        temp = f".{base[:200]}.{secrets.token_hex(4)}.tmp"
        os.symlink(os.fsdecode(content), temp, dir_fd=folder)
        try:
            os.rename(temp, base, src_dir_fd=folder, dst_dir_fd=folder)  # a link there is replaced, not followed
        except BaseException:
            with suppress(OSError):
                os.unlink(temp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def _remove(root: int, name: str, errors: list[str]) -> None:
    *parts, base = name.split("/")
    folder = _folder(root, parts, make=False)
    if folder is None:
        return  # its folder is gone, or is a link now: nothing of the checkpoint's is there to remove
    try:
        os.unlink(base, dir_fd=folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        errors.append(f"{name}: {exc.strerror or exc}")
    finally:
        os.close(folder)


def _remove_if_empty(root: int, name: str) -> None:
    """Remove a folder the deleted files leave empty, and its parents that are then empty too."""
    parts = name.split("/")
    while parts:
        folder = _folder(root, parts[:-1], make=False)
        if folder is None:
            return
        try:
            os.rmdir(parts[-1], dir_fd=folder)
        except OSError:
            return
        finally:
            os.close(folder)
        parts.pop()


def _contents(git: PrivateGit, blobs: list[str]) -> dict[str, bytes]:
    """The contents of `blobs`, read by one `git cat-file --batch`."""
    if not blobs:
        return {}
    out = git.run("cat-file", "--batch", stdin="".join(f"{blob}\n" for blob in blobs).encode())
    found: dict[str, bytes] = {}
    position = 0
    for blob in blobs:
        end = out.index(b"\n", position)
        header = out[position:end].split()
        if len(header) != 3:
            raise OSError(errno.EIO, f"object {blob} is missing from the checkpoint store")
        size = int(header[2])
        found[header[0].decode()] = out[end + 1:end + 1 + size]
        position = end + 1 + size + 1
    return found
