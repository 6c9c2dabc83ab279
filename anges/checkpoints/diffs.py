"""What changed between two checkpoints of the folders they cover: the files, and a unified diff with a stat."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from anges.checkpoints.git import PrivateGit

STATUS_NAMES = {"A": "added", "D": "deleted", "M": "modified", "T": "modified"}
TEXT = ("diff-tree", "-r", "-p", "--stat=120,100", "--summary", "--no-renames", "--no-ext-diff", "--no-textconv",
        "--no-color")


@dataclass(frozen=True)
class FileChange:
    """One file that differs between two checkpoints."""

    root: str
    name: str
    """The path inside `root`."""
    status: str
    """added, deleted or modified (its content, its mode or its type)."""
    mode: str = ""
    """The file's mode in the later checkpoint (100644, 100755, 120000 for a link; "" when deleted)."""
    blob: str = ""
    """Its content's id in the later checkpoint."""

    def shown(self, cwd: str) -> str:
        """The path as a person reads it: relative to `cwd` when inside it."""
        full = os.path.join(self.root, self.name)
        shown = os.path.relpath(full, cwd) if cwd and (full + "/").startswith(cwd.rstrip("/") + "/") else full
        return shown + "/" if self.name.endswith("/") else shown  # a whole folder (ignored, a repository)


@dataclass
class Diff:
    """The difference between two states of the covered folders."""

    files: list[FileChange] = field(default_factory=list)
    text: str = ""
    """The stat (one line per file, then "N files changed, ...") and the unified diff (what `git apply` reads)."""
    not_covered: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) of what the checkpoints at either end left out: changes there are not in this diff."""

    @property
    def stat_line(self) -> str:
        """"3 files changed, 10 insertions(+), 2 deletions(-)", or "no changes"."""
        lines = [line for line in self.text.splitlines() if " changed" in line and line.startswith(" ")]
        return lines[-1].strip() if lines else "no changes"


def changes(git: PrivateGit, before: str, after: str) -> list[FileChange]:
    """The files that differ between two commits of one folder."""
    if before == after:
        return []
    parts = git.run("diff-tree", "-r", "-z", "--raw", "--no-renames", before, after).split(b"\0")
    found = []
    for head, path in zip(parts[0::2], parts[1::2]):
        fields = head.decode().lstrip(":").split()
        if len(fields) != 5:
            continue
        new_mode, blob, status = fields[1], fields[3], fields[4][:1]
        found.append(FileChange(git.root, os.fsdecode(path), STATUS_NAMES.get(status, "modified"),
                                "" if status == "D" else new_mode, "" if status == "D" else blob))
    return found


def diff_text(git: PrivateGit, before: str, after: str, cwd: str) -> str:
    """The stat and unified diff between two commits of one folder; paths outside `cwd` are shown whole."""
    if before == after:
        return ""
    inside = (git.root + "/").startswith(cwd.rstrip("/") + "/")
    where = os.path.relpath(git.root, cwd) if inside else git.root.lstrip("/")
    prefix = "" if where == "." else where.rstrip("/") + "/"
    text = git.run(*TEXT, f"--src-prefix=a/{prefix}", f"--dst-prefix=b/{prefix}", before, after)
    return os.fsdecode(text) if not prefix else f"# {git.root}\n{os.fsdecode(text)}"
