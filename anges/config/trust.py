"""Trusted content: what anges runs outside the sandbox although the model could have written it, once the user has
trusted those exact bytes (a project's `.anges/` folder: its hooks, its commands; a hook's script, an MCP server's
program or script, where commands may write).

As direnv does: trusting keeps a digest of the content in ANGES_HOME/trust; content that changed is not trusted
until the user agrees again. Nothing here asks anyone: the run asks through its approval channel
(`anges.safety.trusting`), `anges trust` on the terminal. To use a project's content (its commands, say):

    project = load_project(cwd, SandboxSettings.for_run(config.safety, cwd).can_write)
    if project is not None and TrustStore().trusts(project.subject):
        ...  # project.hooks, project.commands: exactly the bytes the user trusted
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from anges.exceptions import ConfigError
from anges.util.paths import open_directory, open_nofollow, resolve, write_file_in

if TYPE_CHECKING:
    from anges.config.types import HookConfig

PROJECT_DIR = ".anges"
"""A project's own folder: its `config.yaml` (hooks) and `commands/*.md`."""
MAX_FILE_BYTES = 1_000_000_000
"""A larger file cannot be trusted (it is not read)."""
MAX_FILES = 200
"""A project folder with more files than this cannot be trusted."""
TEXT_BYTES = 1_000_000
"""A larger file is shown by its size and digest, not its text."""
SHOWN_FILE_CHARS = 16_000
"""A text file longer than this is too long for a question: `anges trust` shows it, and trusts it."""

Writable = Callable[[str], bool]
"""Whether commands of the run may write a path (resolved): `SandboxSettings.can_write`."""


@dataclass(frozen=True)
class Piece:
    """One file trusted content covers: where, the digest of its exact bytes, and its text when it is text (a
    problem instead when it cannot be read as it is)."""

    path: str
    digest: str = ""
    size: int = 0
    text: str | None = None
    """Its text (None: not text, or unreadable)."""
    problem: str = ""

    def shown(self, whole: bool = True) -> str:
        """The file as a person reads it before trusting it: its text (up to SHOWN_FILE_CHARS unless `whole`), or
        what it is: its size and digest."""
        if self.problem:
            return f"--- {self.path}: {self.problem}"
        head = f"--- {self.path} ({self.size} bytes, sha256 {self.digest[:16]})"
        if self.text is None:
            return f"{head}: not text"
        if not whole and len(self.text) > SHOWN_FILE_CHARS:
            return f"{head}: too long to show here (anges trust shows it)"
        return f"{head}\n{self.text.rstrip(chr(10))}"

    @property
    def fits(self) -> bool:
        """All of it can be shown in a question."""
        return self.text is None or len(self.text) <= SHOWN_FILE_CHARS


