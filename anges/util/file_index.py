"""The files of a project, as `git ls-files` would list them but without running git (whose configuration, in a
folder the model can write, could run commands): every file under a folder but `.git` and what its `.gitignore`
files ignore, and a fuzzy search over them (`@` mentions in the terminal session)."""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Callable

MAX_FILES = 300_000
"""Files listed at most (a home folder or a disk's root would never end)."""
MAX_IGNORE_BYTES = 200_000
RANKED = 5_000
"""Of more matches than this, only the shortest paths are ranked (a query of two letters matches most files)."""
"""A larger `.gitignore` is not read."""


def project_files(root: str, skip: Callable[[str], bool] = lambda path: False, limit: int = MAX_FILES) -> list[str]:
    """The files under `root` (paths relative to it, `/` between folders, sorted by folder), but `.git`, what the
    `.gitignore` files on the way ignore, and the folders `skip(path)` names (a place the sandbox hides). Links are
    listed, never followed."""
    files: list[str] = []
    stack: list[tuple[str, str, tuple]] = [(root, "", ())]
    while stack and len(files) < limit:
        folder, relative, rules = stack.pop()
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda entry: entry.name, reverse=True)
        except OSError:
            continue
        if any(entry.name == ".gitignore" for entry in entries):
            spec = _ignore_spec(os.path.join(folder, ".gitignore"))
            rules = (*rules, (relative, spec)) if spec is not None else rules
        folders = []
        for entry in reversed(entries):
            path = relative + entry.name
            is_folder = entry.is_dir(follow_symlinks=False)
            if entry.name == ".git" or _ignored(rules, path, is_folder):
                continue
            if is_folder:
                if not skip(entry.path):
                    folders.append((entry.path, path + "/", rules))
            elif len(files) < limit:
                files.append(path)
        stack.extend(reversed(folders))
    return files


def _ignore_spec(path: str) -> tuple[tuple[re.Pattern, bool], ...] | None:
    """The rules of one `.gitignore`, last first: (pattern, ignores) (None when it cannot be read or holds none)."""
    import pathspec

    from anges.util.paths import open_nofollow

    try:
        fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_IGNORE_BYTES + 1)
    if len(data) > MAX_IGNORE_BYTES:
        return None
    spec = pathspec.GitIgnoreSpec.from_lines(data.decode("utf-8", "replace").splitlines())
    rules = tuple((pattern.regex, bool(pattern.include)) for pattern in reversed(spec.patterns)
                  if pattern.include is not None and pattern.regex is not None)
    return rules or None


def _ignored(rules: tuple, path: str, is_folder: bool) -> bool:
    """What the last rule that matches `path`, in the deepest `.gitignore` with one, says."""
    for base, spec in reversed(rules):
        relative = path[len(base):] + ("/" if is_folder else "")
        for pattern, ignores in spec:
            if pattern.match(relative):
                return ignores
    return False


class FileIndex:
    """A project's files and a fuzzy search over them; a query that extends the last one searches its results."""

    def __init__(self, files: list[str]):
        self.files = files
        self._last: tuple[str, list[str], str] = ("", files, "\n".join(files))

    def search(self, query: str, limit: int = 50) -> list[str]:
        """The files whose path holds the letters of `query` in order (any case), best first: the query whole in
        the file's name, then in its path, then its letters in the name, then spread out; a shorter path first."""
        query = query.lower()
        if not query:
            return self.files[:limit]
        last_query, last_found, last_text = self._last
        text = last_text if last_query and query.startswith(last_query) else "\n".join(self.files)
        pattern = re.compile("(?m)^[^\n]*?" + "[^\n]*?".join(re.escape(letter) for letter in query) + "[^\n]*$",
                             re.IGNORECASE)
        found = pattern.findall(text)
        self._last = (query, found, "\n".join(found))
        ranked = heapq.nsmallest(RANKED, found, key=len) if len(found) > RANKED else found  # the shortest, at C speed
        in_name = re.compile(".*?".join(re.escape(letter) for letter in query), re.IGNORECASE)
        return heapq.nsmallest(limit, ranked, key=lambda path: (_tier(path, query, in_name), len(path), path))


def _tier(path: str, query: str, in_name: re.Pattern) -> int:
    """0: the query is in the file's name; 1: in its path; 2: its letters are in the name; 3: spread over the path."""
    lower = path.lower()
    name = lower.rsplit("/", 1)[-1]
    return 0 if query in name else 1 if query in lower else 2 if in_name.search(name) else 3
