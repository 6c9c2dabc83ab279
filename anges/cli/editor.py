"""Ctrl-G: the request being written, in your own editor (`$VISUAL`, else `$EDITOR`, else `editor`, `nano`, `vi`),
run outside the sandbox as you chose it. The text goes through a private file (0600, in a 0700 folder of anges'
home, a place the sandbox hides and commands cannot write), never through the shared /tmp or the working
directory, and the file is removed once read back."""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
from collections.abc import Callable

FALLBACKS = ("editor", "nano", "vi")
MAX_BYTES = 10_000_000
"""A longer text read back is cut here."""


def editor_command() -> list[str] | None:
    """The editor's command line (None when no editor is found)."""
    for choice in (os.environ.get("VISUAL"), os.environ.get("EDITOR"), *FALLBACKS):
        if not choice or not choice.strip():
            continue
        words = shlex.split(choice)
        if words and shutil.which(words[0]):
            return words
    return None


def drafts_folder() -> str:
    from anges.config.loading import anges_home

    return str(anges_home() / "drafts")


async def edit(text: str, done: Callable[[str], None], say: Callable[[str], None]) -> None:
    """Open `text` in the editor (the screen set aside meanwhile); `done(new text)` when it exits with 0, else `say`
    why the box is unchanged."""
    from prompt_toolkit.application import run_in_terminal

    from anges.util.paths import make_dirs, open_file, open_nofollow, resolve

    command = editor_command()
    if command is None:
        say("no editor found: set $VISUAL or $EDITOR (the box is unchanged)")
        return
    folder = drafts_folder()
    make_dirs(folder, 0o700)
    path = os.path.join(folder, f"request-{secrets.token_hex(8)}.md")
    fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(text.encode("utf-8", "replace"))
        code = await run_in_terminal(lambda: _run(command, path), in_executor=True)
        if code != 0:
            say(f"{command[0]} exited with {code}: the box is unchanged")
            return
        with os.fdopen(open_nofollow(resolve(path)), "rb") as file:
            edited = file.read(MAX_BYTES).decode("utf-8", "replace")
        done(edited[:-1] if edited.endswith("\n") else edited)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _run(command: list[str], path: str) -> int:
    from anges.cli.keyboard import paused

    try:
        with paused():  # the editor gets the terminal's keys as it knows them
            return subprocess.call([*command, path])
    except OSError as exc:
        return exc.errno or 1
