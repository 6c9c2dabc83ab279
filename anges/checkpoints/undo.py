"""Planning an undo (what it changes, what it leaves alone, whose changes it would overwrite) and applying it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

from anges.checkpoints.diffs import Diff, FileChange, changes, diff_text
from anges.checkpoints.git import PrivateGit
from anges.checkpoints.restore import write_back
from anges.checkpoints.snapshot import LeftOut, Snapshot
from anges.checkpoints.timeline import Entry


@dataclass(frozen=True)
class Conflict:
    """A file an undo would overwrite that someone other than the agent changed, or whose content now is not saved."""

    path: str
    why: str


@dataclass
class Restore:
    """What an undo does in one folder: from its state now to the checkpoint's, some paths left as they are."""

    git: PrivateGit
    now: Snapshot
    target: str
    """The commit or tree to restore: the checkpoint's, plus the kept paths as they are now."""
    changes: list[FileChange] = field(default_factory=list)
    left_alone: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) of files present now and not at the checkpoint that the undo keeps."""
    conflicts: list[tuple[str, str]] = field(default_factory=list)


def plan_restore(git: PrivateGit, to: Entry, later: list[Entry], now: Snapshot) -> Restore:
    """How to bring one folder back to checkpoint `to`, given the entries taken after it and its snapshot now."""
    checkpoint = to.roots[git.root]
    since = changes(git, checkpoint, now.commit)
    same_rules = not any(os.path.basename(change.name) == ".gitignore" for change in since)
    restore = Restore(git, now, checkpoint)
    kept = []
    for change in since:
        if change.status == "added":
            why = _kept(change.name, to.left_out_of(git.root), same_rules)
            if why:
                restore.left_alone.append((change.name, why))
                kept.append(change)
        elif change.status == "deleted" and (why := _unsaved(git.root, change.name, now.left_out)):
            restore.conflicts.append((change.name, why))
    if kept:
        restore.target = _with_kept(git, checkpoint, kept)
    restore.changes = changes(git, now.commit, restore.target)
    restore.left_alone += _not_covered(to.left_out_of(git.root), now.left_out, {name for name, _ in restore.conflicts})
    touched = {change.name for change in restore.changes}
    for name in sorted(_foreign(git, to, later, now) & touched):
        restore.conflicts.append((name, "changed after the checkpoint by someone other than the agent"))
    return restore


def apply_restore(restore: Restore) -> list[str]:
    """Write the folder's files as the plan says, never through a link (`restore.write_back`); what failed."""
    return write_back(restore.git, restore.changes)


def plan_token(restores: list[Restore]) -> str:
    """What a plan was made against: an undo applies only if the files are still as they were then."""
    state = "\n".join(f"{r.git.root}\0{r.now.commit}\0{r.target}" for r in restores)
    return hashlib.sha256(state.encode(errors="surrogateescape")).hexdigest()[:16]


def plan_diff(restores: list[Restore], cwd: str) -> Diff:
    """The files an undo changes and the diff it applies."""
    files = [change for restore in restores for change in restore.changes]
    text = "".join(diff_text(r.git, r.now.commit, r.target, cwd) for r in restores if r.changes)
    return Diff(files, text)


def _not_covered(then: LeftOut, now: LeftOut, conflicts: set[str]) -> list[tuple[str, str]]:
    """What the undo cannot reach: ignored files and repositories that appeared since the checkpoint, and files
    over the size limit now."""
    found = [(path, "ignored (.gitignore): checkpoints do not cover it") for path in now.ignored
             if path not in then.ignored]
    found += [(path, f"over the size limit ({size:,} bytes): checkpoints do not cover it")
              for path, size in now.too_big if path not in conflicts]
    found += [(path, "a repository of its own: checkpoints do not cover it") for path in now.repos
              if path not in then.repos]
    found += [(path, "anges may not read it: checkpoints do not cover it") for path in now.unreadable]
    found += [(path, "a FIFO, socket or device: checkpoints do not cover it") for path in now.special]
    return found


def _kept(name: str, left_out: LeftOut, same_rules: bool) -> str:
    """Why a file absent from a checkpoint but present now stays: it was left out of the checkpoint, not absent."""
    if any(name == path for path, _ in left_out.too_big):
        return "it was over the size limit at the checkpoint"
    if _under(name, left_out.repos):
        return "it was inside a repository of its own at the checkpoint"
    if _under(name, left_out.unreadable):
        return "anges could not read it at the checkpoint"
    if not same_rules and _under(name, left_out.ignored):
        return "it was ignored (.gitignore) at the checkpoint"
    if left_out.more and not same_rules:
        return "the checkpoint cannot tell whether it was there"
    return ""


def _unsaved(root: str, name: str, left_out: LeftOut) -> str:
    """Why a file the checkpoint holds is missing from the snapshot now though it exists: what it holds now is
    not saved anywhere, so restoring it would overwrite that for good."""
    if not os.path.lexists(os.path.join(root, name)):
        return ""
    if any(name == path for path, _ in left_out.too_big):
        return "it is over the size limit now, so what it holds now is not saved"
    if _under(name, left_out.repos):
        return "it is inside a repository of its own now"
    if _under(name, left_out.ignored):
        return "it is ignored (.gitignore) now, so what it holds now is not saved"
    if _under(name, left_out.unreadable):
        return "anges may not read it now, so what it holds now is not saved"
    return ""


def _under(name: str, listed: list[str]) -> bool:
    """Whether `name` is one of `listed` (paths as git lists them) or inside one of its folders (ending with /)."""
    return any(name == path or (path.endswith("/") and name.startswith(path)) for path in listed)


def _with_kept(git: PrivateGit, checkpoint: str, kept: list[FileChange]) -> str:
    """A tree: the checkpoint's, plus the kept files as they are now (built in a scratch index)."""
    scratch = git.gitdir / "index.undo"
    try:
        git.run("read-tree", checkpoint, index=scratch)
        lines = b"".join(f"{change.mode} {change.blob}\t".encode() + os.fsencode(change.name) + b"\0"
                         for change in kept)
        git.run("update-index", "-z", "--index-info", stdin=lines, index=scratch)
        return git.run("write-tree", index=scratch).decode().strip()
    finally:
        scratch.unlink(missing_ok=True)


def _foreign(git: PrivateGit, to: Entry, later: list[Entry], now: Snapshot) -> set[str]:
    """The files changed after `to` while no step of the agent ran: between the end of a run (or of an undo) and
    the next checkpoint, or now."""
    chain = [entry.roots.get(git.root) for entry in (to, *later)] + [now.commit]
    kinds = [entry.kind for entry in (to, *later)]
    found: set[str] = set()
    for kind, before, after in zip(kinds, chain, chain[1:]):
        if kind == "end" and before and after:
            found.update(change.name for change in changes(git, before, after))
    return found
