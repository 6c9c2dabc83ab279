"""Files the history points to: a command's whole output, a long command, a child's whole report.

They live beside the stream store, one folder per agent tree (named after its top stream) and in it one per stream:
`<store root>/../outputs/<top stream>/<stream>/` (`ANGES_HOME/data/outputs/...` by default). So they outlast the
request that made them: a later request of the same session finds them, as long as its history names them. A fold
removes the files of its stream that the new history no longer names; removing a stream removes its tree's folder.
The run's sandbox shows its tree's folder to commands, read-only (`anges.safety.run_safety`).
"""

from __future__ import annotations

import os
import shutil
import stat
from contextlib import suppress
from pathlib import Path
from typing import Any

from anges.store.events import is_valid_id, new_id
from anges.store.fileops import make_private_dirs
from anges.util.paths import make_dirs, open_directory, resolve

OUTPUTS = "outputs"
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def outputs_root(store_root: str | os.PathLike) -> Path:
    """Where the trees' folders of a store rooted at `store_root` are."""
    return Path(store_root).parent / OUTPUTS


def tree_folder(store: Any, top: str) -> str | None:
    """The folder of the agent tree whose top stream is `top`, made if missing; None when the store keeps no files
    (it has no `root`), the id is not one, or a symlink stands on the way (`_folder`)."""
    root = getattr(store, "root", None)
    if root is None or not is_valid_id(top):
        return None
    return _folder(str(Path(root).parent), OUTPUTS, top)


def stream_folder(tree: str, uid: str) -> str | None:
    """The folder of stream `uid`'s files in its tree's folder (as `tree_folder` gave it), made if missing; None when
    the id is not one, or either folder is now a symlink (asked at every command: two `lstat`s, not a walk)."""
    if not is_valid_id(uid):
        return None
    path = os.path.join(tree, uid)
    try:
        if not _is_folder(tree):
            return None
        try:
            return path if _is_folder(path) else None
        except FileNotFoundError:
            make_dirs(path)
            return path
    except OSError:
        return None


def folder_of(store: Any, stream: Any) -> str | None:
    """The folder of a stream's files (None when its store keeps none)."""
    tree = tree_folder(store, (stream.parent_event_stream_uids or [stream.uid])[0])
    return stream_folder(tree, stream.uid) if tree is not None else None


def save(folder: str, prefix: str, text: str, suffix: str = ".txt") -> str | None:
    """A new file in `folder` holding `text`; its path, or None when it cannot be written (a full disk, a symlink
    where the folder was)."""
    try:
        directory = open_directory(folder)
    except OSError:
        return None
    name = f"{prefix}{new_id(10)}{suffix}"
    try:
        with os.fdopen(os.open(name, _NEW_FILE, 0o600, dir_fd=directory), "w", encoding="utf-8") as file:
            file.write(text)
    except OSError:
        with suppress(OSError):
            os.unlink(name, dir_fd=directory)
        return None
    finally:
        os.close(directory)
    return os.path.join(folder, name)


def prune(folder: str | None, history: str) -> list[str]:
    """Remove the files of `folder` that `history` (the text the model now reads) does not name; their names."""
    if folder is None:
        return []
    try:
        directory = open_directory(folder)
    except OSError:
        return []
    removed = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False) and os.path.join(folder, entry.name) not in history:
                    with suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=directory)
                    removed.append(entry.name)
    finally:
        os.close(directory)
    return removed


def remove_trees(store_root: str | os.PathLike, uids: list[str]) -> None:
    """Remove the folders of the trees whose top streams are `uids` (a stream's removal)."""
    root = outputs_root(store_root)
    for uid in uids:
        if is_valid_id(uid):
            shutil.rmtree(root / uid, ignore_errors=True)


def _folder(base: str, *names: str) -> str | None:
    """`base` (resolved: its own links are the user's) and `names` below it, made if missing (private to the user);
    None when a symlink stands among `names`, where a command could have put one to send anges' writes elsewhere."""
    path = os.path.join(resolve(base), *names)
    try:
        make_private_dirs(Path(path))
        os.close(open_directory(path))
    except OSError:
        return None
    return path


def _is_folder(path: str) -> bool:
    return stat.S_ISDIR(os.lstat(path).st_mode)
