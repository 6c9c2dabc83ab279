"""Where checkpoints live: `ANGES_HOME/data/checkpoints/<id of the tree's first stream>/`, shared by an agent and
the child agents it starts (they work in the same folders), removed with it.

Inside: `objects/` (the git objects of every checkpoint, each file's content stored once), `roots/<key>/` (the
private git directory and index of each folder covered), `logs/<stream id>.jsonl` (each stream's `Timeline`),
`empty/` (git's home and hooks directory: nothing in it) and `lock`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from anges.checkpoints import snapshot
from anges.checkpoints.git import Interrupted, PrivateGit, find_git
from anges.checkpoints.timeline import Entry, Timeline
from anges.config.loading import anges_home
from anges.exceptions import CheckpointError, InvalidStreamId
from anges.store.events import is_valid_id
from anges.util.trust import model_writable

if TYPE_CHECKING:
    from anges.config.types import CheckpointsConfig


LOOSE_OBJECTS = 256
PACKS = 16


def checkpoints_dir() -> Path:
    """Where every stream's checkpoints are kept."""
    return anges_home() / "data" / "checkpoints"


class CheckpointStore:
    """The checkpoints of one agent tree."""

    def __init__(self, tree_id: str, config: CheckpointsConfig, interrupt: Callable[[], bool] | None = None,
                 base: Path | None = None):
        if not is_valid_id(tree_id):
            raise InvalidStreamId(f"invalid stream id {repr(tree_id)[:80]}")
        self.path = (base or checkpoints_dir()) / tree_id
        self.config = config
        self.interrupt = interrupt
        self._git_path = ""

    def git(self, root: str) -> PrivateGit:
        """The private git of one folder."""
        if not self._git_path:
            self._git_path = find_git(self.config.git)
        real = os.path.realpath(self._git_path)
        why = model_writable(self._git_path, [root])  # any folder a run of this process works in counts too
        if why:
            raise CheckpointError(f"git at {self._git_path} is not run: {why}, so a command could have replaced it; "
                                  "name another with checkpoints.git")
        return PrivateGit(real, self.path, root, self.interrupt)  # what was checked is what runs

    def timeline(self, uid: str) -> Timeline:
        if not is_valid_id(uid):
            raise InvalidStreamId(f"invalid stream id {repr(uid)[:80]}")
        return Timeline(self.path / "logs" / f"{uid}.jsonl")

    def exists(self) -> bool:
        return self.path.is_dir()

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's lock: one snapshot or undo at a time, across processes."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def snapshots(self, roots: Iterable[str], excludes: Iterable[str] | None = None
                  ) -> tuple[dict[str, snapshot.Snapshot], list[str]]:
        """A snapshot of each folder now (the caller holds the lock), and why some could not be taken;
        CheckpointError when none could."""
        taken, errors = {}, []
        for root in roots:
            inside = None if excludes is None else _inside(excludes, root)
            try:
                taken[root] = snapshot.take(self.git(root), self.config.max_file_bytes, self.config.max_files, inside)
            except Interrupted:
                raise
            except CheckpointError as exc:
                errors.append(str(exc))
        if not taken:
            raise CheckpointError("; ".join(errors) or "no folder to checkpoint")
        return taken, errors

    def take(self, uid: str, kind: str, roots: Iterable[str], excludes: Iterable[str] | None = None,
             **facts) -> Entry:
        """Snapshot `roots` and record the snapshot as the next entry of stream `uid`'s timeline; when a run
        ends, pack the objects its steps left (a few per step) if there are many."""
        with self.lock():
            taken, errors = self.snapshots(roots, excludes)
            entry = self.timeline(uid).append(kind, taken, error="; ".join(errors), **facts)
            if kind == "end":
                self.pack(list(taken))
            return entry

    def pack(self, roots: list[str]) -> None:
        """Pack the loose objects once there are LOOSE_OBJECTS (each is a file: 4 KB on disk however small), and
        the packs into one once there are PACKS. Never drops an object: each folder's git sees only its own
        checkpoints, and another folder's may share the objects."""
        objects = self.path / "objects"
        loose = sum(len(os.listdir(entry)) for entry in objects.iterdir() if len(entry.name) == 2)
        if loose < LOOSE_OBJECTS:
            return
        for root in roots:
            self.git(root).run("repack", "-d", "-q", "--no-write-bitmap-index")
        if len(list((objects / "pack").glob("*.pack"))) > PACKS:
            for root in roots:
                self.git(root).run("repack", "-a", "-d", "-k", "-q", "--no-write-bitmap-index")


def remove_checkpoints(uids: Iterable[str], base: Path | None = None) -> None:
    """Remove the checkpoints of these streams: a tree's whole store with its first stream, a child's timeline."""
    base = base or checkpoints_dir()
    for uid in uids:
        if not is_valid_id(uid):
            continue
        if (base / uid).is_dir() and not (base / uid).is_symlink():
            shutil.rmtree(base / uid, ignore_errors=True)
        for timeline in base.glob(f"*/logs/{uid}.jsonl"):
            timeline.unlink(missing_ok=True)


def _inside(paths: Iterable[str], root: str) -> list[str]:
    """`paths` that lie inside `root`, relative to it."""
    prefix = root.rstrip("/") + "/"
    return [path[len(prefix):] for path in paths if path.startswith(prefix)]