@dataclass(frozen=True)
class Subject:
    """Something to trust: what it is, the text a person reads before trusting it, and the files it covers."""

    kind: str
    """project (a project's `.anges/` folder), hook (a configured hook that names a file there) or mcp_server."""
    key: str
    """Where: the project's folder, or the server's name and the command it runs."""
    title: str
    """One line: `the hooks and commands of /work/app/.anges`."""
    definition: str
    """What runs, as configured (the hooks, the server's command line)."""
    pieces: tuple[Piece, ...] = ()
    folder: str = "."
    """The working directory it is for (what `anges trust` takes)."""

    @property
    def digest(self) -> str:
        """The digest of its exact content: the definition and every file, by path."""
        parts = [self.kind, self.key, self.definition, *(f"{p.path}\0{p.digest}\0{p.problem}" for p in self.pieces)]
        return hashlib.sha256("\0\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()

    @property
    def problem(self) -> str:
        """Why it cannot be trusted ("" when it can): a file that cannot be read as it is."""
        return next((f"{piece.path}: {piece.problem}" for piece in self.pieces if piece.problem), "")

    @property
    def fits(self) -> bool:
        """All of it can be shown in a question (else only `anges trust` shows it whole)."""
        return all(piece.fits for piece in self.pieces)

    def text(self, whole: bool = True) -> str:
        """All of it as a person reads it before trusting it (a long text file cut unless `whole`)."""
        return "\n".join([self.definition.rstrip("\n"), *(piece.shown(whole) for piece in self.pieces)])

    def unchanged(self) -> bool:
        """True when every file it covers still holds the bytes it was made from (read again now)."""
        return all(read_piece(piece.path).digest == piece.digest for piece in self.pieces)


@dataclass(frozen=True)
class Project:
    """A project's `.anges/` folder as read once: the hooks of its `config.yaml`, its commands, and the subject a
    user trusts (all of its files, and the files in writable places its hooks name)."""

    root: str
    """The folder that holds `.anges/`."""
    subject: Subject
    hooks: tuple[HookConfig, ...] = ()
    commands: dict[str, str] = field(default_factory=dict)
    """`commands/NAME.md` by NAME: the text of each."""


class TrustStore:
    """The digests of the content the user trusted: one small file each in ANGES_HOME/trust."""

    def __init__(self, root: str | os.PathLike | None = None):
        if root is None:
            from anges.config.loading import anges_home

            root = anges_home() / "trust"
        self.root = Path(root)

    def trusts(self, subject: Subject) -> bool:
        """True when the user trusted exactly this content."""
        if subject.problem:
            return False
        entry = self._read(self._name(subject))
        return entry is not None and entry.get("digest") == subject.digest and entry.get("key") == subject.key

    def trust(self, subject: Subject) -> None:
        """Remember that the user trusts exactly this content."""
        if subject.problem:
            raise ConfigError(f"{subject.title} cannot be trusted: {subject.problem}")
        entry = {"kind": subject.kind, "key": subject.key, "title": subject.title, "digest": subject.digest,
                 "folder": subject.folder, "trusted_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        directory = open_directory(self._real_root(), create=True)
        try:
            write_file_in(directory, self._name(subject), json.dumps(entry).encode())
        finally:
            os.close(directory)

    def entries(self) -> list[dict]:
        """Everything trusted, oldest first."""
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            return []
        found = [entry for name in names if name.endswith(".json") and (entry := self._read(name)) is not None]
        return sorted(found, key=lambda entry: str(entry.get("trusted_at", "")))

    def forget(self, folder: str) -> list[dict]:
        """Stop trusting what was trusted for runs in `folder` (its project's `.anges/`, MCP servers); what was."""
        forgotten = []
        for name in sorted(os.listdir(self.root)) if self.root.is_dir() else []:
            entry = self._read(name)
            if entry is not None and entry.get("folder") == folder:
                os.unlink(self.root / name)
                forgotten.append(entry)
        return forgotten

    def _name(self, subject: Subject) -> str:
        return hashlib.sha256(f"{subject.kind}\0{subject.key}".encode("utf-8", "surrogateescape")).hexdigest()[:40] \
            + ".json"

    def _real_root(self) -> str:
        return os.path.join(resolve(str(self.root.parent)), self.root.name)

    def _read(self, name: str) -> dict | None:
        try:
            fd = open_nofollow(os.path.join(self._real_root(), name))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as file:
            raw = file.read(64_000)
        try:
            entry = json.loads(raw)
        except ValueError:
            return None
        return entry if isinstance(entry, dict) else None


def read_piece(path: str) -> Piece:
    """A file's digest and text, read without following a symlink (a link is not content: it is refused)."""
    try:
        fd = open_nofollow(resolve(os.path.dirname(path)) + os.sep + os.path.basename(path),
                           os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        why = "a symbolic link (not followed)" if os.path.islink(path) else (exc.strerror or str(exc)).lower()
        return Piece(path, problem=why)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            return Piece(path, problem="not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            return Piece(path, problem=f"over {MAX_FILE_BYTES:,} bytes")
        digest, size, kept = hashlib.sha256(), 0, bytearray()
        while chunk := file.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
            if size <= TEXT_BYTES:
                kept += chunk
    try:
        text: str | None = bytes(kept).decode("utf-8") if size <= TEXT_BYTES and b"\0" not in kept else None
    except UnicodeDecodeError:
        text = None
    return Piece(path, digest.hexdigest(), size, text)


COMMAND_TEXT = frozenset(" \t\n;&|()<>`")
"""A word holding one of these may be a command string (`sh -c '...'`): its words are looked at too."""
NESTING = 3
"""How deep command strings within command strings are looked at."""
RUNNERS = frozenset(("npx", "bunx", "pnpx", "pnpm", "npm", "yarn", "bun", "uv", "uvx", "poetry", "pipenv", "pdm",
                     "hatch"))
"""Programs that run a program they find in the project (`npx NAME`: node_modules/.bin/NAME; `uv run NAME`:
.venv/bin/NAME), as the project's files say."""
PROJECT_FILES = ("package.json", "pyproject.toml", "Pipfile")
"""The files that tell a runner what to run."""


def named_files(argv: list[str], cwd: str, writable: Writable, depth: int = 0) -> list[str]:
    """The files one command may run from where commands may write (resolved), best effort and on the safe side:
    every word that names an existing file there (after $PWD, $NAME and ~ are expanded), or a program found on
    PATH there; a Python package folder's modules; the modules of `python -m a.b`; and the same for the words of a
    command string (`sh -c '...'`). Code a program loads without naming it (a module Python imports from its
    folder, the tests pytest collects) is not found."""
    words = [word for word in argv if word and "\0" not in word]
    candidates: list[str] = []
    try:
        on_path = _writable_path_dirs(os.environ.get("PATH", ""), cwd, writable)
    except TypeError:  # a `writable` that cannot be a cache key
        on_path = _writable_path_dirs.__wrapped__(os.environ.get("PATH", ""), cwd, writable)
    for index, word in enumerate(words):
        expanded = _expand(word, cwd)
        candidates += [expanded, expanded.partition("=")[2]] if expanded.startswith("-") else [expanded]
        if os.sep not in word:
            candidates += [os.path.join(folder, word) for folder in on_path]
        if index and words[index - 1] == "-m":
            candidates += _module_files(word)
        if os.path.basename(word) in RUNNERS:
            candidates += _runners_files(words[index + 1:], cwd, writable)
        if depth < NESTING and set(word) & COMMAND_TEXT:
            candidates += [path for inner in command_words(word)
                           for path in named_files(inner, cwd, writable, depth + 1)]
    found: list[str] = []
    for candidate in candidates:
        for real in _code_at(candidate, cwd):
            if writable(real) and real not in found:
                found.append(real)
    return found


@functools.lru_cache(maxsize=32)
def _writable_path_dirs(path: str, cwd: str, writable: Writable) -> tuple[str, ...]:
    """The folders of `path` (PATH) where commands may write (a program found there could be the model's); an empty
    entry is `cwd`."""
    found: list[str] = []
    for entry in path.split(os.pathsep):
        try:
            folder = resolve(os.path.join(cwd, entry))
        except (OSError, ValueError):
            continue
        if writable(folder) and folder not in found:
            found.append(folder)
    return tuple(found)


def _expand(word: str, cwd: str) -> str:
    """A word as the shell would use it as a path: $PWD (${PWD}) is `cwd`, $NAME from the environment, ~ home."""
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return cwd if name == "PWD" else os.environ.get(name, "")
    return os.path.expanduser(re.sub(r"\$(\w+)|\$\{(\w+)\}", value, word))


def _runners_files(after: list[str], cwd: str, writable: Writable) -> list[str]:
    """What a runner (`npx NAME`, `uv run NAME`) may run from the project in `cwd` or a folder above it that commands
    may write: node_modules/.bin/NAME and .venv/bin/NAME for each word after it, and the project's files."""
    names = [word for word in after if not word.startswith("-") and os.sep not in word]
    folders, folder = [], resolve(cwd)
    while writable(folder) and folder not in folders:
        folders.append(folder)
        folder = os.path.dirname(folder)
    places = [os.path.join(bin_dir, name) for name in names for bin_dir in (os.path.join("node_modules", ".bin"),
                                                                             os.path.join(".venv", "bin"))]
    return [os.path.join(folder, place) for folder in folders for place in [*places, *PROJECT_FILES]]


def _module_files(dotted: str) -> list[str]:
    """What `python -m a.b` may run from its folder: a.py, a/__init__.py, a/b.py, a/b/__init__.py, a/b/__main__.py."""
    parts = [part for part in dotted.split(".") if part]
    files = []
    for end in range(1, len(parts) + 1):
        module = os.path.join(*parts[:end])
        files += [f"{module}.py", os.path.join(module, "__init__.py")]
    return [*files, os.path.join(*parts, "__main__.py")] if parts else []


def _code_at(candidate: str, cwd: str) -> list[str]:
    """The files `candidate` (relative to `cwd`) names, resolved: a file, or a Python package folder's modules (the
    folder itself, which cannot be trusted, when it holds more than MAX_FILES)."""
    if not candidate or not os.path.lexists(os.path.join(cwd, candidate)):
        return []
    try:
        real = resolve(os.path.join(cwd, candidate))
    except (OSError, ValueError):
        return []
    if os.path.isfile(real):
        return [real]
    if not any(os.path.isfile(os.path.join(real, name)) for name in ("__init__.py", "__main__.py")):
        return []
    modules, seen = [], 0
    for top, dirs, files in os.walk(real):
        dirs.sort()
        seen += len(files) + len(dirs)
        modules += [os.path.join(top, name) for name in sorted(files) if name.endswith(".py")]
        if len(modules) > MAX_FILES or seen > 10 * MAX_FILES:
            return [real]
    return modules


def command_words(command: str) -> list[list[str]]:
    """The simple commands of a shell command, as words (redirections left out), best effort: a quote left open
    splits by spaces."""
    command = re.sub(r"\$\(\s*pwd\s*\)|`\s*pwd\s*`", "$PWD", command)
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        tokens = command.split()
    commands: list[list[str]] = [[]]
    redirected = False
    for token in tokens:
        if token and set(token) <= set(";&|()") and token not in ("&>",):
            commands.append([])
        elif token and set(token) <= set("<>&|"):
            redirected = True
        elif redirected:
            redirected = False  # what a redirection reads or writes is data, not code
        else:
            commands[-1].append(token)
    return [words for words in commands if words]


def command_subject(kind: str, key: str, title: str, commands: list[list[str]], cwd: str, writable: Writable,
                    definition: str) -> Subject | None:
    """The subject to trust before running `commands` (as `definition` says them) in `cwd`, when they run code from
    where commands may write; else None."""
    files = dict.fromkeys(path for argv in commands for path in named_files(argv, cwd, writable))
    if not files:
        return None
    shown = f"In {cwd}, this runs outside the sandbox, with your rights:\n{definition}"
    return Subject(kind, key, title, shown, tuple(read_piece(path) for path in files), cwd)


def hook_subject(hook: HookConfig, cwd: str, writable: Writable) -> Subject | None:
    """What to trust before a configured hook runs in `cwd`: the files in writable places its command names (None
    when it names none)."""
    label, cwd = hook.name or " ".join(hook.command.split()), resolve(cwd)
    return command_subject("hook", f"{hook.event}: {hook.command} in {cwd}", f"the hook `{label}`",
                           command_words(hook.command), cwd, writable, f"{hook.event}: {hook.command}")


def project_root(cwd: str) -> str | None:
    """The folder whose `.anges/` a run in `cwd` uses: the nearest from `cwd` up to the top of its repository (or
    `cwd` alone, outside one) that holds it; None when none does, or it is ANGES_HOME itself (the user's own)."""
    from anges.config.loading import anges_home

    start = resolve(cwd)
    chain = [start]
    while not os.path.exists(os.path.join(chain[-1], ".git")) and os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    if not os.path.exists(os.path.join(chain[-1], ".git")):
        chain = [start]
    home = resolve(str(anges_home()))
    for folder in chain:
        candidate = os.path.join(folder, PROJECT_DIR)
        if os.path.lexists(candidate):
            return folder if resolve(candidate) != home else None
    return None


def load_project(cwd: str, writable: Writable) -> Project | None:
    """The project's `.anges/` folder for a run in `cwd` (None when there is none), read once: nothing in it is
    used before the user trusts its subject. ConfigError when its config.yaml is not valid."""
    root = project_root(cwd)
    if root is None:
        return None
    folder = os.path.join(root, PROJECT_DIR)
    pieces = _folder_pieces(folder)
    config = next((piece for piece in pieces if piece.path == os.path.join(folder, "config.yaml")), None)
    hooks: tuple[HookConfig, ...] = ()
    if config is not None and config.text is not None:
        from anges.config.loading import project_hooks

        hooks = tuple(project_hooks(config.text.encode("utf-8"), config.path))
    named = [path for hook in hooks for argv in command_words(hook.command)
             for path in named_files(argv, root, writable) if not path.startswith(folder + os.sep)]
    pieces += [read_piece(path) for path in dict.fromkeys(named)]
    definition = "\n".join(f"{hook.event}: {hook.command}" for hook in hooks) or "(no hooks)"
    subject = Subject("project", folder, f"the hooks and commands of {folder}",
                      f"In {root}, these run outside the sandbox, with your rights:\n{definition}", tuple(pieces), root)
    commands = {Path(piece.path).stem: piece.text for piece in pieces
                if piece.text is not None and os.path.dirname(piece.path) == os.path.join(folder, "commands")
                and piece.path.endswith(".md")}
    return Project(root, subject, hooks, commands)


def _folder_pieces(folder: str) -> list[Piece]:
    """Every file under `folder`, sorted; a link (a file or a folder) is a piece that cannot be trusted."""
    if os.path.islink(folder):
        return [Piece(folder, problem="a symbolic link (not followed)")]
    pieces: list[Piece] = []
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            if len(pieces) >= MAX_FILES:
                return [*pieces, Piece(folder, problem=f"more than {MAX_FILES} files")]
            pieces.append(read_piece(os.path.join(top, name)))
    return pieces
