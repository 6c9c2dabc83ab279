"""The input box of a session: multi-line editing, history kept across sessions, and completion of file paths
after `@` and of slash commands."""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition, has_focus
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout import ConditionalContainer, HSplit, Window
from prompt_toolkit.layout.menus import CompletionsMenu
from prompt_toolkit.widgets import SearchToolbar, TextArea

from anges.cli.pastes import Pastes
from anges.cli.screen import Pane
from anges.util.paths import open_file, write_file

MAX_HISTORY = 1000
"""Requests read from the history file; once it passes MAX_HISTORY_BYTES it is cut to them."""
MAX_HISTORY_BYTES = 400_000
MAX_PATHS = 200
"""Completions offered for one folder after `@`."""
_AT_PATH = re.compile(r"(?:^|\s)@(\S*)$")


class History(FileHistory):
    """Requests typed in earlier sessions, newest last in the file; multi-line ones whole. A file written by the
    readline history of an earlier `anges -i` (one request a line) is read too. Kept private (0600) and bounded."""

    def load_history_strings(self) -> Iterable[str]:
        entries: list[str] = []
        lines: list[str] = []
        try:
            with open(self.filename, "rb") as file:
                raw = file.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []
        for line in raw:
            if line.startswith("+"):
                lines.append(line[1:])
                continue
            if lines:
                entries.append("\n".join(lines))
                lines = []
            if line.strip() and not line.startswith("#"):  # a readline history's line
                entries.append(line)
        if lines:
            entries.append("\n".join(lines))
        return reversed(entries[-MAX_HISTORY:])

    def store_string(self, string: str) -> None:
        path = os.fsdecode(self.filename)
        entry = f"\n# {datetime.datetime.now()}\n" + "".join(f"+{line}\n" for line in string.split("\n"))
        try:  # private from its first byte, and never through a link (docs/safety.md)
            fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600, parents=True)
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, entry.encode("utf-8", errors="replace"))
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size > MAX_HISTORY_BYTES:
                self._trim(path)
        except OSError:
            pass  # a read-only home must not break the session

    def _trim(self, path: str) -> None:
        kept = list(self.load_history_strings())[:MAX_HISTORY][::-1]
        text = "".join("\n# \n" + "".join(f"+{line}\n" for line in entry.split("\n")) for entry in kept)
        write_file(path, text.encode("utf-8", errors="replace"), 0o600)


class Completions(Completer):
    """File paths after `@` (relative to the working directory: those of the folder typed, then the project's files
    that match it fuzzily), and slash commands with their arguments."""

    def __init__(self, cwd: Callable[[], str], commands: Callable[[str], Iterable[tuple[str, str]]],
                 find: Callable[[str], list[str]] = lambda typed: []):
        self.cwd = cwd
        self.commands = commands
        """`commands(text before the cursor)`: (completion, meaning) pairs for a line that starts with `/`."""
        self.find = find
        """`find(typed)`: the project's files that match what was typed after `@`, best first."""

    def get_completions(self, document: Document, complete_event) -> Iterator[Completion]:
        before = document.text_before_cursor
        if before.startswith("/") and "\n" not in before:
            word = before.rsplit(" ", 1)[-1]
            for text, meaning in self.commands(before):
                if text.startswith(word) and text != word:
                    yield Completion(text, -len(word), display_meta=meaning)
            return
        match = _AT_PATH.search(before)
        if match:
            typed = match.group(1)
            given = set()
            for completion in self._paths(typed):
                given.add(typed[:len(typed) + completion.start_position] + completion.text)
                yield completion
            if not typed.endswith("/"):
                for path in self.find(typed):
                    if path not in given:
                        yield Completion(path, -len(typed), display=path, display_meta="")

    def _paths(self, typed: str) -> Iterator[Completion]:
        folder, _, stem = typed.rpartition("/")
        base = Path(self.cwd()) / os.path.expanduser(folder) if folder else Path(self.cwd())
        try:
            entries = sorted(os.scandir(base), key=lambda entry: entry.name)
        except OSError:
            return
        shown = 0
        for entry in entries:
            if not entry.name.startswith(stem) or (entry.name.startswith(".") and not stem.startswith(".")):
                continue
            if entry.name == stem and not entry.is_dir():
                continue  # complete already
            is_dir = entry.is_dir()
            name = entry.name + ("/" if is_dir else "")
            yield Completion(name, -len(stem), display=name, display_meta="folder" if is_dir else "")
            shown += 1
            if shown >= MAX_PATHS:
                return


