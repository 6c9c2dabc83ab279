"""The project's instructions for agents: the AGENTS.md files of the working directory and its parents."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from anges.util.masking import mask_secrets
from anges.util.paths import open_nofollow, resolve

FILE_NAME = "AGENTS.md"


@dataclass(frozen=True)
class ProjectFile:
    """One AGENTS.md as the prompt shows it."""

    path: str
    text: str = ""
    cut: bool = False
    """True when the limit left out the end of the file (or all of it, when `text` is empty)."""
    error: str = ""
    """Why the file could not be read ("" when it was)."""
    stamp: tuple[int, int] | None = None
    """The file's size and modification time (ns) when it was read: whether it changed since (`changed`)."""

    def facts(self) -> dict:
        """What a request's event records of it: `path`, `chars`, `cut`, `error`, `stamp`."""
        return {"path": self.path, "chars": len(self.text), "cut": self.cut, "error": self.error,
                "stamp": list(self.stamp) if self.stamp else None}


def file_stamp(stat: os.stat_result) -> tuple[int, int]:
    """A file's size and modification time (ns): what tells it changed."""
    return stat.st_size, stat.st_mtime_ns


def changed(path: str, stamp: list | tuple | None) -> str:
    """How the file at `path` differs from when it was read with `stamp`: "changed", "gone" or "" (as it was, or
    nothing to compare)."""
    if not stamp:
        return ""
    try:
        return "" if file_stamp(os.stat(path)) == tuple(stamp) else "changed"
    except OSError:
        return "gone"


def project_directories(cwd: str | os.PathLike) -> list[Path]:
    """The repository root (the nearest directory up that holds `.git`) and each directory down to `cwd`; only
    `cwd` when it is in no repository."""
    start = Path(cwd).resolve()
    chain = [start, *start.parents]
    root = next((directory for directory in chain if (directory / ".git").exists()), None)
    return list(reversed(chain[: chain.index(root) + 1])) if root is not None else [start]


def find_agents_md(cwd: str | os.PathLike) -> list[Path]:
    """The AGENTS.md files of `project_directories`, nearest last."""
    return [directory / FILE_NAME for directory in project_directories(cwd) if (directory / FILE_NAME).is_file()]


def read_agents_md(cwd: str | os.PathLike, limit: int, secrets: list[str],
                   hidden: Callable[[str], bool] = lambda path: False) -> list[ProjectFile]:
    """The AGENTS.md files of `find_agents_md`, their secrets masked, within `limit` characters together: the
    nearest file is kept first, so a farther one is cut at its end, or left out when no room is left.

    A command may have made one a link: a link to a file outside the project is not followed (a checkout could
    point one at a key file), nor one to a place `hidden` from commands (a `.env` in `safety.hidden_paths`, ~/.ssh
    in a home kept in git); the file is read where the link led when checked, no symlink followed after that.
    """
    margin = max((len(secret) for secret in secrets), default=0)  # masked before the cut: no fragment is left
    room, files, top = limit, [], project_directories(cwd)[0]
    for path in reversed(find_agents_md(cwd)):
        try:
            real = resolve(str(path))
        except OSError as exc:
            files.append(ProjectFile(str(path), error=exc.strerror or str(exc)))
            continue
        if not Path(real).is_relative_to(top):
            files.append(ProjectFile(str(path), error="a link to a file outside the project, not followed"))
            continue
        if hidden(real):
            files.append(ProjectFile(str(path), error="a link to a place hidden from commands, not read"))
            continue
        try:
            with os.fdopen(open_nofollow(real, os.O_RDONLY | os.O_NONBLOCK), encoding="utf-8",
                           errors="replace") as stream:
                stamp = file_stamp(os.fstat(stream.fileno()))
                text = mask_secrets(stream.read(room + 1 + margin), secrets) if room > 0 else ""
                more = len(text) > room or bool(stream.read(1))
        except OSError as exc:
            files.append(ProjectFile(str(path), error=exc.strerror or str(exc)))
            continue
        text = text[:room]
        room -= len(text)
        files.append(ProjectFile(str(path), text, cut=more, stamp=stamp))
    return files[::-1]
