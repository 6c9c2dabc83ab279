"""The Python that commands find: the user's, without the virtualenv anges itself runs from in front of it.

Installed into an active virtualenv (`python3 -m venv .venv && . .venv/bin/activate && pip install anges`), anges
would hand every command that venv's `python3`, which has anges' packages and not the project's. A run's commands
get the environment without it (its `bin` off PATH, `VIRTUAL_ENV` unset), unless it is the project's own: it lies in
the working directory, or `keep_anges_venv` says so.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping


def anges_venv() -> str:
    """The virtualenv this Python runs from, resolved ("" when it runs from none)."""
    return os.path.realpath(sys.prefix) if sys.prefix != sys.base_prefix else ""


def without_anges_venv(env: Mapping[str, str], cwd: str, keep: bool = False) -> dict[str, str]:
    """`env` without anges' own virtualenv (its `bin` on PATH, `VIRTUAL_ENV`, a `PYTHONHOME` in it), unless `keep`
    or that virtualenv lies in `cwd` (it is the project's)."""
    venv, out = anges_venv(), dict(env)
    if not venv or keep or _inside(venv, os.path.realpath(cwd)):
        return out
    if "PATH" in out:
        bin_dir = os.path.join(venv, "bin")
        out["PATH"] = os.pathsep.join(entry for entry in out["PATH"].split(os.pathsep)
                                      if not entry or os.path.realpath(entry) != bin_dir)
    if out.get("VIRTUAL_ENV") and os.path.realpath(out["VIRTUAL_ENV"]) == venv:
        del out["VIRTUAL_ENV"]
        out.pop("VIRTUAL_ENV_PROMPT", None)
    if out.get("PYTHONHOME") and _inside(os.path.realpath(out["PYTHONHOME"]), venv):
        del out["PYTHONHOME"]
    return out


def commands_python(env: Mapping[str, str]) -> str:
    """Where a command with the environment `env` finds `python3` ("" when it finds none)."""
    return shutil.which("python3", path=env.get("PATH", os.defpath)) or ""


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
