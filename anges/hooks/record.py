"""What one hook run becomes on the stream: a `hook_ran` event for people, or a `hook_feedback` event the model reads
too (a block's reason, context), with the facts every view draws."""

from __future__ import annotations

from dataclasses import dataclass

from anges.hooks.answers import Outcome
from anges.store.events import Event
from anges.util.clipping import clip, one_line

MAX_TEXT_CHARS = 8_000
"""The most of a reason or a context the model reads."""
VERBS = {"ok": "ok", "blocked": "blocked", "failed": "failed", "timeout": "timed out", "stopped": "stopped",
         "unreadable": "answered what anges cannot read"}


@dataclass(frozen=True)
class HookRun:
    """One hook at one event: which hook, from where, on what."""

    label: str
    """The hook's name, or its command (a plug-in's: `plugin NAME`)."""
    source: str
    """config, project or plugin."""
    event: str
    action_type: str = ""
    subject: str = ""
    """The command, the path, server.tool, the request or the answer it ran on."""

    def facts(self, outcome: Outcome, effect: str) -> dict:
        """The event's `data`: who ran, on what, the outcome and its time, what it printed, what it did to the run."""
        return {"hook": self.label, "source": self.source, "hook_event": self.event, "on_action": self.action_type,
                "subject": clip(self.subject, 2_000), "outcome": outcome.status, "effect": effect,
                "exit_code": outcome.exit_code, "duration": outcome.duration, "output": outcome.output,
                "reason": clip(outcome.reason, MAX_TEXT_CHARS), "context": clip(outcome.context, MAX_TEXT_CHARS)}


def hook_event(run: HookRun, outcome: Outcome, effect: str, template_dir: str, skipped: int = 0) -> Event:
    """The event of one hook run. `effect` is what it did to the run: `blocked` (the action, completion or request did
    not go on), `context` (the model reads its text), or "" (nothing the model needs: `hook_ran`)."""
    facts = run.facts(outcome, effect)
    message = _message(run, outcome, effect)
    if not effect:
        return Event("hook_ran", content=message, message=message, data=facts)
    from anges.prompt.templates import render_template

    content = render_template("hooks/feedback.j2", template_dir, skipped=skipped, **facts).strip()
    return Event("hook_feedback", content=content, message=message, data={**facts, "skipped": skipped})


def _message(run: HookRun, outcome: Outcome, effect: str) -> str:
    """One line for people: `hook NAME after EDIT_FILE src/a.py: blocked (0.12 s): why`."""
    on = f" {run.action_type}" if run.action_type else ""
    subject = f" {one_line(run.subject, 80)}" if run.subject and run.action_type else ""
    verb = "sent back" if effect == "blocked" and run.event == "before_complete" else VERBS.get(outcome.status, "")
    if outcome.status == "ok" and effect == "context":
        verb = "added context"
    why = outcome.reason if outcome.status != "ok" else outcome.context
    tail = f": {one_line(why, 200)}" if why else ""
    return f"hook {one_line(run.label, 80)} ({run.event}{on}{subject}): {verb} in {outcome.duration:g} s{tail}"