SHIFT_ENTER = ("\x1b[27;2;13~", "\x1b[13;2u")
"""What Shift-Enter sends where the terminal reports it: xterm's modifyOtherKeys, the kitty keyboard protocol."""


def read_shift_enter() -> None:
    """Shift-Enter reads as Alt-Enter (a new line): prompt_toolkit reads the first as Enter, the second not at all."""
    from prompt_toolkit.input.ansi_escape_sequences import ANSI_SEQUENCES

    for sequence in SHIFT_ENTER:
        ANSI_SEQUENCES[sequence] = (Keys.Escape, Keys.ControlM)


class Composer(Pane):
    """The input box: Enter sends, Alt-Enter or Ctrl-J adds a line, a paste arrives whole (a large one shown as
    `[pasted 30 lines]`); Up and Ctrl-R reach the history, Tab completes, Ctrl-G opens your editor."""

    def __init__(self, history: History, completer: Completer, send: Callable[[str], None],
                 say: Callable[[str], None] = lambda text: None):
        self.send = send
        self.say = say
        read_shift_enter()
        self.pastes = Pastes()
        self.completer = completer
        self.search = SearchToolbar()
        self.box = TextArea(multiline=True, prompt=[("class:prompt", "› ")], history=history, completer=completer,
                            complete_while_typing=True, wrap_lines=True, search_field=self.search,
                            get_line_prefix=lambda line, wrapped: "" if line == 0 and not wrapped else "  ",
                            dont_extend_height=True)
        self.enabled = True
        visible = Condition(lambda: self.enabled)
        rule = Window(height=1, char="─", style="class:rule")
        self.container = ConditionalContainer(
            HSplit([rule, self.box, self.search, CompletionsMenu(max_height=8, scroll_offset=1)]), visible)
        self.bindings = self._keys(has_focus(self.box) & visible)

    @property
    def text(self) -> str:
        """What the box holds, a collapsed paste in full."""
        return self.pastes.expand(self.box.text)

    @text.setter
    def text(self, value: str) -> None:
        """Put `value` in the box as a new entry (the history stays as it was)."""
        self.pastes.clear()
        self.box.buffer.reset(Document(value, len(value)))

    def _keys(self, typing) -> KeyBindings:
        keys = KeyBindings()

        @keys.add("enter", filter=typing)
        def _(event) -> None:
            buffer = event.current_buffer
            state = buffer.complete_state
            if state is not None and state.current_completion is not None:
                buffer.apply_completion(state.current_completion)
                return
            text = self.text
            if not text.strip():
                return
            buffer.history.append_string(text)
            buffer.reset()
            self.pastes.clear()
            self.send(text)

        @keys.add("c-g", filter=typing)
        def _(event) -> None:
            from anges.cli.editor import edit

            def edited(text: str) -> None:
                self.text = text
                event.app.invalidate()

            event.app.create_background_task(edit(self.text, edited, self.say))

        @keys.add(Keys.BracketedPaste, filter=typing)
        def _(event) -> None:
            event.current_buffer.insert_text(self.pastes.collapse(event.data))

        @keys.add("escape", "enter", filter=typing)
        @keys.add("c-j", filter=typing)
        def _(event) -> None:
            event.current_buffer.newline(copy_margin=False)

        @keys.add("tab", filter=typing)
        def _(event) -> None:
            buffer = event.current_buffer
            if buffer.complete_state is not None and buffer.complete_state.completions:
                buffer.complete_next()  # the menu is open: the next choice
                return
            found = list(self.completer.get_completions(buffer.document, CompleteEvent(completion_requested=True)))
            if len(found) == 1:
                buffer.apply_completion(found[0])
            elif found:
                buffer.start_completion(insert_common_part=True)

        return keys
