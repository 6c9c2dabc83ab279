"""The places a run's safety answers for, besides the credentials: where its commands may write whatever the mode
(`model_places`), which nothing anges runs, imports or reads as configuration outside the sandbox may lie in
(`anges.util.trust.model_writable`); and anges' own places (`own_places`: its home, the config files it read),
which commands never see nor change, whether they exist yet or not."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from anges.util.paths import inside, resolve
from anges.util.trust import model_writable, note_model_places

if TYPE_CHECKING:
    from anges.config.types import Config, SafetyConfig

WORK_FOLDERS = ("data", "batches", "*", "work")
"""Where anges makes folders for commands to work in, inside its home: a batch task's (`BatchState.work_dir`)."""
CODE_SETTINGS = ("prompt.template_dir",)
"""Configuration that names code anges runs in its own process (a template is code: Jinja2 reaches Python objects).
The programs it runs are checked where they start: `safety.bwrap` (`sandbox.bwrap_problem`), `checkpoints.git`
(`CheckpointStore.git`)."""


def model_places(safety: SafetyConfig, *cwds: str) -> tuple[str, ...]:
    """Where commands of runs in `cwds` may write, in any mode (a read-only run's folder is a workspace run's too):
    each working directory and `safety.writable_paths` (relative ones under it, those reached through a link too),
    resolved. They are remembered for the rest of the process (`note_model_places`)."""
    found = []
    for cwd in cwds:
        found.append(resolve(cwd))
        found += [resolve(os.path.join(cwd, os.path.expanduser(path))) for path in safety.writable_paths]
    places = tuple(dict.fromkeys(found))
    note_model_places(places)
    return places


def own_places() -> list[str]:
    """anges' own places, resolved: its home (conversations, checkpoints, config, the web chat's keys) and the config
    files it read (`--config`, `$ANGES_CONFIG`, the MCP config files). The home is made (private) if it does not exist
    yet, so the sandbox can hide it rather than seal the folder it would be made in."""
    from anges.config.loading import anges_home
    from anges.store.fileops import make_private_dirs
    from anges.util.masking import secret_files

    home = anges_home()
    try:
        make_private_dirs(home)
    except OSError:
        pass  # a read-only place: where it would be made stays sealed instead (see `SandboxSettings.sealed`)
    named = [os.environ.get("ANGES_CONFIG", "")]
    places = [str(home), *secret_files(), *(os.path.expanduser(path) for path in named if path)]
    return list(dict.fromkeys(resolve(place) for place in places))


def own_place_of(path: str) -> str:
    """The own place that holds `path` (resolved), "" when none does or it lies in a folder anges made for commands
    to work in (a batch task's)."""
    from anges.config.loading import anges_home

    home = resolve(str(anges_home()))
    holding = next((place for place in own_places() if inside(path, place)), "")
    if holding == home and path != home:
        parts = os.path.relpath(path, home).split(os.sep)
        if len(parts) > len(WORK_FOLDERS) and all(want in ("*", part) for want, part in zip(WORK_FOLDERS, parts)):
            return ""
    return holding


def untrusted_configuration(config: Config, places: tuple[str, ...]) -> str:
    """Why a run may not start with `config` ("" when it may): a setting of `CODE_SETTINGS` names a place commands
    may write (`places`, or those of another run of this process), so a command could change what it runs."""
    for name in CODE_SETTINGS:
        section, _, key = name.partition(".")
        path = str(getattr(getattr(config, section), key) or "")
        why = model_writable(path, places) if path else ""
        if why:
            return (f"{name} {path} is code anges runs in its own process, outside the sandbox, and {why}: a command "
                    f"could change it. Keep it out of the folders anges works in")
    return ""
