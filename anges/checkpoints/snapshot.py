"""One snapshot of one folder: what changed since the last (git's stat cache in the folder's private index spares
the unchanged files), what was left out and why, and the commit that records it."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from anges.checkpoints.git import CheckpointsOff, PrivateGit
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
    unreadable: list[str] = field(default_factory=list)
    """Files anges may not read and folders it may not open (ending with /): a tracked one keeps what it held."""
    special: list[str] = field(default_factory=list)
    """FIFOs, sockets and devices: no content to keep (a tracked file one replaced counts as gone)."""
    more: int = 0
    """Paths left out beyond those listed (MAX_LISTED of each kind)."""

    def to_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if value}

    @classmethod
    def from_dict(cls, data: dict | None) -> LeftOut:
        data = data or {}
        return cls(list(data.get("ignored") or []), [list(item) for item in data.get("too_big") or []],
                   list(data.get("repos") or []), list(data.get("unreadable") or []),
                   list(data.get("special") or []), int(data.get("more") or 0))

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
    skipped: frozenset[str] = frozenset()
    """Every path git passed over as ignored or a repository of its own, and the folders it could not open (not
    capped as `left_out`'s lists are): what the fast path leaves alone too."""


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
    status, warnings = git.run_with_warnings(*STATUS)
    for folder in _unopened(warnings):
        left_out.add("unreadable", folder)
    skipped: set[str] = set(_unopened(warnings))
    changes = _changes(status, git.root, max_file_bytes, left_out, skipped)
    for path in walk(git.root, skipped).special:
        if path not in left_out.special:
            left_out.add("special", path)  # git passes over them without a word
    if len(changes.add) > max_new_files and not head:
        raise CheckpointsOff(f"{git.root} holds more than {max_new_files} files that are not ignored "
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
    return Snapshot(git.root, head, left_out, frozenset(skipped))


def _changes(status: bytes, root: str, max_file_bytes: int, left_out: LeftOut, skipped: set[str]) -> _Changes:
    """What `git status` says changed, sorted into what to add (or remove) and what to leave out."""
    changes = _Changes()
    for entry in status.split(b"\0"):
        if len(entry) < 4:
            continue
        code, path = entry[:2].decode(), os.fsdecode(entry[3:])
        if code == "!!":
            left_out.add("ignored", path)
            skipped.add(path)
        elif path.endswith("/"):  # a folder git does not enter: a repository of its own
            left_out.add("repos", path)
            skipped.add(path)
        elif code[1] == "D" or code == "??" or code[1] in "MT":
            _sort(path, code, root, max_file_bytes, changes, left_out)
        else:
            changes.staged = True
    return changes


REASONS = {"ignored": "ignored (.gitignore)", "too_big": "over the size limit", "repos": "a repository of its own",
           "unreadable": "anges may not read it", "special": "a FIFO, socket or device"}


def not_covered(*left_outs: LeftOut) -> list[tuple[str, str]]:
    """(path, why) of what any of these snapshots left out, each path once (and how many more were not listed)."""
    found: dict[str, str] = {}
    more = 0
    for left_out in left_outs:
        for kind, why in REASONS.items():
            for item in getattr(left_out, kind):
                found.setdefault(item[0] if kind == "too_big" else item, why)
        more = max(more, left_out.more)
    listed = list(found.items())
    return listed + ([(f"{more} more", "not listed")] if more else [])


def _sort(path: str, code: str, root: str, max_file_bytes: int, changes: _Changes, left_out: LeftOut) -> None:
    """Add a changed file, drop a gone one, or leave it out (and say why): what a step can put in the way must not
    stop the checkpoint (issue 35)."""
    tracked = code != "??"
    why = left_out_because(os.path.join(root, path), max_file_bytes)
    if why == "gone":
        changes.drop.append(path)
    elif why == "unreadable":
        left_out.add("unreadable", path)  # the index keeps what it held: it is not gone
    elif why:
        left_out.add(why, [path, os.lstat(os.path.join(root, path)).st_size] if why == "too_big" else path)
        if tracked:
            changes.drop.append(path)
    else:
        changes.add.append(path)


def left_out_because(path: str, max_file_bytes: int) -> str:
    """Why the file at `path` stays out of a snapshot: "gone", "unreadable", "special" (a FIFO, socket or device),
    "too_big"; "" when it goes in. A file is opened without blocking (a FIFO swapped in meanwhile cannot hang it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "unreadable"  # a folder on the way that may not be searched
    if stat.S_ISLNK(st.st_mode):
        return ""
    if not stat.S_ISREG(st.st_mode):
        return "" if stat.S_ISDIR(st.st_mode) else "special"
    if st.st_size > max_file_bytes:
        return "too_big"
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC))
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "unreadable"
    return ""


@dataclass
class Walk:
    """What a walk through a folder found: its folders (relative, "" for the top) and the files that are neither
    regular nor links."""

    folders: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def walk(root: str, skip: set[str]) -> Walk:
    """Every folder under `root` but `.git` and the `skip` ones (relative, ending with /), read once each (the
    entries' types come with the listing: no stat per file)."""
    found = Walk()
    pending = [""]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(os.path.join(root, folder) if folder else root) as entries:
                found.folders.append(folder)
                for entry in entries:
                    name = folder + entry.name
                    if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != ".git" and name + "/" not in skip:
                            pending.append(name + "/")
                    elif name not in skip:
                        found.special.append(name)
        except FileNotFoundError:
            continue
        except OSError:
            found.unreadable.append(folder)
    return found


def _unopened(warnings: bytes) -> list[str]:
    """The folders git could not open (`warning: could not open directory 'x/': Permission denied`)."""
    found = []
    for line in warnings.decode(errors="surrogateescape").splitlines():
        if line.startswith("warning: could not open directory '") and "': " in line:
            found.append(line[len("warning: could not open directory '"):line.rindex("': ")])
    return found


def _paths(paths: list[str]) -> bytes:
    return b"".join(os.fsencode(path) + b"\0" for path in paths)
