"""A private git for one folder's checkpoints: its own git directory, index and settings, objects shared by an
agent tree, and nothing taken from the project, the user or the system.

The project's `.git` is never read or written (GIT_DIR points elsewhere; git never stores a `.git` path), and no
hook, filter, textconv, fsmonitor, pager or config of the project, the user or the system can run or apply: the
environment is built from scratch, every setting that could run something or change bytes is given on the
command line (which wins over any file), and `info/attributes` (which wins over the project's `.gitattributes`)
turns off every conversion.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from anges.exceptions import CheckpointError
from anges.util.paths import make_dirs, open_directory, open_folder_in, resolve, write_file, write_file_in
from anges.util.waiting import wait_for

TRUSTED_GIT_DIRS = ("/usr/bin", "/bin", "/usr/local/bin", "/opt/homebrew/bin", "/run/current-system/sw/bin",
                    "/nix/var/nix/profiles/default/bin")
"""Where git is looked for: never on PATH, which a project's environment may point at a file a command wrote."""
SETTINGS = {
    "core.hooksPath": "",  # the store's empty directory (set per store)
    "core.fsmonitor": "false",
    "core.untrackedCache": "false",
    "core.attributesFile": "/dev/null",
    "core.excludesFile": "/dev/null",
    "core.autocrlf": "false",
    "core.safecrlf": "false",
    "core.symlinks": "true",
    "core.fileMode": "true",
    "core.ignoreCase": "false",
    "core.precomposeUnicode": "false",
    "core.quotePath": "false",
    "core.sparseCheckout": "false",
    "core.splitIndex": "false",
    "core.pager": "cat",
    "core.logAllRefUpdates": "false",
    "gc.auto": "0",
    "maintenance.auto": "false",
    "commit.gpgSign": "false",
    "diff.noprefix": "false",
    "diff.mnemonicPrefix": "false",
    "diff.renames": "false",
    "diff.relative": "false",
    "color.ui": "false",
    "index.threads": "1",
    "protocol.allow": "never",
    "submodule.recurse": "false",
    "status.showUntrackedFiles": "all",
}
"""Given with `-c` to every git command: they win over every configuration file."""
ATTRIBUTES = "* -text -eol -crlf -ident -filter -working-tree-encoding !diff !merge\n"
"""`$GIT_DIR/info/attributes` wins over the project's .gitattributes: no line-ending or encoding conversion, no
filter, no diff or merge driver; files are stored and restored byte for byte."""
class Interrupted(CheckpointError):
    """The run was interrupted while git worked: the command was killed."""


class CheckpointsOff(CheckpointError):
    """No checkpoint can be taken in this run (no git, or a folder with too many files)."""


IDENTITY = {"GIT_AUTHOR_NAME": "anges", "GIT_AUTHOR_EMAIL": "anges@localhost", "GIT_COMMITTER_NAME": "anges",
            "GIT_COMMITTER_EMAIL": "anges@localhost"}


def find_git(configured: str = "") -> str:
    """The git to run: `configured` (an absolute path), else the first in TRUSTED_GIT_DIRS."""
    if configured:
        if not os.path.isabs(configured) or "\0" in configured or not os.access(configured, os.X_OK):
            raise CheckpointsOff(f"checkpoints.git {configured!r} is not an executable absolute path")
        return configured
    for directory in TRUSTED_GIT_DIRS:
        candidate = os.path.join(directory, "git")
        if os.access(candidate, os.X_OK):
            return candidate
    raise CheckpointsOff(f"git was not found in {', '.join(TRUSTED_GIT_DIRS[:3])} (install git, or name it with "
                          "checkpoints.git)")


def root_key(root: str) -> str:
    """The name of a folder's git directory in a store."""
    return hashlib.sha256(os.fsencode(root)).hexdigest()[:16]


