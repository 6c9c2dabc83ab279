"""Restoring a chat's files to before one of its steps: the preview (the diff it applies, the files it leaves alone,
whose changes it would overwrite) and the restore itself, through the chat's checkpoints (docs/checkpoints.md)."""

from __future__ import annotations

from anges.checkpoints import Checkpoints, UndoPlan
from anges.store.events import EventStream
from anges.util.clipping import clip
from anges.util.printable import printable_texts

MAX_DIFF_CHARS = 200_000
"""Of the diff a preview shows; past it, the middle is cut (the restore still applies all of it)."""


def checkpoints(web, stream: EventStream) -> Checkpoints:
    """The checkpoints of a chat (or of a child agent's stream)."""
    return Checkpoints(stream, web.store, web.config.checkpoints, web.config.prompt.template_dir)


def preview(plan: UndoPlan, cwd: str) -> dict:
    """What the page shows before a restore; `token` goes back with the restore, which then applies only if the
    files are still as they were for this preview."""
    text = plan.diff.text.encode(errors="surrogateescape").decode(errors="replace")
    shown = clip(text, MAX_DIFF_CHARS)
    return printable_texts({
        "step": plan.to.number, "label": plan.to.label, "steps": [step.number for step in plan.steps],
        "stat": plan.diff.stat_line, "diff": shown, "diff_cut": shown != text,
        "files": [{"path": change.shown(cwd), "status": change.status} for change in plan.diff.files],
        "conflicts": [{"path": item.path, "why": item.why} for item in plan.conflicts],
        "left_alone": [{"path": item.path, "why": item.why} for item in plan.left_alone],
        "outside": [step.number for step in plan.outside], "token": plan.token,
    })
