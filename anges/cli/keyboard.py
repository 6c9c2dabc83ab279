"""The terminal's extended key reporting, on while the session's input box is up, so that Shift-Enter is told from
Enter: xterm's `modifyOtherKeys` (level 2) and the kitty keyboard protocol's "disambiguate" flag are asked for
(a terminal that knows neither ignores both), and taken back on exit, on a crash, around `$EDITOR` and while the
process is suspended.

With either on, the terminal reports keys with modifiers as `CSI 27;MOD;KEY~` or `CSI KEY;MOD u` (Ctrl-C too, and
the kitty protocol's Esc). `LegacyKeys` turns each back into the bytes the terminal sends without them, before
prompt_toolkit reads them, so every binding (Ctrl-C, Esc Esc, Ctrl-O, Ctrl-G, an approval's keys) works as before;
only Shift-Enter is left as it is (`composer.SHIFT_ENTER` reads it as a new line).
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Iterator
from typing import TextIO

ON = "\x1b[>4;2m\x1b[>1u"
"""modifyOtherKeys level 2, then push the kitty protocol's flags with "disambiguate"."""
OFF = "\x1b[<u\x1b[>4;0m"
"""Pop the kitty flags, then modifyOtherKeys off."""
SHIFT, ALT, CTRL = 1, 2, 4
LOCKS = 64 | 128
"""Caps Lock and Num Lock, which the kitty protocol reports too: they change no key here."""
_EXTENDED = re.compile(r"\x1b\[27;(\d+);(\d+)~|\x1b\[(\d+)(?::\d*)*(?:;(\d+)(?::\d+)?)?u")
_UNFINISHED = re.compile(r"\x1b(?:\[[\d;:]*)?\Z")
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"

_terminal: TextIO | None = None
_lock = threading.RLock()
"""Re-entrant: the SIGTSTP handler runs on the main thread, perhaps while it holds the lock."""


def legacy(code: int, modifiers: int) -> str | None:
    """The bytes a terminal without extended reporting sends for key `code` with `modifiers` (1 + the bits: Shift
    1, Alt 2, Ctrl 4); None for Shift-Enter, which stays as reported; "" for a key with no such bytes."""
    bits = (modifiers - 1) & ~LOCKS if modifiers else 0
    if code == 13 and bits == SHIFT:
        return None
    if bits & ~(SHIFT | ALT | CTRL) or code > 0x10FFFF:
        return ""
    if code == 9 and bits & SHIFT:
        text = "\x1b[Z"
    elif bits & CTRL and (0x40 <= code < 0x80 or code == 0x20):
        text = chr(code & 0x1F)
    elif code in (9, 13, 27, 127) or 0x20 <= code < 0xE000:  # 0xE000 on: the kitty protocol's keypad keys
        text = chr(code)
    else:
        return ""
    return "\x1b" + text if bits & ALT else text


class LegacyKeys:
    """Turns the reports of extended keys in what the terminal sends into legacy bytes (a paste is left as it is);
    a report cut between two reads waits for the rest (or for the flush after the escape timeout)."""

    def __init__(self) -> None:
        self.held = ""
        self.pasting = False

    def feed(self, data: str) -> str:
        data, self.held = self.held + data, ""
        out = []
        while data:
            if self.pasting:
                end = data.find(PASTE_END)
                if end < 0:
                    out.append(data)
                    break
                out.append(data[:end + len(PASTE_END)])
                data, self.pasting = data[end + len(PASTE_END):], False
                continue
            start = data.find(PASTE_START)
            keys, data = (data, "") if start < 0 else (data[:start], data[start + len(PASTE_START):])
            unfinished = _UNFINISHED.search(keys) if start < 0 else None
            if unfinished is not None:
                keys, self.held = keys[:unfinished.start()], unfinished.group()
            out.append(_EXTENDED.sub(_replace, keys))
            if start >= 0:
                out.append(PASTE_START)
                self.pasting = True
        return "".join(out)

    def flush(self) -> str:
        """What is held: nothing more came, so it is what it is (a lone Esc)."""
        held, self.held = self.held, ""
        return held


def _replace(match: re.Match) -> str:
    modifiers, code = (match.group(1), match.group(2)) if match.group(2) else (match.group(4), match.group(3))
    text = legacy(int(code), int(modifiers or 1))
    return match.group() if text is None else text


def translate_input(keys_in) -> None:
    """Make prompt_toolkit's input (a `Vt100Input`) read extended keys as legacy ones."""
    parser = getattr(keys_in, "vt100_parser", None)
    if parser is None:
        return
    keys, feed, flush = LegacyKeys(), parser.feed, parser.flush

    def translated_feed(data: str) -> None:
        feed(keys.feed(data))

    def translated_flush() -> None:
        feed(keys.flush())
        flush()

    parser.feed, parser.flush = translated_feed, translated_flush


def enable(terminal: TextIO) -> None:
    """Ask `terminal` for extended key reporting (until `disable`); a suspend (SIGTSTP) takes it back meanwhile."""
    global _terminal
    with _lock:
        _write(terminal, ON)
        _terminal = terminal
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGTSTP"):
        signal.signal(signal.SIGTSTP, _suspend)


def disable() -> None:
    """Take extended key reporting back, if it was asked for."""
    global _terminal
    with _lock:
        terminal, _terminal = _terminal, None
        if terminal is not None:
            _write(terminal, OFF)
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGTSTP"):
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Legacy keys inside (another program has the terminal: `$EDITOR`); as they were after."""
    with _lock:
        terminal = _terminal
        if terminal is not None:
            _write(terminal, OFF)
    try:
        yield
    finally:
        with _lock:
            if terminal is not None and _terminal is terminal:
                _write(terminal, ON)


def _suspend(signum: int, frame: object) -> None:
    """SIGTSTP: the terminal's keys as they were for the shell, stop; extended keys again once continued."""
    import os

    with paused():
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT
        signal.signal(signal.SIGTSTP, _suspend)


def _write(terminal: TextIO, text: str) -> None:
    try:
        terminal.write(text)
        terminal.flush()
    except (OSError, ValueError):  # a terminal gone (a hang-up) takes nothing back
        pass