class PrivateGit:
    """git commands on one folder (`root`), with the git directory and index of that folder in `store`."""

    def __init__(self, git: str, store: Path, root: str, interrupt: Callable[[], bool] | None = None):
        self.git = git
        self.store = store
        self.root = root
        self.gitdir = store / "roots" / root_key(root)
        self._head_file = str(self.gitdir / "refs" / "heads" / "checkpoints")
        self.interrupt = interrupt or (lambda: False)
        empty = str(store / "empty")
        self.env = {"PATH": "/usr/bin:/bin", "HOME": empty, "XDG_CONFIG_HOME": empty, "LC_ALL": "C",
                    "GIT_DIR": str(self.gitdir), "GIT_WORK_TREE": root, "GIT_INDEX_FILE": str(self.gitdir / "index"),
                    "GIT_OBJECT_DIRECTORY": str(store / "objects"), "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                    "GIT_NO_REPLACE_OBJECTS": "1", "GIT_NO_LAZY_FETCH": "1", **IDENTITY}
        settings = {**SETTINGS, "core.hooksPath": empty}
        self.options = [part for key, value in settings.items() for part in ("-c", f"{key}={value}")]
        self._folders: dict[str, int] = {}
        """Descriptors of the store's folders this object writes into, kept open (see `_folder`)."""

    def __del__(self) -> None:
        for fd in getattr(self, "_folders", {}).values():
            os.close(fd)

    def _folder(self, path: Path) -> int:
        """A descriptor of a folder of the store, opened (and made) once without following a link."""
        fd = self._folders.get(str(path))
        if fd is None:
            fd = self._folders[str(path)] = open_directory(resolve(str(path)), create=True, mode=0o700)
        return fd

    def ensure(self, excludes: list[str] | None = None) -> None:
        """Create the store's shared parts and this folder's git directory if missing; `excludes` (paths relative
        to the folder; None: those given before) are left out of its checkpoints."""
        for directory in (self.store / "empty", self.store / "objects" / "pack", self.gitdir / "refs" / "heads",
                          self.gitdir / "info"):
            make_dirs(str(directory))
        _write_if_changed(self.gitdir / "HEAD", "ref: refs/heads/checkpoints\n")
        _write_if_changed(self.gitdir / "config", "[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
        _write_if_changed(self.gitdir / "info" / "attributes", ATTRIBUTES)
        if excludes is not None or not (self.gitdir / "info" / "exclude").exists():
            _write_if_changed(self.gitdir / "info" / "exclude", "".join(f"/{_pattern(p)}\n" for p in excludes or ()))
        _write_if_changed(self.gitdir / "root", self.root + "\n")

    def run(self, *args: str, stdin: bytes | None = None, check: bool = True, index: Path | None = None) -> bytes:
        """The output of `git ARGS` in the folder (with another `index` file, if given); CheckpointError when it
        fails (or the run is interrupted)."""
        return self.run_with_warnings(*args, stdin=stdin, check=check, index=index)[0]

    def run_with_warnings(self, *args: str, stdin: bytes | None = None, check: bool = True,
                          index: Path | None = None) -> tuple[bytes, bytes]:
        """`run`, and what git said on its standard error."""
        env = self.env if index is None else {**self.env, "GIT_INDEX_FILE": str(index)}
        try:
            process = subprocess.Popen([self.git, *self.options, *args], cwd=self.root, env=env,
                                       stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise CheckpointError(f"cannot run {self.git}: {exc.strerror or exc}") from None
        out, err = self._communicate(process, stdin)
        if check and process.returncode != 0:
            message = err.decode(errors="replace").strip().splitlines()
            raise CheckpointError(f"git {args[0]} failed: {message[-1] if message else process.returncode}")
        return out, err

    def _communicate(self, process: subprocess.Popen, stdin: bytes | None) -> tuple[bytes, bytes]:
        """Wait for `process` (fed `stdin` on a thread: communicate() cannot go on feeding after a timeout), and
        kill it if the run is interrupted meanwhile (or on Ctrl-C)."""
        result: list[tuple[bytes, bytes]] = []
        talk = threading.Thread(target=lambda: result.append(process.communicate(stdin)), daemon=True)
        talk.start()

        def finished(seconds: float) -> bool:
            talk.join(seconds)
            return not talk.is_alive()

        try:
            if wait_for(finished, self.interrupt) == "stopped":
                raise Interrupted("interrupted")
        except BaseException:
            process.kill()
            talk.join()
            raise
        return result[0]

    def commit(self, tree: str, parent: str) -> str:
        """Write a checkpoint commit of `tree` after `parent` ("" for none) and return its id (written here, not by
        `git commit-tree`: one process less per checkpoint)."""
        stamp = f"{IDENTITY['GIT_AUTHOR_NAME']} <{IDENTITY['GIT_AUTHOR_EMAIL']}> {int(time.time())} +0000"
        parents = f"parent {parent}\n" if parent else ""
        body = f"tree {tree}\n{parents}author {stamp}\ncommitter {stamp}\n\ncheckpoint\n".encode()
        return self.write_object("commit", body)

    def write_object(self, kind: str, body: bytes, level: int = 1) -> str:
        """Store a git object (a loose one, as git writes them: `git fsck` reads it) unless it is there; its id."""
        data = b"%s %d\0" % (kind.encode(), len(body)) + body
        name = hashlib.sha1(data).hexdigest()
        folder = open_folder_in(self._folder(self.store / "objects"), name[:2])
        try:
            try:
                os.stat(name[2:], dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                write_file_in(folder, name[2:], zlib.compress(data, level), 0o444)
        finally:
            os.close(folder)
        return name

    def head(self) -> str:
        """The folder's latest checkpoint commit, or "" before the first."""
        try:
            fd = os.open(self._head_file, os.O_RDONLY | os.O_CLOEXEC)  # read before every checkpoint: no Path, no io
        except FileNotFoundError:
            return ""
        try:
            return os.read(fd, 1 << 16).decode(errors="replace").strip()
        finally:
            os.close(fd)

    def set_head(self, commit: str) -> None:
        """Make `commit` the folder's latest checkpoint: it keeps every earlier one reachable."""
        # Written in place (41 bytes, one write): replacing the file by a rename makes ext4 flush it to disk first,
        # which costs milliseconds a step on a busy disk. A ref longer than that (none anges writes) is replaced.
        folder = self._folder(self.gitdir / "refs" / "heads")
        try:
            fd = os.open("checkpoints", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
        except OSError:  # a link (or anything but a file) there: replaced, never written through
            write_file_in(folder, "checkpoints", f"{commit}\n".encode())
            return
        try:
            data = f"{commit}\n".encode()
            if os.fstat(fd).st_size > len(data):
                os.ftruncate(fd, len(data))
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)


def _pattern(path: str) -> str:
    """A path as an exact gitignore pattern (its special characters escaped)."""
    return "".join("\\" + char if char in "\\*?[!# " else char for char in path)


def _write_if_changed(path: Path, text: str) -> None:
    data = text.encode(errors="surrogateescape")  # a folder's name need not be UTF-8
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    write_file(str(path), data)
