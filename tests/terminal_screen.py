"""`anges` on a real pseudo-terminal, read the way a person sees it: through a terminal emulator (pyte), with its
scrollback. Waits are for text on the screen, with a deadline; never fixed sleeps."""

import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

import pyte

ESC, ENTER, ALT_ENTER, CTRL_C, CTRL_D, CTRL_J, TAB = "\x1b", "\r", "\x1b\r", "\x03", "\x04", "\n", "\t"
UP, DOWN = "\x1b[A", "\x1b[B"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


class Terminal:
    """`anges ARGS` on the slave side of a pty, the master side read into a pyte screen with scrollback."""

    def __init__(self, args, cwd, env=None, columns=100, rows=30, stdout=None):
        """`stdout`: a file for anges' standard output (`anges ... > FILE` on a terminal)."""
        env = dict(os.environ if env is None else env)
        env.setdefault("TERM", "xterm-256color")
        for fixed in ("COLUMNS", "LINES"):  # the pty's size is the terminal's (pytest-xdist's workers set both)
            env.pop(fixed, None)
        pid, fd = pty.fork()
        if pid == 0:  # the child: become anges at once
            os.chdir(cwd)
            if stdout is not None:
                os.dup2(os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
            os.execve(sys.executable, [sys.executable, "-m", "anges", *args], env)
        self._attach(pid, fd, columns, rows)

    @classmethod
    def of(cls, pid, fd, columns=100, rows=30):
        """A process already started on the slave side of the pty whose master is `fd`."""
        term = cls.__new__(cls)
        term._attach(pid, fd, columns, rows)
        return term

    def _attach(self, pid, fd, columns, rows):
        self.pid, self.fd = pid, fd
        self.raw = b""
        self.code = None
        self.screen = pyte.HistoryScreen(columns, rows, history=5000, ratio=0.5)
        self.stream = pyte.ByteStream(self.screen)
        self._size(columns, rows)

    # -- reading the screen ----------------------------------------------------------------------------------

    def display(self) -> list[str]:
        """The lines on the screen now, right-stripped."""
        return [line.rstrip() for line in self.screen.display]

    def lines(self) -> list[str]:
        """The scrollback and the screen, right-stripped."""
        columns = self.screen.columns
        history = ["".join(line[x].data for x in range(columns)).rstrip() for line in self.screen.history.top]
        return history + self.display()

    def text(self) -> str:
        return "\n".join(self.lines())

    def wait_for(self, text, timeout=30, on_screen=False):
        """Read until `text` shows (on the screen now, or also in the scrollback); the lines then."""
        return self.wait_until(lambda: text in "\n".join(self.display() if on_screen else self.lines()), timeout,
                               f"{text!r}")

    def wait_gone(self, text, timeout=30):
        """Read until `text` is no longer on the screen now."""
        return self.wait_until(lambda: text not in "\n".join(self.display()), timeout, f"{text!r} to go")

    def wait_until(self, predicate, timeout=30, what="the condition"):
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n" + "\n".join(self.lines()[-60:]))
            if not self._read(min(remaining, 0.2)) and self.code is None:
                self._reap(block=True)
                if not predicate():
                    raise AssertionError(f"anges exited ({self.code}) before {what}; the screen:\n"
                                         + "\n".join(self.lines()[-60:]))
        return self.lines()

    def read_for(self, seconds):
        """Keep reading the terminal for `seconds`: the time a person takes between two keys."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0 and self._read(remaining):
            pass

    # -- acting on it -------------------------------------------------------------------------------------------

    def send(self, keys: str):
        os.write(self.fd, keys.encode())

    def paste(self, text: str):
        """Text pasted as a terminal pastes it (bracketed: it arrives whole)."""
        self.send(PASTE_START + text + PASTE_END)

    def resize(self, columns, rows):
        self.screen.resize(rows, columns)
        self._size(columns, rows)

    def wait(self, timeout=30) -> int:
        """The exit code, reading the terminal meanwhile."""
        deadline = time.monotonic() + timeout
        while self.code is None and time.monotonic() < deadline:
            if not self._read(0.05):
                self._reap(block=True)
            else:
                self._reap(block=False)
        if self.code is None:
            os.kill(self.pid, signal.SIGKILL)
            raise AssertionError("anges did not exit; the screen:\n" + "\n".join(self.lines()[-60:]))
        return self.code

    def close(self):
        if self.code is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(block=True)

    def _size(self, columns, rows):
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def _read(self, timeout) -> bool:
        """False once the other side closed."""
        try:
            ready, _, _ = select.select([self.fd], [], [], timeout)
        except (OSError, ValueError):
            return False
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed its side
            return False
        self.raw += data
        self.stream.feed(data)
        return bool(data)

    def _reap(self, block: bool):
        if self.code is not None:
            return
        pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        if pid:
            self.code = os.waitstatus_to_exitcode(status)
            os.close(self.fd)
