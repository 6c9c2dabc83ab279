"""The file-editing engine behind EDIT_FILE: parse a directive, change the file atomically, show the diff.

An edit resolves the path once (symlinks included) and then reaches the file through a descriptor of its
directory, opening every component without following symlinks: a link swapped in after the path was checked
makes the edit fail instead of sending it elsewhere. It holds an exclusive flock on the file from the read to
the replace, so concurrent edits (other agents, other processes) each see the previous one's result. The file
keeps its owner, group and mode; a file with hard links is rewritten in place so every link sees the change.
"""

from __future__ import annotations

import difflib
import errno
import fcntl
import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from anges.exceptions import AngesError
from anges.util.paths import open_directory
from anges.util.printable import unusable

OPERATIONS = ("NEW_FILE", "INSERT_LINES", "REMOVE_LINES", "REPLACE_LINES", "REPLACE_TEXT")
_USAGE = {
    "NEW_FILE": "NEW_FILE <path>",
    "INSERT_LINES": "INSERT_LINES <path> <N>",
    "REMOVE_LINES": "REMOVE_LINES <path> <x>-<y>",
    "REPLACE_LINES": "REPLACE_LINES <path> <x>-<y>",
    "REPLACE_TEXT": "REPLACE_TEXT <path>",
}
MAX_FILE_BYTES = 200_000_000
"""The largest file EDIT_FILE reads (a file made huge, or sparse, must not fill anges' memory)."""
_LINE_ARGUMENT = re.compile(r"(?P<path>.+?)\s+(?P<n>-?\d+)")
_RANGE_ARGUMENT = re.compile(r"(?P<path>.+?)\s+(?P<x>\d+)\s*-\s*(?P<y>\d+)")


class EditError(AngesError):
    """An edit was refused; the message tells the model what was wrong and the file is unchanged."""


@dataclass
class EditResult:
    """The outcome of one edit: which file, which operation, and the unified diff."""

    path: str
    operation: str
    diff: str
    created: bool
    size: int = 0
    """Bytes of the file after the edit."""

    def to_data(self) -> dict:
        """JSON-able facts for Event.data."""
        added, removed = count_changes(self.diff)
        return {"path": self.path, "operation": self.operation, "created": self.created, "lines_added": added,
                "lines_removed": removed, "size": self.size}


def count_changes(diff: str) -> tuple[int, int]:
    """(lines added, lines removed) by a unified diff."""
    lines = diff.splitlines()
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    return added, removed


def summarize_diff(diff: str) -> str:
    """What stands in for a diff too long to keep: the number of lines it changes."""
    added, removed = count_changes(diff)
    return (f"[{added + removed} lines changed (+{added} -{removed}); the diff, {len(diff)} characters, is too long "
            "to keep]\n")


@dataclass
class _Target:
    path: str
    """Absolute, as the directive names it (through symlinks, if any)."""
    shown: str
    base: str
    real: str = ""
    """The resolved path the edit reads and writes."""
    dir_fd: int | None = None
    """Its directory, opened without following symlinks (None while the directory does not exist)."""

    @property
    def name(self) -> str:
        return os.path.basename(self.real)


def apply_edit(
    directive_line: str, content: str, *, base_dir: str | os.PathLike, old_text: str | None = None,
    resolved: str | None = None,
) -> EditResult:
    """Apply one EDIT_FILE directive (NEW_FILE, INSERT_LINES, REMOVE_LINES, REPLACE_LINES, REPLACE_TEXT).

    `resolved` is the real path the policy judged: the edit refuses when the directive's path no longer leads
    there, and never follows a symlink after that check.
    """
    words = directive_line.strip().split(None, 1)
    operation = words[0].upper() if words else ""
    if operation not in OPERATIONS:
        raise EditError(
            f"Unknown edit directive {directive_line.strip()!r}; start it with one of: {', '.join(OPERATIONS)}"
        )
    rest = words[1].strip() if len(words) > 1 else ""
    match = None
    if operation == "INSERT_LINES":
        match = _argument(_LINE_ARGUMENT, rest, operation)
    elif operation in ("REMOVE_LINES", "REPLACE_LINES"):
        match = _argument(_RANGE_ARGUMENT, rest, operation)
    target = _target(match["path"] if match else rest, base_dir, operation)
    if os.path.isdir(target.path):
        raise EditError(f"{target.shown} is a directory, not a file")
    with _opened(target, resolved), _locked(target):
        if operation == "NEW_FILE":
            return _new_file(target, content)
        if match is None:  # REPLACE_TEXT, the other directive without line numbers
            return _replace_text(target, content, old_text)
        if operation == "INSERT_LINES":
            return _insert_lines(target, int(match["n"]), content)
        return _replace_range(target, operation, int(match["x"]), int(match["y"]), content)


