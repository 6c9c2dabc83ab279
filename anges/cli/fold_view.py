"""What a person reads of a fold (`history_folded`): which events the summary now stands for, why, and the summary
itself, dimmed (its first lines; Ctrl-O shows it whole)."""

from __future__ import annotations

from rich.text import Text

from anges.store.events import Event
from anges.util.clipping import clip_lines

SUMMARY_LINES = 12
"""Lines of a summary shown in the transcript (all of them with --verbose, and in the Ctrl-O view)."""
WHY = {"window": "the window was full", "prompt_size": "the prompt was too long", "asked": "you asked: /compact"}


def fold_lines(event: Event, verbose: bool = False) -> list[Text]:
    """`⇊ history folded: events 2–14 into one summary (1,234 characters) · ... · the window was full`, the summary
    under it, dim."""
    data = event.data
    why = [WHY.get(str(data.get("reason", "")), str(data.get("reason", "")))] if data.get("reason") else []
    if data.get("keep"):
        why.append(f"keeping {data['keep']}")
    head = Text.assemble(("⇊", "bold cyan"), " ", ("history folded", "bold"),
                         f": {data.get('events', 'events')} into one summary ({int(data.get('chars') or 0):,} "
                         "characters) · your requests stay word for word", *(f" · {part}" for part in why))
    lines = [Text("  " + line, "dim") for line in (event.content or "").strip().splitlines()]
    more = "{} more line{} (Ctrl-O shows the whole summary)"
    if not verbose:
        lines = clip_lines(lines, SUMMARY_LINES, lambda n: Text("  … " + more.format(n, "s" if n != 1 else ""), "dim"))
    return [head, *lines]
