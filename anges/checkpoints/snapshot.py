"""One snapshot of one folder: what changed since the last (git's stat cache in the folder's private index spares
the unchanged files), what was left out and why, and the commit that records it."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from anges.checkpoints.git import PrivateGit
from anges.exceptions import CheckpointError

MAX_LISTED = 1000
"""Paths of each kind of left-out file a record names; past it, it says how many more."""
STATUS = ("status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignored=matching", "--no-renames",
          "--ignore-submodules=all")


@dataclass
class LeftOut:
    """What a snapshot of a folder does not hold."""

    ignored: list[str] = field(default_factory=list)
    """Paths the project's .gitignore excludes, as git lists them (a whole ignored folder ends with /)."""
    too_big: list[list] = field(default_factory=list)
    """[path, size in bytes] of the files over the size limit."""
    repos: list[str] = field(default_factory=list)
    """Folders that are git repositories of their own (ending with /)."""
    more: int = 0
    """Paths left out beyond those listed (MAX_LISTED of each kind)."""

    def to_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if value}

    @classmethod
    def from_dict(cls, data: dict | None) -> LeftOut:
        data = data or {}
        return cls(list(data.get("ignored") or []), [list(item) for item in data.get("too_big") or []],
                   list(data.get("repos") or []), int(data.get("more") or 0))

    def add(self, kind: str, item) -> None:
        listed = getattr(self, kind)
        if len(listed) < MAX_LISTED:
            listed.append(item)
        else:
            self.more += 1


@dataclass(frozen=True)
class Snapshot:
    """A folder as it was at one moment: a commit in its private git, and what was left out."""

    root: str
    commit: str
    left_out: LeftOut


@dataclass
class _Changes:
    add: list[str] = field(default_factory=list)
    drop: list[str] = field(default_factory=list)
    """Tracked files gone (or past a link now), and those now over the size limit: out of this snapshot."""
    staged: bool = False
    """The index already differs from the last commit (a snapshot interrupted before its commit)."""


def take(git: PrivateGit, max_file_bytes: int, max_new_files: int, excludes: list[str] | None = None) -> Snapshot:
    """Snapshot the folder of `git`: its files but the ignored ones, those over `max_file_bytes` and `excludes`."""
    if not os.path.isdir(git.root):
        raise CheckpointError(f"{git.root} is not a folder (any more)")
    git.ensure(excludes)
    head = git.head()
    left_out = LeftOut()
    changes = _changes(git.run(*STATUS), git.root, max_file_bytes, left_out)
    if len(changes.add) > max_new_files and not head:
        raise CheckpointError(f"{git.root} holds more than {max_new_files} files that are not ignored "
                              "(checkpoints.max_files)")
    if changes.drop:
        git.run("update-index", "--force-remove", "-z", "--stdin", stdin=_paths(changes.drop))
    if changes.add:
        bulk = () if head else ("-c", "core.bigFileThreshold=1")  # the first: one pack, not a file per object
        git.run(*bulk, "update-index", "--add", "--remove", "--replace", "-z", "--stdin", stdin=_paths(changes.add))
    if changes.add or changes.drop or changes.staged or not head:
        tree = git.run("write-tree", "--missing-ok").decode().strip()  # every blob was just written: no need to look
        head = git.commit(tree, head)
        git.set_head(head)
    return Snapshot(git.root, head, left_out)


def _changes(status: bytes, root: str, max_file_bytes: int, left_out: LeftOut) -> _Changes:
    """What `git status` says changed, sorted into what to add (or remove) and what to leave out."""
    changes = _Changes()
    for entry in status.split(b"\0"):
        if len(entry) < 4:
            continue
        code, path = entry[:2].decode(), os.fsdecode(entry[3:])
        if code == "!!":
            left_out.add("ignored", path)
        elif path.endswith("/"):  # a folder git does not enter: a repository of its own
            left_out.add("repos", path)
        elif code[1] == "D":
            changes.drop.append(path)
        elif code == "??" or code[1] in "MT":
            size = _size(os.path.join(root, path))
            if size is not None and size > max_file_bytes:
                left_out.add("too_big", [path, size])
                if code != "??":
                    changes.drop.append(path)
            else:
                changes.add.append(path)  # one gone since is removed from the index
        else:
            changes.staged = True
    return changes


def _size(path: str) -> int | None:
    """The size of a regular file at `path` (not followed if a link); None for anything else or nothing."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _paths(paths: list[str]) -> bytes:
    return b"".join(os.fsencode(path) + b"\0" for path in paths)