def _argument(pattern: re.Pattern, rest: str, operation: str) -> re.Match:
    match = pattern.fullmatch(rest)
    if match is None:
        raise EditError(f"{operation} needs a path and {_USAGE[operation].split()[-1]}: write `{_USAGE[operation]}`")
    return match


def _target(raw: str, base_dir: str | os.PathLike, operation: str) -> _Target:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        raw = raw[1:-1].strip()
    if not raw:
        raise EditError(f"{operation} needs a path: write `{_USAGE[operation]}`")
    problem = unusable(raw)
    if problem:
        raise EditError(f"{raw!r} cannot be a file name: it holds {problem}")
    base = os.path.abspath(os.path.expanduser(os.fspath(base_dir)))
    path = os.path.abspath(os.path.join(base, os.path.expanduser(raw)))
    relative = os.path.relpath(path, base)
    shown = path if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative
    return _Target(path, shown, base)


@contextmanager
def _opened(target: _Target, resolved: str | None) -> Iterator[None]:
    """Resolve the target once and hold its directory open (reached without following symlinks) for the edit."""
    try:
        target.real = os.path.realpath(target.path)
    except OSError as error:  # a symlink on the way vanished while it was resolved
        raise EditError(f"{target.shown} changed while it was resolved ({error.strerror}); the file was not edited") \
            from None
    if resolved is not None and target.real != resolved:
        raise EditError(f"{target.shown} changed after it was checked: it led to {resolved} and now leads to "
                        f"{target.real}; the file was not edited")
    try:
        target.dir_fd = open_directory(os.path.dirname(target.real))
    except OSError as error:
        if not isinstance(error, FileNotFoundError) and _symlink_on_the_way(target.real):
            raise _moved(target, error) from error
        target.dir_fd = None  # missing (or a file stands there): made, or refused, when the file is written
    try:
        yield
    finally:
        if target.dir_fd is not None:
            os.close(target.dir_fd)
            target.dir_fd = None


def _symlink_on_the_way(real_path: str) -> bool:
    """True when some component of a resolved path is a symlink now (it was not when it was resolved)."""
    parts = real_path.split(os.sep)
    return any(os.path.islink(os.sep.join(parts[:n]) or os.sep) for n in range(2, len(parts) + 1))


def _moved(target: _Target, error: OSError) -> EditError:
    if error.errno == errno.ELOOP or (error.errno == errno.ENOTDIR and _symlink_on_the_way(target.real)):
        return EditError(f"{target.shown} changed after it was checked: a symlink now stands on the way to "
                         f"{target.real}; the file was not edited")
    return EditError(f"Cannot open {target.shown}: {error.strerror or error}")


@contextmanager
def _locked(target: _Target) -> Iterator[None]:
    """Hold an exclusive flock on the file `target` names (if it exists) while it is read, changed and replaced.

    A replace puts a new inode at the name: a waiter that locked the old one opens the name again.
    """
    if target.dir_fd is None:
        yield  # a new file in a new directory: nothing to lock yet
        return
    while True:
        try:
            fd = os.open(target.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=target.dir_fd)
        except FileNotFoundError:
            yield  # a new file: nothing to lock yet
            return
        except OSError as error:
            raise _moved(target, error) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            locked = os.fstat(fd)
            if not stat.S_ISREG(locked.st_mode):
                raise EditError(f"{target.shown} is not a regular file; EDIT_FILE only edits text files")
            current = _lstat(target)
            if current is not None and (current.st_dev, current.st_ino) == (locked.st_dev, locked.st_ino):
                yield
                return
        finally:
            os.close(fd)


