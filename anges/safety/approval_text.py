"""What every approval surface shows of a request (the terminal prompt, the web chat's card, an editor's permission
request, the text a library callback gets): its title, its size, every character marked that a person could not
see and every one named that looks like another, runs of blank lines folded into one line that counts them, the
head and tail when it is too long for the screen, and the plain words for leaving the sandbox. What you approve
must be what runs.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from anges.util.clipping import clip, clip_lines, one_line
from anges.util.printable import hidden, lookalike, visible

MAX_DETAIL_CHARS = 20_000
"""The most of a request's detail a person is asked about, and its recorded event keeps: a longer one cannot be
approved (`refusal`)."""
MAX_SHOWN_LINES = 60
MAX_SHOWN_LINE = 400
"""A request shows at most this many lines, of at most this many characters, before the person opens it all."""
MAX_BLANK_LINES = 2
"""Blank lines shown as they are; a longer run of them is one line that says how many."""
MAX_TITLE = 120
"""The characters of a request's title (its first words, on one line)."""
MAX_OTHERS = 8
"""The characters that are not ASCII, and neither look like ASCII nor write right to left, a size line names at
most (accented letters in prose); look-alikes, right-to-left and hidden ones are always named, every one."""
READ_SECONDS = 1.0
"""How long a request is on the screen before a key or a click may answer it: what arrives sooner was meant for
something else (typing on, the second click of a double-click on the card before it). A second is Firefox's delay
before the buttons of its install and download dialogs work, for the same reason, and less than reading a
request takes."""
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


def marked(detail: str) -> list[str]:
    """The lines of `detail` as every surface shows them: `visible`, and each run of more than MAX_BLANK_LINES blank
    lines as one line that counts them (an 80-line gap cannot push the rest off the screen)."""
    lines: list[str] = []
    blank = 0
    for line in [*visible(detail).split("\n"), None]:
        if line is not None and not line.strip(" \t\r"):
            blank += 1
            continue
        lines += [""] * blank if blank <= MAX_BLANK_LINES else [f"… {blank} blank lines …"]
        blank = 0
        if line is not None:
            lines.append(line)
    return lines


def shown(detail: str, max_lines: int = MAX_SHOWN_LINES) -> Shown:
    """How a surface shows `detail` at first (see `Shown`), in `max_lines` of its lines (fewer: a small screen)."""
    lines = marked(detail)
    complete = len(lines) <= max_lines and all(len(line) <= MAX_SHOWN_LINE for line in lines)
    first: list[str] = []
    for line in clip_lines(lines, max_lines - 1, lambda cut: f"… {cut} lines not shown …"):
        first += clip(line, MAX_SHOWN_LINE).split("\n")
    return Shown(first, complete, size(detail))


def title(action_type: str, subject: str) -> str:
    """A request's one-line title, marked: the action and the first words of its subject, and how many lines the
    subject has when it has more than one."""
    lines = subject.count("\n") + 1
    return (f"{action_type} {one_line(visible(subject), MAX_TITLE)}".strip()
            + (f" ({lines} lines)" if lines > 1 else ""))


def size(detail: str) -> str:
    """"N lines, M characters", then the characters that are not ASCII, by what a person must know of them: those
    that look like ASCII ("looks like ASCII but is not: і U+0456 Cyrillic, like i": `gіthub.com` reads as github.com),
    those written right to left (they reorder what is around them), those hidden (marked in place), every one of
    each named; then the others, MAX_OTHERS at most."""
    lines = detail.count("\n") + 1
    text = f"{lines} line{'s' if lines != 1 else ''}, {len(detail):,} character{'s' if len(detail) != 1 else ''}"
    if detail.isascii():
        return text
    kinds: dict[str, list[str]] = {"looks like ASCII but is not": [], "right to left": [], "hidden, marked": [],
                                   "other non-ASCII": []}
    shown = visible(detail)
    for char in dict.fromkeys(shown):
        if char < "\x80":
            continue
        like = lookalike(char)
        if like:
            script = _script(char)
            kinds["looks like ASCII but is not"].append(f"{char} U+{ord(char):04X} {script + ', ' if script else ''}"
                                                        f"like {like}")
        elif unicodedata.bidirectional(char) in ("R", "AL", "AN"):
            kinds["right to left"].append(f"{char} U+{ord(char):04X}")
        else:
            kinds["other non-ASCII"].append(f"{char} U+{ord(char):04X}")
    kinds["hidden, marked"] = [_named(char) for char in hidden(detail)]
    others = kinds["other non-ASCII"]
    more = f" and {len(others) - MAX_OTHERS} more" if len(others) > MAX_OTHERS else ""
    kinds["other non-ASCII"] = others[:MAX_OTHERS]
    named = [f"{kind}: {', '.join(chars)}" for kind, chars in kinds.items() if chars]
    return "; ".join([text, *named]) + more


def _named(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, '')}".strip()


def _script(char: str) -> str:
    """The first word of a character's Unicode name, which is mostly its script: Cyrillic, Greek, Fullwidth."""
    return unicodedata.name(char, "").split(" ", 1)[0].capitalize()


def refusal(detail: str) -> str:
    """Why a request with this detail cannot be approved ("" when it can): longer than a person is shown whole."""
    if len(detail) <= MAX_DETAIL_CHARS:
        return ""
    return (f"cannot run: it is {len(detail):,} characters, over the {MAX_DETAIL_CHARS:,} an approval shows whole; "
            "split it into smaller steps (or write a script with EDIT_FILE and run that)")


def escalation(justification: str, action_type: str = "") -> str:
    """The note on a request to leave the sandbox, with the model's reason (none for a TRUST question: anges asks it,
    not the agent)."""
    if action_type == "TRUST":
        return ESCALATION_NOTE
    return f"{ESCALATION_NOTE} The agent says why: {visible(justification) or '(no reason given)'}"


def view(data: dict) -> dict:
    """The facts of a recorded request (`ApprovalRequest.to_data()`) or decision as a surface built on the record
    shows them: its texts marked, its `title`, and of a request's detail all of it (`marked`) and `shown`,
    `complete` and `size`."""
    facts = {key: visible(value) if isinstance(value, str) else value for key, value in data.items()}
    facts["title"] = title(str(data.get("action_type") or ""), str(data.get("subject") or ""))
    if "detail" in data:
        detail = data.get("detail") or ""
        first = shown(detail)
        facts.update(detail="\n".join(marked(detail)), shown=first.text, size=first.size,
                     complete=first.complete and not data.get("detail_cut"), escalation_note=ESCALATION_NOTE,
                     read_seconds=READ_SECONDS)
    return facts
