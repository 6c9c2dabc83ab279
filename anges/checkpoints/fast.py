"""The checkpoint of the common case, in anges' own process: the kernel says which files changed since the last one
(`watch.Watcher`), and only those are read; their blobs, the trees above them and the commit are written here as
git objects. Nothing changed costs one read of the events and no process. Where the events cannot tell (a name
made that a .gitignore may exclude, a folder made or removed, a .gitignore changed, events lost), `snapshot.take`
asks git, as before; after it the watches are brought up to date (docs/checkpoints.md)."""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field, replace

from anges.checkpoints.git import PrivateGit
from anges.checkpoints.snapshot import LeftOut, Snapshot, left_out_because, walk
from anges.checkpoints.watch import Unwatchable, Watcher

TREE, LINK = "40000", "120000"
LEFT_OUT_FILES = ("special", "too_big", "unreadable")


@dataclass
class _Folder:
    """What one folder's latest checkpoint holds, and what the fast path knows besides."""

    git: PrivateGit
    watcher: Watcher
    snapshot: Snapshot
    trees: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    """Folder ("" for the top, else ending with /) -> name -> (mode, object id), as in the latest commit."""
    ready: bool = False
    """Every folder was watched before the latest look of git: the events since tell every change."""


_folders: dict[str, _Folder] = {}
_lock = threading.Lock()


def take(git: PrivateGit, max_file_bytes: int) -> Snapshot | None:
    """The folder's snapshot from the events since its last one, or None when git must look."""
    with _lock:
        known = _folders.get(str(git.gitdir))
    if known is None or not known.ready or git.head() != known.snapshot.commit:
        return None
    seen = known.watcher.seen()
    if seen.everything:
        return None
    changed = _changed(known, seen.paths, max_file_bytes)
    if changed is None:
        return None
    if not changed:
        return known.snapshot
    left_out = LeftOut(**{**known.snapshot.left_out.__dict__,
                          **{kind: list(getattr(known.snapshot.left_out, kind)) for kind in LEFT_OUT_FILES}})
    touched: set[str] = set()
    for path in changed:
        _record(known, path, max_file_bytes, left_out, touched)
    commit = known.snapshot.commit
    if touched:
        commit = git.commit(_write_trees(known, touched), commit)
        git.set_head(commit)
    known.snapshot = replace(known.snapshot, commit=commit, left_out=left_out)
    return known.snapshot


def remember(git: PrivateGit, snapshot: Snapshot) -> None:
    """After git looked: watch the folder (what is new in it) and keep what its checkpoint holds. Until every
    folder was watched before a look of git, the next checkpoint asks git again."""
    with _lock:
        known = _folders.get(str(git.gitdir))
    try:
        if known is None:
            known = _Folder(git, Watcher(git.root), snapshot)
        known.snapshot = snapshot  # the events git's look may have missed stay queued: the next take reads them
        added = _watch(known)
    except Unwatchable:
        forget(git)
        return
    known.trees = _trees(git, snapshot.commit)
    for folder, entries in known.trees.items():
        for name, (mode, _) in entries.items():
            if mode != TREE:
                known.watcher.watch_file(folder + name)
    known.ready = not added
    with _lock:
        _folders[str(git.gitdir)] = known


def forget(git: PrivateGit) -> None:
    """Stop watching the folder (the run ended): its next checkpoint asks git."""
    with _lock:
        known = _folders.pop(str(git.gitdir), None)
    if known is not None:
        known.watcher.close()


def _changed(known: _Folder, paths: set[str], max_file_bytes: int) -> list[str] | None:
    """The covered (or left out) files among `paths`; None when one is new, or a .gitignore: then git must judge."""
    found = []
    left_out = known.snapshot.left_out
    for path in paths:
        if _skipped(path, known.snapshot.skipped) or path.split("/")[-1] == ".git":
            continue
        if path.split("/")[-1] == ".gitignore":
            return None
        full = os.path.join(known.git.root, path)
        if _entry(known, path) is not None:
            found.append(path)
        elif any(path in _names(getattr(left_out, kind)) for kind in LEFT_OUT_FILES):
            if left_out_because(full, max_file_bytes) in ("", "gone"):
                return None  # no longer a FIFO (or unreadable, or too big): whether it is ignored is git's to say
            found.append(path)
        elif os.path.lexists(full):
            return None  # a new name: whether it is ignored is git's to say
    return sorted(found)


