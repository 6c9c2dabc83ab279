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
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from anges.checkpoints import fast, snapshot
from anges.checkpoints.git import CheckpointsOff, Interrupted, PrivateGit, find_git
from anges.checkpoints.timeline import Entry, Timeline
from anges.config.loading import anges_home
from anges.exceptions import CheckpointError, InvalidStreamId
from anges.store.events import is_valid_id
from anges.util.paths import open_file
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
        self._gits: dict[str, PrivateGit] = {}
        self._timelines: dict[str, Timeline] = {}
        self._lock_fd = -1
        self._mutex = threading.RLock()
        self._depth = 0

    def __del__(self) -> None:
        if getattr(self, "_lock_fd", -1) >= 0:
            os.close(self._lock_fd)

    def git(self, root: str) -> PrivateGit:
        """The private git of one folder (the git it runs checked once: a resolved path outside the folder)."""
        if root not in self._gits:
            self._gits[root] = self._checked_git(root)
        return self._gits[root]

    def _checked_git(self, root: str) -> PrivateGit:
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
        if uid not in self._timelines:
            self._timelines[uid] = Timeline(self.path / "logs" / f"{uid}.jsonl")
        return self._timelines[uid]

    def exists(self) -> bool:
        return self.path.is_dir()

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's lock: one snapshot or undo at a time, across processes (an flock on the lock file,
        kept open), and across this object's threads (a mutex: an flock is the descriptor's, not the thread's)."""
        with self._mutex:
            if self._lock_fd < 0:
                self._lock_fd = open_file(str(self.path / "lock"), os.O_RDWR | os.O_CREAT, parents=True)
            self._depth += 1
            if self._depth == 1:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def snapshots(self, roots: Iterable[str], excludes: Iterable[str] | None = None, watch: bool = False
                  ) -> tuple[dict[str, snapshot.Snapshot], list[str]]:
        """A snapshot of each folder now (the caller holds the lock), and why some could not be taken;
        CheckpointError when none could. With `watch`, from the kernel's events where they can tell
        (`fast.take`), else from git; without, from git, and the folders are no longer watched."""
        taken, errors, off = {}, [], True
        for root in roots:
            inside = None if excludes is None else _inside(excludes, root)
            try:
                taken[root] = self._snapshot(self.git(root), inside, watch)
            except Interrupted:
                raise
            except CheckpointError as exc:
                errors.append(str(exc))
                off = off and isinstance(exc, CheckpointsOff)
        if not taken:
            raise (CheckpointsOff if off else CheckpointError)("; ".join(errors) or "no folder to checkpoint")
        return taken, errors

    def _snapshot(self, git: PrivateGit, excludes: list[str] | None, watch: bool) -> snapshot.Snapshot:
        broken = False
        try:
            found = fast.take(git, self.config.max_file_bytes) if watch else None
        except OSError:  # the store could not be written (a full disk): git looks
            found, broken = None, True
        if found is None:
            if broken or not watch:
                fast.forget(git)  # what it knew may be half updated; `remember` starts it afresh
            try:
                found = snapshot.take(git, self.config.max_file_bytes, self.config.max_files, excludes)
            except OSError as exc:
                raise CheckpointError(f"cannot write the checkpoint store: {exc.strerror or exc}") from None
            if watch:
                try:
                    fast.remember(git, found)
                except (OSError, CheckpointError):
                    fast.forget(git)  # the next checkpoint asks git again
        return found

    def stop_watching(self, roots: Iterable[str]) -> None:
        """The folders' next checkpoints ask git (a run ended): their watches are closed."""
        for root in roots:
            fast.forget(PrivateGit("", self.path, root))

    def take(self, uid: str, kind: str, roots: Iterable[str], excludes: Iterable[str] | None = None,
             watch: bool = False, **facts) -> Entry:
        """Snapshot `roots` and record the snapshot as the next entry of stream `uid`'s timeline (`watch`: see
        `snapshots`); when a run ends, pack the objects its steps left (a few per step) if there are many."""
        with self.lock():
            taken, errors = self.snapshots(roots, excludes, watch)
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
