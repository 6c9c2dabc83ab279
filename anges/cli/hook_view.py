"""What a person reads of a hook's run (`hook_ran`, `hook_feedback`): which hook, on what, its outcome and time, and
why it blocked, what it told the model, or what it printed."""

from __future__ import annotations

from rich.text import Text

from anges.cli.terminal import seconds
from anges.store.events import Event
from anges.util.clipping import clip_lines, one_line

MARKS = {"blocked": ("⚓", "bold yellow"), "failed": ("⚓", "bold red"), "timeout": ("⚓", "bold red"),
         "unreadable": ("⚓", "bold red"), "stopped": ("⚓", "bold yellow")}
VERBS = {"ok": "ok", "blocked": "blocked", "failed": "failed", "timeout": "timed out", "stopped": "stopped",
         "unreadable": "unreadable answer"}


def hook_lines(event: Event, verbose: bool = False) -> list[Text]:
    """A hook run: one line (`⚓ hook NAME · before_action RUN_SHELL_CMD git push · blocked · 0.1 s`), then its reason
    or the context the model reads (and, with `verbose` or when it failed, what it printed)."""
    data = event.data
    outcome, effect = str(data.get("outcome", "")), str(data.get("effect", ""))
    mark, style = MARKS.get(outcome, ("⚓", "bold cyan" if effect == "context" else "dim"))
    verb = VERBS.get(outcome, outcome)
    if effect == "blocked":
        verb = "sent back" if data.get("hook_event") == "before_complete" else \
            "refused the request" if data.get("hook_event") == "request" else \
            "blocked" if outcome == "blocked" else f"{verb}, so blocked (fails closed)"
    elif effect == "context":
        verb = "told the model"
    on = " ".join(part for part in (str(data.get("hook_event", "")), str(data.get("on_action", "")),
                                    one_line(str(data.get("subject", "")), 60) if data.get("on_action") else "")
                  if part)
    head = Text.assemble((mark, style), " hook ", (one_line(str(data.get("hook", "")), 60), "bold"), f" · {on} · ",
                         (verb, style.replace("bold ", "") if style != "dim" else "dim"),
                         (f" · {seconds(float(data.get('duration') or 0))}", "dim"), no_wrap=True, overflow="ellipsis")
    text = str(data.get("reason") or "") if outcome != "ok" else str(data.get("context") or "")
    body = [Text(line) for line in text.strip().splitlines()]
    if verbose or (outcome in ("failed", "unreadable") and not body):
        body += [Text(line, "dim") for line in str(data.get("output") or "").strip().splitlines()]
    shown = clip_lines(body, 200 if verbose else 6, lambda n: Text(f"… {n} more line{'s' if n != 1 else ''} …", "dim"))
    return [head, *(Text.assemble(("  │ ", "dim"), line, no_wrap=True, overflow="ellipsis") for line in shown)]
