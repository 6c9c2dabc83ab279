"""`anges` in a real tmux pane, read the way a person sees it: the screen and the scrollback (`capture-pane -S -`).

tmux is a terminal that reflows its lines when its width changes (as VTE, kitty, iTerm2 and Windows Terminal do;
xterm cuts them), so what a resize leaves in the scrollback is what people get. Each pane is in a tmux server of
its own (its own socket), killed at the end. Waits are for text, with a deadline; never fixed sleeps.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import uuid

OPTIONS = ("set -g status off", "set -g history-limit 20000", "set -g remain-on-exit on")
"""No status bar (the pane is the whole terminal), a long scrollback, and the pane kept when anges exits."""


class Tmux:
    """One tmux server with one pane running `command` (a list) at `columns` x `rows`."""

    def __init__(self, command: list[str], cwd, env: dict | None = None, columns: int = 100, rows: int = 30):
        self.socket = f"anges-test-{uuid.uuid4().hex[:12]}"
        self.columns, self.rows = columns, rows
        environment = dict(os.environ if env is None else env)
        for fixed in ("COLUMNS", "LINES", "TMUX", "TMUX_PANE"):  # the pane's size is the terminal's
            environment.pop(fixed, None)
        environment["TERM"] = "screen-256color"
        config = os.path.join(str(cwd), f".{self.socket}.conf")
        with open(config, "w") as file:
            file.write("\n".join(OPTIONS) + "\n")
        line = " ".join(shlex.quote(part) for part in command)
        self._tmux("-f", config, "new-session", "-d", "-x", str(columns), "-y", str(rows), "-c", str(cwd),
                   f"exec {line}", env=environment)
        self._tmux("set", "-g", "window-size", "manual")  # resized by `resize` alone (not in the file: 3.3a dies)

    # -- reading -------------------------------------------------------------------------------------------------

    def screen(self) -> list[str]:
        """The lines on the screen now, right-stripped."""
        return [line.rstrip() for line in self._capture().split("\n")[:self.rows]]

    def lines(self) -> list[str]:
        """The scrollback and the screen, right-stripped (trailing empty lines dropped)."""
        lines = [line.rstrip() for line in self._capture("-S", "-").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def wait_for(self, text: str, timeout: float = 30, on_screen: bool = False) -> list[str]:
        """Wait until `text` shows (on the screen now, or anywhere in the scrollback); the lines then."""
        return self.wait_until(lambda: text in "\n".join(self.screen() if on_screen else self.lines()), timeout,
                               repr(text))

    def wait_until(self, predicate, timeout: float = 30, what: str = "the condition") -> list[str]:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the pane:\n" + "\n".join(self.lines()[-80:]))
            time.sleep(0.05)
        return self.lines()

    def redrawn(self, timeout: float = 30) -> list[str]:
        """Wait until the live part is drawn at the terminal's width now (its rule spans the new width)."""
        rule = "─" * self.columns

        def drawn() -> bool:  # the rule over the input box (an old, wider one rewraps into a longer and a shorter)
            screen = self.screen()
            return any(line == rule and below.startswith("›") for line, below in zip(screen, screen[1:]))
        return self.wait_until(drawn, timeout, f"a rule {self.columns} columns wide over the input box")

    # -- acting ---------------------------------------------------------------------------------------------------

    def send(self, keys: str) -> None:
        """Type `keys` (literally: no key names)."""
        self._tmux("send-keys", "-t", "0", "-l", keys)

    def key(self, *names: str) -> None:
        """Press keys by tmux's names: Enter, Escape, C-c, C-o, ..."""
        self._tmux("send-keys", "-t", "0", *names)

    def resize(self, columns: int, rows: int) -> None:
        """Resize the terminal, as dragging its window's corner does (tmux reflows what it shows)."""
        self.columns, self.rows = columns, rows
        self._tmux("resize-window", "-t", "0", "-x", str(columns), "-y", str(rows))

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False, timeout=30)

    def _capture(self, *extra: str) -> str:
        return self._tmux("capture-pane", "-p", "-t", "0", *extra)

    def _tmux(self, *args: str, env: dict | None = None) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=env,
                              check=False, timeout=30)
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args[:3])}: {done.stderr.strip()}")
        return done.stdout
