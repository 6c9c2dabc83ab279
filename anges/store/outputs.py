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
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any

from anges.store.events import is_valid_id
from anges.store.fileops import make_private_dirs

OUTPUTS = "outputs"


def outputs_root(store_root: str | os.PathLike) -> Path:
    """Where the trees' folders of a store rooted at `store_root` are."""
    return Path(store_root).parent / OUTPUTS


def tree_folder(store: Any, top: str) -> str | None:
    """The folder of the agent tree whose top stream is `top`, made if missing; None when the store keeps no files
    (it has no `root`) or the id is not one."""
    root = getattr(store, "root", None)
    if root is None or not is_valid_id(top):
        return None
    folder = outputs_root(root) / top
    make_private_dirs(folder)
    return str(folder)


def stream_folder(tree: str, uid: str) -> str:
    """The folder of stream `uid`'s files in its tree's folder, made if missing."""
    if not is_valid_id(uid):
        raise ValueError(f"not a stream id: {uid!r}")
    folder = Path(tree, uid)
    make_private_dirs(folder)
    return str(folder)


def folder_of(store: Any, stream: Any) -> str | None:
    """The folder of a stream's files (None when its store keeps none)."""
    tree = tree_folder(store, (stream.parent_event_stream_uids or [stream.uid])[0])
    return stream_folder(tree, stream.uid) if tree is not None else None


def save(folder: str, prefix: str, text: str, suffix: str = ".txt") -> str | None:
    """A new file in `folder` holding `text`; its path, or None when it cannot be written (the disk is full)."""
    try:
        fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
    except OSError:
        with suppress(OSError):
            os.unlink(path)
        return None
    return path


def prune(folder: str | None, history: str) -> list[str]:
    """Remove the files of `folder` that `history` (the text the model now reads) does not name; their names."""
    if folder is None:
        return []
    removed = []
    with suppress(FileNotFoundError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False) and entry.path not in history:
                with suppress(FileNotFoundError):
                    os.unlink(entry.path)
                removed.append(entry.name)
    return removed


def remove_trees(store_root: str | os.PathLike, uids: list[str]) -> None:
    """Remove the folders of the trees whose top streams are `uids` (a stream's removal)."""
    root = outputs_root(store_root)
    for uid in uids:
        if is_valid_id(uid):
            shutil.rmtree(root / uid, ignore_errors=True)
