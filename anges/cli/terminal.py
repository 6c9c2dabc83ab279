"""Drawing on a terminal: whether there is one, colour, a spinner, Markdown made readable, lines cut to width."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
LIVE_LINES = 4
"""Lines of a streaming reply shown under the spinner (its last ones)."""
_CODES = {"bold": "1", "dim": "2", "italic": "3", "underline": "4", "red": "31", "green": "32", "yellow": "33",
          "blue": "34", "magenta": "35", "cyan": "36"}


def is_terminal(stream: TextIO) -> bool:
    """True when `stream` is an interactive terminal that understands escape sequences."""
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def wants_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return is_terminal(stream) and not os.environ.get("NO_COLOR")


class Style:
    """ANSI styling that does nothing when disabled."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, *names: str) -> str:
        if not self.enabled or not names or not text:
            return text
        return f"\x1b[{';'.join(_CODES[n] for n in names)}m{text}\x1b[0m"


class Spinner:
    """A one-line activity indicator with elapsed time, redrawn by a daemon thread, and under it the last lines of
    the text arriving (a streaming reply); only on a terminal. Both are erased before other output is written."""

    def __init__(self, out: TextIO, style: Style, enabled: bool):
        self.out = out
        self.style = style
        self.enabled = enabled
        self.lock = threading.RLock()
        self._label = ""
        self._live: list[str] = []
        self._since = time.monotonic()
        self._shown = 0
        """Lines drawn now (0: nothing), the cursor on the last of them."""
        self._frame = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, label: str) -> None:
        """Show `label` from now on, with the time since this call (child agents may call this concurrently)."""
        with self.lock:
            self._label, self._since, self._live = label, time.monotonic(), []
            if self.enabled and self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._spin, name="anges-spinner", daemon=True)
                self._thread.start()

    def live(self, lines: list[str]) -> None:
        """Show these lines (already printable and cut to the width) under the spinner until the next `start`."""
        with self.lock:
            self._live = lines
            if self.enabled and self._thread is not None:
                self._draw()

    def stop(self) -> None:
        """Stop and erase the spinner."""
        with self.lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join()
        self.clear()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop and erase the spinner while something else uses the terminal (a question); it resumes after."""
        with self.lock:
            label, since, running = self._label, self._since, self._thread is not None
        self.stop()
        try:
            yield
        finally:
            if running:
                self.start(label)
                self._since = since

    def clear(self) -> None:
        """Erase what the spinner drew so other output can take its place (it comes back on the next tick)."""
        with self.lock:
            if self._shown:
                up = f"\x1b[{self._shown - 1}A" if self._shown > 1 else ""
                self.out.write(f"\r{up}\x1b[J")
                self.out.flush()
                self._shown = 0

    def _spin(self) -> None:
        while not self._stop.wait(0.1):
            with self.lock:
                if self._label:
                    self._draw()
            self._frame += 1

    def _draw(self) -> None:
        elapsed = time.monotonic() - self._since
        glyph = SPINNER_FRAMES[self._frame % len(SPINNER_FRAMES)]
        text = cut(f"{glyph} {self._label} {seconds(elapsed)}", shutil.get_terminal_size().columns - 1)
        lines = [self.style(text, "cyan")] + [self.style(line, "dim", "italic") for line in self._live]
        up = f"\x1b[{self._shown - 1}A" if self._shown > 1 else ""
        self.out.write(f"\r{up}\x1b[J" + "\n".join(lines))
        self.out.flush()
        self._shown = len(lines)


def last_lines(text: str, width: int, count: int = LIVE_LINES) -> list[str]:
    """The last `count` lines of `text` wrapped to `width` columns (wide characters take two)."""
    lines: list[str] = []
    for paragraph in text.splitlines()[-count:]:
        line, used = "", 0
        for char in paragraph.expandtabs(4):
            size = _columns(char)
            if used + size > width:
                lines.append(line)
                line, used = "", 0
            line, used = line + char, used + size
        lines.append(line)
    return lines[-count:]


def _columns(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


# --- Markdown for a terminal ---------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^(\s*)(\d+[.)])\s+(.*)$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_INLINE = re.compile(  # `code`, **strong**, __strong__, *emphasis*, [link](url)
    r"`([^`]+)`|\*\*(.+?)\*\*|__(.+?)__|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?!\w)|\[([^\]]+)\]\(([^)\s]+)\)")


def render_markdown(text: str, style: Style) -> str:
    """Markdown made readable on a terminal (headings, lists, code, emphasis); unchanged without colour."""
    if not style.enabled:
        return text.rstrip("\n")
    out: list[str] = []
    fence = ""
    for line in text.rstrip("\n").splitlines():
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
            else:
                out.append("    " + style(line, "cyan"))
            continue
        if match:
            fence = match.group(1)
            continue
        if heading := _HEADING.match(line):
            level_one = ("underline",) if len(heading.group(1)) == 1 else ()
            out.append(style(_inline(heading.group(2), style), "bold", *level_one))
        elif bullet := _BULLET.match(line):
            out.append(f"{bullet.group(1)}  • {_inline(bullet.group(2), style)}")
        elif numbered := _NUMBERED.match(line):
            out.append(f"{numbered.group(1)}  {numbered.group(2)} {_inline(numbered.group(3), style)}")
        elif line.startswith(">"):
            out.append(style("  │ ", "dim") + style(_inline(line[1:].strip(), style), "italic"))
        elif re.fullmatch(r"\s*([-*_])(\s*\1){2,}\s*", line):
            out.append(style("─" * 40, "dim"))
        else:
            out.append(_inline(line, style))
    return "\n".join(out)


def _inline(text: str, style: Style) -> str:
    def replace(match: re.Match) -> str:
        code, strong, strong2, emphasis, link, url = match.groups()
        if code is not None:
            return style(code, "cyan")
        if strong is not None or strong2 is not None:
            return style(strong or strong2, "bold")
        if emphasis is not None:
            return style(emphasis, "italic")
        return f"{style(link, 'underline')} {style(f'({url})', 'dim')}"

    return _INLINE.sub(replace, text)


def seconds(value: float) -> str:
    """A duration as `4.2s` or `3m07s`."""
    if value < 60:
        return f"{value:.1f}s"
    minutes, rest = divmod(int(value), 60)
    return f"{minutes}m{rest:02d}s"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cut(line: str, width: int) -> str:
    """Cut a (possibly styled) line to `width` visible characters."""
    if width <= 0 or len(_ANSI.sub("", line)) <= width:
        return line
    visible, out, pos = 0, [], 0
    for match in _ANSI.finditer(line):
        chunk = line[pos:match.start()]
        room = width - 1 - visible
        out.append(chunk[:room])
        visible += min(len(chunk), room)
        out.append(match.group())
        pos = match.end()
        if visible >= width - 1:
            break
    else:
        chunk = line[pos:]
        out.append(chunk[: width - 1 - visible])
    return "".join(out) + "…" + ("\x1b[0m" if "\x1b[" in line else "")
