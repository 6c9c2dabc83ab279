"""The approval question on a plain terminal (no interactive session): the detail, then y, n, a, t or v read line
by line, answered only once it could be read."""

from __future__ import annotations

import os
import select
import sys
import threading
from contextlib import nullcontext

from anges.safety import approval_text
from anges.safety.approval import ApprovalRequest, Decision
from anges.util.clipping import one_line
from anges.util.printable import visible

POLL_SECONDS = 0.1


class TerminalPrompt:
    """Asks on the terminal: y yes, n no, a always (for the rest of the run), t no, and tell the agent why; v shows
    a detail too long for the screen in full.

    y and a are refused until the person has seen the whole detail: a long command shows its head and tail,
    and the part between needs `v`. `pause` is a context manager factory that quiets other terminal output
    (the spinner) while asking.
    """

    name = "terminal"

    def __init__(self, out=None, input_fd: int = 0, pause=None):
        self.out = out or sys.stderr
        self.input_fd = input_fd
        self.pause = pause
        self._lock = threading.Lock()
        self._pending = b""

    def __call__(self, request: ApprovalRequest) -> Decision:
        with self._lock, (self.pause() if self.pause else nullcontext()):
            if request.cancelled.is_set():
                return Decision("cancelled", by="interrupt")
            self._discard_typed_ahead()
            seen = self._show(request)
            if request.cancelled.wait(approval_text.READ_SECONDS):  # the answer is asked for once it can be read
                return Decision("cancelled", by="interrupt")
            if self._discard_typed_ahead():
                self._write("  (what was typed before it could be read does not answer it)\n")
            while True:
                answer = self._read(ASK_ALL if seen else ASK_PART, request)
                if answer is None:
                    return self._no_answer(request)
                answer = answer.strip().lower()
                if answer in ("v", "view"):
                    self._write(_framed(approval_text.marked(request.detail)))
                    seen = True
                elif answer in ("y", "yes", "a", "always") and not seen:
                    self._write("  part of it is not on the screen: view it all with v before you approve it\n")
                elif answer in ("y", "yes"):
                    return Decision("allow", by=self.name)
                elif answer in ("n", "no"):
                    return Decision("deny", by=self.name)
                elif answer in ("a", "always"):
                    return Decision("allow", always=True, by=self.name)
                elif answer in ("t", "tell"):
                    why = self._read("  tell the agent: ", request)
                    if why is None:
                        return self._no_answer(request)
                    return Decision("deny", feedback=why.strip(), by=self.name)
                else:
                    self._write(f"  please answer {'y, n, a, t or v' if seen else 'v, n or t'}\n")

    def _show(self, request: ApprovalRequest) -> bool:
        """Show the request; True when all of its detail is on the screen."""
        head = f"\n? {request.action_type} needs your approval — {visible(request.reason)} [{request.rule}]\n"
        shown = request.shown()
        body = _framed(shown.lines)
        body += f"  ({shown.size}{'' if shown.complete else '; only part of it is shown: v shows it all'})\n"
        if request.escalate:
            body += f"  {one_line(approval_text.escalation(request.justification, request.action_type), 400)}\n"
        body += f"  always = for the rest of this run: {one_line(visible(request.scope), 300)}\n"
        self._write(head + body)
        return shown.complete

    def _read(self, prompt: str, request: ApprovalRequest) -> str | None:
        """A line typed by the person; None when the request is cancelled or input ends."""
        self._write(prompt)
        while b"\n" not in self._pending:
            if request.cancelled.is_set():
                self._write("\n")
                return None
            try:
                readable, _, _ = select.select([self.input_fd], [], [], POLL_SECONDS)
            except InterruptedError:
                continue
            if readable:
                chunk = os.read(self.input_fd, 4096)
                if not chunk:
                    self._write("\n")
                    return None
                self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode("utf-8", errors="replace")

    def _discard_typed_ahead(self) -> bool:
        """Drop what was typed before the question could be read, so a stray `y` cannot answer it; whether there
        was any."""
        dropped, self._pending = bool(self._pending), b""
        return discard_typed_ahead(self.input_fd) or dropped

    def _no_answer(self, request: ApprovalRequest) -> Decision:
        if request.cancelled.is_set():
            return Decision("cancelled", by="interrupt")
        return Decision("deny", feedback="no answer (the input ended)", by=self.name)

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def discard_typed_ahead(fd: int) -> bool:
    """Drop what is waiting to be read on `fd` (on a terminal, a line begun too); whether there was any."""
    dropped = False
    for _ in range(64):  # what is there now, not what keeps coming
        try:
            readable, _, _ = select.select([fd], [], [], 0)
        except InterruptedError:
            continue
        if not readable or not os.read(fd, 4096):
            break
        dropped = True
    if os.isatty(fd):
        import termios

        termios.tcflush(fd, termios.TCIFLUSH)
    return dropped


ASK_ALL = "  allow? [y]es, [n]o, [a]lways, [t]ell the agent why: "
ASK_PART = "  [v]iew it all, [n]o, [t]ell the agent why: "


def _framed(lines: list[str]) -> str:
    return "".join(f"  │ {line}\n" for line in lines)
