"""The trust boundary's one test on the host side: whatever commands of a run may write is data. A program anges
runs, code it imports and a file it reads as configuration outside the sandbox must not lie there, nor be reached
through a link that lies there (a command could point it elsewhere). Every such place asks `model_writable`.

Which places commands may write is each run's (its working directory and writable paths, whatever its mode); the
places of every run this process started are remembered (`note_model_places`), so a web chat's or a batch task's
folder counts for the others, and for what runs outside any run (the web chat's sandbox line).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

from anges.util.paths import inside, link_in, resolve

_noted: dict[str, None] = {}
_lock = threading.Lock()


def note_model_places(places: Iterable[str]) -> None:
    """Remember directories (resolved) that commands of a run of this process may write."""
    with _lock:
        _noted.update(dict.fromkeys(places))


def noted_model_places() -> list[str]:
    """Every directory `note_model_places` was told of."""
    with _lock:
        return list(_noted)


def model_writable(path: str, roots: Iterable[str] = ()) -> str:
    """Why a command could have written `path` or what it leads to ("" when none could): it lies in one of `roots`
    or of the noted places (directories commands may write, resolved), or a symlink on the way to it lies in one."""
    roots = list(dict.fromkeys([*roots, *noted_model_places()]))
    try:
        named = os.path.abspath(os.path.expanduser(path))
        real = resolve(named)
        link = link_in(named, roots)
    except (OSError, ValueError) as exc:  # a NUL byte, a path that keeps changing
        return f"{path!r} cannot be checked ({getattr(exc, 'strerror', None) or exc})"
    holding = next((root for root in roots if inside(real, root)), "")
    if holding:
        return f"{real} lies in {holding}, a directory commands may write"
    if link:
        return f"it is reached through the link {link}, in a directory commands may write"
    return ""
