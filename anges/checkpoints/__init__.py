"""Checkpoints: the working directory snapshotted before each step that can change files, in a private git store
under ANGES_HOME; `Checkpoints` diffs and undoes a stream's steps (docs/checkpoints.md).

The names load on first use.
"""

from importlib import import_module

_EXPORTS = {
    **dict.fromkeys(("Checkpoints", "Step", "UndoPlan"), "anges.checkpoints.workspace"),
    **dict.fromkeys(("CheckpointStore", "remove_checkpoints", "checkpoints_dir"), "anges.checkpoints.store"),
    **dict.fromkeys(("Diff", "FileChange"), "anges.checkpoints.diffs"),
    "Conflict": "anges.checkpoints.undo",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'anges.checkpoints' has no attribute {name!r}")
    return getattr(import_module(module), name)
