"""What every approval surface shows of a request (the terminal prompt, the web chat's card, an editor's permission
request, the text a library callback gets): its size, every character marked that a person could not see, the
head and tail when it is too long for the screen, and the plain words for leaving the sandbox. What you approve
must be what runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from anges.util.clipping import clip, clip_lines
from anges.util.printable import visible

MAX_DETAIL_CHARS = 20_000
"""The most of a request's detail a person is asked about, and its recorded event keeps: a longer one cannot be
approved (`refusal`)."""
MAX_SHOWN_LINES = 60
MAX_SHOWN_LINE = 400
"""A request shows at most this many lines, of at most this many characters, before the person opens it all."""
MAX_NAMED = 8
"""The characters that are not ASCII a request's size line names at most."""
ESCALATION_NOTE = "If approved, this runs outside the sandbox."
"""What a request to leave the sandbox says until it is approved."""


@dataclass(frozen=True)
class Shown:
    """A detail as a surface shows it first."""

    lines: list[str]
    """Marked (`visible`); the head and tail of a long detail, long lines cut in the middle."""
    complete: bool
    """All of it is in `lines`; when not, approval waits until the person has opened the whole of it."""
    size: str
    """"N lines, M characters" of the detail as it runs."""

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def shown(detail: str, max_lines: int = MAX_SHOWN_LINES) -> Shown:
    """How a surface shows `detail` at first (see `Shown`), in `max_lines` of its lines (fewer: a small screen)."""
    lines = visible(detail).split("\n")
    complete = len(lines) <= max_lines and all(len(line) <= MAX_SHOWN_LINE for line in lines)
    first: list[str] = []
    for line in clip_lines(lines, max_lines - 1, lambda cut: f"… {cut} lines not shown …"):
        first += clip(line, MAX_SHOWN_LINE).split("\n")
    return Shown(first, complete, size(detail))


def size(detail: str) -> str:
    """"N lines, M characters" of `detail`, and "; not ASCII: і U+0456" naming each character shown as itself that is
    not ASCII: a Cyrillic і in `gіthub.com` reads as an i."""
    lines = detail.count("\n") + 1
    text = f"{lines} line{'s' if lines != 1 else ''}, {len(detail):,} character{'s' if len(detail) != 1 else ''}"
    if detail.isascii():
        return text
    other = [char for char in dict.fromkeys(visible(detail)) if char >= "\x80"]  # the marked ones show as <U+...>
    named = ", ".join(f"{char} U+{ord(char):04X}" for char in other[:MAX_NAMED])
    more = f" and {len(other) - MAX_NAMED} more" if len(other) > MAX_NAMED else ""
    return f"{text}; not ASCII: {named}{more}" if other else text


def refusal(detail: str) -> str:
    """Why a request with this detail cannot be approved ("" when it can): longer than a person is shown whole."""
    if len(detail) <= MAX_DETAIL_CHARS:
        return ""
    return (f"cannot run: it is {len(detail):,} characters, over the {MAX_DETAIL_CHARS:,} an approval shows whole; "
            "split it into smaller steps (or write a script with EDIT_FILE and run that)")


def escalation(justification: str) -> str:
    """The note on a request to leave the sandbox, with the model's reason."""
    return f"{ESCALATION_NOTE} The agent says why: {visible(justification) or '(no reason given)'}"


def view(data: dict) -> dict:
    """The facts of a recorded request (`ApprovalRequest.to_data()`) as a surface built on the record shows them:
    its texts marked, and `shown`, `complete` and `size` of its detail."""
    facts = {key: visible(value) if isinstance(value, str) else value for key, value in data.items()}
    detail = data.get("detail") or ""
    first = shown(detail)
    facts.update(shown=first.text, complete=first.complete and not data.get("detail_cut"), size=first.size,
                 escalation_note=ESCALATION_NOTE)
    return facts