def _record(known: _Folder, path: str, max_file_bytes: int, left_out: LeftOut, touched: set[str]) -> None:
    """Put what `path` holds now into the folder's next checkpoint (or leave it out, and say why)."""
    full = os.path.join(known.git.root, path)
    for kind in LEFT_OUT_FILES:
        setattr(left_out, kind, [item for item in getattr(left_out, kind)
                                 if (item[0] if kind == "too_big" else item) != path])
    why = left_out_because(full, max_file_bytes)
    folder, name = _split(path)
    entries = known.trees.get(folder)
    if entries is None:
        return
    if why == "unreadable":
        left_out.add("unreadable", path)  # the checkpoint keeps what it held
        return
    if why:
        if why != "gone":
            left_out.add(why, [path, os.lstat(full).st_size] if why == "too_big" else path)
        if entries.pop(name, None) is not None:
            touched.add(folder)
        return
    blob = _blob(known.git, full)
    if blob is None:
        return
    known.watcher.forget_file(path)  # it may be a new file now (an editor renames one over it)
    known.watcher.watch_file(path)
    if entries.get(name) != blob:
        entries[name] = blob
        touched.add(folder)


def _blob(git: PrivateGit, full: str) -> tuple[str, str] | None:
    """(mode, blob id) of the file or link at `full`, its content stored; None when it vanished meanwhile."""
    try:
        info = os.lstat(full)
        if stat.S_ISLNK(info.st_mode):
            return LINK, git.write_object("blob", os.fsencode(os.readlink(full)))
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
    return mode, git.write_object("blob", b"".join(chunks))


def _write_trees(known: _Folder, touched: set[str]) -> str:
    """Write the trees of the touched folders and of every folder above them; the top one's id."""
    dirty = set()
    for folder in touched:
        while True:
            dirty.add(folder)
            if not folder:
                break
            folder = _split(folder.rstrip("/"))[0]
    top = ""
    for folder in sorted(dirty, key=lambda f: -f.count("/")):
        entries = known.trees.get(folder, {})
        tree = known.git.write_object("tree", _tree_body(entries))
        if not folder:
            top = tree
            continue
        parent, name = _split(folder.rstrip("/"))
        if entries:
            known.trees[parent][name] = (TREE, tree)
        else:
            known.trees[parent].pop(name, None)  # git keeps no empty folder
    return top


def _tree_body(entries: dict[str, tuple[str, str]]) -> bytes:
    """A tree object's body: its entries sorted as git sorts them (a folder's name as if it ended with /)."""
    order = sorted(entries, key=lambda name: os.fsencode(name) + (b"/" if entries[name][0] == TREE else b""))
    return b"".join(b"%s %s\0" % (entries[name][0].encode(), os.fsencode(name)) + bytes.fromhex(entries[name][1])
                    for name in order)


def _trees(git: PrivateGit, commit: str) -> dict[str, dict[str, tuple[str, str]]]:
    """Every folder of `commit` and what it holds (one `git ls-tree`, after git looked anyway)."""
    trees: dict[str, dict[str, tuple[str, str]]] = {"": {}}
    for line in git.run("ls-tree", "-r", "-t", "-z", "--full-tree", commit).split(b"\0"):
        if not line:
            continue
        head, _, raw = line.partition(b"\t")
        mode, kind, blob = head.decode().split()
        path = os.fsdecode(raw)
        folder, name = _split(path)
        trees.setdefault(folder, {})[name] = (mode.lstrip("0"), blob)
        if kind == "tree":
            trees.setdefault(path + "/", {})
    return trees


def _watch(known: _Folder) -> bool:
    """Watch every folder not yet watched (not the skipped ones); True when there was one."""
    added = False
    for folder in walk(known.git.root, set(known.snapshot.skipped)).folders:
        added = known.watcher.watch_folder(folder) or added
    return added


def _entry(known: _Folder, path: str) -> tuple[str, str] | None:
    folder, name = _split(path)
    entry = known.trees.get(folder, {}).get(name)
    return entry if entry is not None and entry[0] != TREE else None


def _skipped(path: str, skipped: frozenset[str]) -> bool:
    """Whether `path` is one git passed over (ignored, a repository's, an unreadable folder's) or lies in one."""
    if path in skipped:
        return True
    index = path.find("/")
    while index >= 0:
        if path[:index + 1] in skipped:
            return True
        index = path.find("/", index + 1)
    return False


def _split(path: str) -> tuple[str, str]:
    """("folder/", "name") of a relative path ("" for a folder at the top)."""
    folder, _, name = path.rpartition("/")
    return (folder + "/" if folder else ""), name


def _names(items: list) -> set[str]:
    return {item[0] if isinstance(item, list) else item for item in items}