def _lstat(target: _Target) -> os.stat_result | None:
    try:
        return os.stat(target.name, dir_fd=target.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _read(target: _Target, operation: str) -> str:
    try:
        if target.dir_fd is None:
            raise FileNotFoundError
        fd = os.open(target.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=target.dir_fd)
    except FileNotFoundError:
        raise EditError(
            f"{target.shown} does not exist; {operation} edits an existing file, NEW_FILE creates one"
        ) from None
    except OSError as error:
        raise _moved(target, error) from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise EditError(f"{target.shown} is not a regular file; EDIT_FILE only edits text files")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_FILE_BYTES + 1) if info.st_size <= MAX_FILE_BYTES else b""
        if info.st_size > MAX_FILE_BYTES or len(data) > MAX_FILE_BYTES:
            raise EditError(f"{target.shown} is over the {MAX_FILE_BYTES:,} bytes EDIT_FILE edits; change it with a "
                            "command instead")
    except OSError as error:
        raise EditError(f"Cannot read {target.shown}: {error.strerror}") from error
    finally:
        os.close(fd)
    if b"\0" in data:
        raise EditError(f"{target.shown} is a binary file; EDIT_FILE only edits text files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise EditError(f"{target.shown} is not UTF-8 text; EDIT_FILE only edits UTF-8 text files") from None


def _new_file(target: _Target, content: str) -> EditResult:
    old = _read(target, "NEW_FILE") if target.dir_fd is not None and _lstat(target) is not None else None
    text = content if not content or content.endswith("\n") else content + "\n"
    return _write(target, "NEW_FILE", old, text)


def _replace_text(target: _Target, content: str, old_text: str | None) -> EditResult:
    if not old_text:
        raise EditError("REPLACE_TEXT needs old_text: the exact text to replace, which must occur once in the file")
    text = _read(target, "REPLACE_TEXT")
    if text.count(old_text) == 0 and "\r\n" in text and "\r\n" not in old_text:
        old_text, content = old_text.replace("\n", "\r\n"), content.replace("\r\n", "\n").replace("\n", "\r\n")
    count = text.count(old_text)
    if count == 0:
        raise EditError(f"old_text was not found in {target.shown}; copy it exactly, including whitespace")
    if count > 1:
        raise EditError(
            f"old_text occurs {count} times in {target.shown}; include more surrounding lines so it occurs once"
        )
    return _write(target, "REPLACE_TEXT", text, text.replace(old_text, content, 1))


def _insert_lines(target: _Target, line: int, content: str) -> EditResult:
    if not content:
        raise EditError("INSERT_LINES needs content: the lines to insert")
    text = _read(target, "INSERT_LINES")
    lines = _split_lines(text)
    if line < -1 or line > len(lines) + 1:
        raise EditError(
            f"INSERT_LINES line {line} is outside {target.shown}, which has {len(lines)} lines; "
            f"use 1-{len(lines) + 1}, 0 for the start or -1 for the end"
        )
    index = len(lines) if line == -1 else max(line - 1, 0)
    return _splice(target, "INSERT_LINES", text, index, index, content)


def _replace_range(target: _Target, operation: str, first: int, last: int, content: str) -> EditResult:
    text = _read(target, operation)
    count = len(_split_lines(text))
    if first < 1 or first > last:
        raise EditError(
            f"{operation} range {first}-{last} is invalid: lines are numbered from 1 and the start must not be "
            "after the end"
        )
    if last > count:
        raise EditError(f"{operation} range {first}-{last} is outside {target.shown}, which has {count} lines")
    return _splice(target, operation, text, first - 1, last, "" if operation == "REMOVE_LINES" else content)


def _splice(target: _Target, operation: str, text: str, start: int, end: int, content: str) -> EditResult:
    """Replace lines[start:end] with the lines of `content`, keeping the file's newline conventions."""
    newline = "\r\n" if text.split("\n", 1)[0].endswith("\r") else "\n"
    lines = [line if line.endswith("\n") else line + newline for line in _split_lines(text)]
    added = [line.rstrip("\r\n") + newline for line in _split_lines(content)]
    edited = "".join(lines[:start] + added + lines[end:])
    if text and not text.endswith("\n"):
        edited = edited.removesuffix(newline)
    return _write(target, operation, text, edited)


def _split_lines(text: str) -> list[str]:
    """Lines with their endings, split on "\\n" only (str.splitlines also splits on form feeds and more)."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _write(target: _Target, operation: str, old: str | None, new: str) -> EditResult:
    if old != new:
        dir_fd = target.dir_fd if target.dir_fd is not None else _make_parents(target)
        try:
            replace_contents(dir_fd, target.name, new.encode("utf-8"))
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise _moved(target, error) from error
            raise EditError(f"Cannot write {target.shown}: {error.strerror or error}") from error
    return EditResult(target.path, operation, _diff(target, old, new), created=old is None,
                      size=len(new.encode("utf-8")))


def _make_parents(target: _Target) -> int:
    """Create the missing directories above the file, refusing those a path inside the working directory would
    reach outside it through a symlink (a dangling link must not plant directories elsewhere); the file's
    directory, opened (also kept in `target.dir_fd`)."""
    directory = os.path.dirname(target.real)
    real_base = os.path.realpath(target.base)
    written_inside = os.path.commonpath([target.base, target.path]) == target.base
    if written_inside and os.path.commonpath([real_base, directory]) != real_base:
        raise EditError(f"Refusing to create {directory}: {target.shown} leads there through a symlink, outside the "
                        f"working directory {target.base}")
    try:
        target.dir_fd = open_directory(directory, create=True)
    except OSError as error:
        raise _moved(target, error) if _symlink_on_the_way(target.real) else EditError(
            f"Cannot write {target.shown}: {error.strerror or error}") from error
    return target.dir_fd


def replace_contents(dir_fd: int, name: str, data: bytes) -> None:
    """Give the file `name` in the directory `dir_fd` the contents `data`, keeping its owner, group, mode and hard
    links; a symlink standing there is an OSError (ELOOP), never followed.

    Normally a temporary file beside it, renamed over it (a crash leaves the old or the new file). A file
    with other hard links, or whose owner we cannot give the new inode, is rewritten in place instead.
    """
    try:
        old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISLNK(old.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
    if old is not None and old.st_nlink > 1:
        _rewrite_in_place(dir_fd, name, data)
        return
    temporary = f".{name}.{secrets.token_hex(4)}.tmp"
    # 0o666 lets the kernel apply the umask, as it would for a file created by any editor.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                 dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if old is not None and not _same_owner(handle.fileno(), old):
                os.unlink(temporary, dir_fd=dir_fd)
                _rewrite_in_place(dir_fd, name, data)
                return
            if old is not None:
                os.fchmod(handle.fileno(), stat.S_IMODE(old.st_mode))
            os.fsync(handle.fileno())
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def _same_owner(fd: int, old: os.stat_result) -> bool:
    """Give the new file the old one's owner and group; False when we may not."""
    new = os.fstat(fd)
    if (new.st_uid, new.st_gid) == (old.st_uid, old.st_gid):
        return True
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except PermissionError:
        return False
    return True


def _rewrite_in_place(dir_fd: int, name: str, data: bytes) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def _diff(target: _Target, old: str | None, new: str) -> str:
    label = target.shown if target.shown == target.path else None
    before = "/dev/null" if old is None else label or f"a/{target.shown}"
    after = label or f"b/{target.shown}"
    lines = difflib.unified_diff(_split_lines(old or ""), _split_lines(new), before, after)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def edit_target(directive_line: str, base_dir: str | os.PathLike) -> tuple[str, str, str]:
    """(operation, absolute path, the arguments after the path) of a directive; EditError when it is malformed."""
    words = directive_line.strip().split(None, 1)
    operation = words[0].upper() if words else ""
    if operation not in OPERATIONS:
        raise EditError(f"Unknown edit directive {directive_line.strip()!r}")
    rest, arguments = (words[1].strip() if len(words) > 1 else ""), ""
    if operation == "INSERT_LINES":
        match = _argument(_LINE_ARGUMENT, rest, operation)
        rest, arguments = match["path"], match["n"]
    elif operation in ("REMOVE_LINES", "REPLACE_LINES"):
        match = _argument(_RANGE_ARGUMENT, rest, operation)
        rest, arguments = match["path"], f"{match['x']}-{match['y']}"
    return operation, _target(rest, base_dir, operation).path, arguments
