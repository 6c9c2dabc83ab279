"""Slash commands of your own: a Markdown file `ANGES_HOME/commands/NAME.md` (`~/.anges/commands/`) is `/NAME`,
whose text is sent as a request, `$ARGUMENTS` replaced by what follows the name. A project's
`.anges/commands/NAME.md` counts too once the user trusted that project's `.anges/` folder (`project_commands`).

Optional front matter, as other agents' command files have it, gives a description and an argument hint:

    ---
    description: review the staged changes
    argument-hint: [FOCUS]
    ---
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection
from dataclasses import dataclass

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
"""A command's name: its file's name without `.md`, in lower case."""
MAX_BYTES = 64_000
"""A larger command file is not read (it says so in /help)."""
MAX_FILES = 200
PLACEHOLDER = "$ARGUMENTS"


@dataclass(frozen=True)
class CustomCommand:
    """One command file as read: its name, what it says of itself, its text (or why it cannot be used)."""

    name: str
    path: str
    text: str = ""
    description: str = ""
    argument_hint: str = ""
    problem: str = ""
    origin: str = "yours"
    """yours (ANGES_HOME/commands) or project (a trusted project's .anges/commands)."""

    def request(self, arguments: str) -> str:
        """The request it sends: its text with `$ARGUMENTS` replaced (appended when it has no placeholder)."""
        if PLACEHOLDER in self.text:
            return self.text.replace(PLACEHOLDER, arguments).strip()
        return f"{self.text.strip()}\n\n{arguments}".strip() if arguments else self.text.strip()

    @property
    def usage(self) -> str:
        return f"/{self.name} {self.argument_hint}".strip()

    @property
    def help(self) -> str:
        where = "~/.anges/commands" if self.origin == "yours" else "the project's .anges/commands"
        return f"{self.problem or self.description or 'a request'} ({where})"


def user_folder() -> str:
    from anges.config.loading import anges_home

    return str(anges_home() / "commands")


def read_folder(folder: str, origin: str = "yours") -> dict[str, CustomCommand]:
    """The command files of `folder` by name (none when it does not exist); a link is not followed."""
    from anges.util.paths import open_nofollow, resolve

    try:
        names = sorted(os.listdir(folder))[:MAX_FILES]
        real_folder = resolve(folder)
    except OSError:
        return {}
    found: dict[str, CustomCommand] = {}
    for file_name in names:
        stem, ext = os.path.splitext(file_name)
        name = stem.lower()
        if ext.lower() != ".md" or not NAME.match(name):
            continue
        path = os.path.join(folder, file_name)
        try:
            fd = open_nofollow(os.path.join(real_folder, file_name), os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            why = "a link (not followed)" if os.path.islink(path) else (exc.strerror or str(exc)).lower()
            found[name] = CustomCommand(name, path, problem=f"not usable: {why}", origin=origin)
            continue
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
                found[name] = CustomCommand(name, path, problem=f"not usable: over {MAX_BYTES:,} bytes or not a "
                                            "file", origin=origin)
                continue
            raw = file.read(MAX_BYTES)
        found[name] = parse(name, path, raw.decode("utf-8", "replace"), origin)
    return found


def parse(name: str, path: str, text: str, origin: str = "yours") -> CustomCommand:
    """A command file's text: its front matter (description, argument-hint), then the request."""
    meta: dict[str, str] = {}
    match = re.match(r"^---[ \t]*\n(.*?)\n---[ \t]*(?:\n|$)", text, re.S)
    if match:
        for line in match.group(1).splitlines():
            key, colon, value = line.partition(":")
            if colon:
                meta[key.strip().lower()] = value.strip().strip("\"'")
        text = text[match.end():]
    first = next((line.strip().lstrip("#").strip() for line in text.splitlines() if line.strip()), "")
    description = meta.get("description") or first
    return CustomCommand(name, path, text, description[:80], meta.get("argument-hint", "")[:40], origin=origin)


def project_commands(cwd: str, safety) -> tuple[dict[str, str], str]:
    """The commands of the project's `.anges/commands/` (NAME -> text) once the user trusted exactly that content,
    and a note when there are some that are not used."""
    from anges.config.trust import TrustStore, load_project
    from anges.exceptions import ConfigError
    from anges.safety.sandbox import SandboxSettings

    try:
        project = load_project(cwd, SandboxSettings.for_run(safety, cwd).can_write)
    except ConfigError as exc:
        return {}, f"the project's commands are not used: {exc}"
    if project is None or not project.commands:
        return {}, ""
    if TrustStore().trusts(project.subject):
        return dict(project.commands), ""
    return {}, (f"the project's {len(project.commands)} commands in {project.root}/.anges/commands are not used "
                "until you trust its .anges folder (anges trust)")


def custom_commands(cwd: str | None, safety, reserved: Collection[str]) -> dict[str, CustomCommand]:
    """Your commands and, with `cwd`, the trusted project's (yours win), but for the `reserved` names (built-in)."""
    found = read_folder(user_folder())
    if cwd is not None:
        texts, _ = project_commands(cwd, safety)
        for name, text in texts.items():
            if NAME.match(name.lower()) and name.lower() not in found:
                found[name.lower()] = parse(name.lower(), f".anges/commands/{name}.md", text, "project")
    return {name: command for name, command in found.items() if name not in reserved}
