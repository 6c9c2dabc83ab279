"""A choice on the live screen: a short list, Up and Down to move, Enter to take, Esc to leave it (`/resume`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import ConditionalContainer, Window
from prompt_toolkit.layout.controls import FormattedTextControl

from anges.cli.screen import Pane, Screen


class Picker(Pane):
    """Offers (value, label) choices; `choose` is called with the value taken (None when left)."""

    def __init__(self, screen_of: Callable[[], Screen]):
        self.screen_of = screen_of
        self.title = ""
        self.choices: Sequence[tuple[str, str]] = ()
        self.index = 0
        self.choose: Callable[[str | None], None] | None = None
        self.window = Window(FormattedTextControl(self._text, focusable=True, show_cursor=False),
                             dont_extend_height=True)
        self.container = ConditionalContainer(self.window, Condition(lambda: self.open))
        self.bindings = self._keys()
        self._previous: Window | None = None

    @property
    def open(self) -> bool:
        return self.choose is not None

    def offer(self, title: str, choices: Sequence[tuple[str, str]], choose: Callable[[str | None], None]) -> None:
        """Show the choices (on the screen's thread)."""
        layout = self.screen_of().app.layout
        self.title, self.choices, self.index, self.choose = title, choices, 0, choose
        self._previous = layout.current_window
        layout.focus(self.window)
        self.screen_of().refresh()

    def _close(self, value: str | None) -> None:
        choose, self.choose = self.choose, None
        layout = self.screen_of().app.layout
        try:
            if self._previous is not None:
                layout.focus(self._previous)
        except ValueError:
            pass
        self.screen_of().refresh()
        if choose is not None:
            choose(value)

    def _text(self):
        fragments = [("class:approval.head", self.title), ("", "\n")]
        for number, (_, label) in enumerate(self.choices):
            chosen = number == self.index
            fragments += [("class:approval.keys" if chosen else "", ("› " if chosen else "  ") + label), ("", "\n")]
        fragments.append(("class:hint", "  ↑↓ choose · Enter take · Esc leave"))
        return fragments

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        picking = Condition(lambda: self.open)

        @keys.add("up", filter=picking)
        def _(event) -> None:
            self.index = (self.index - 1) % len(self.choices)

        @keys.add("down", filter=picking)
        def _(event) -> None:
            self.index = (self.index + 1) % len(self.choices)

        @keys.add("enter", filter=picking)
        def _(event) -> None:
            self._close(self.choices[self.index][0])

        @keys.add("escape", filter=picking, eager=True)
        @keys.add("c-c", filter=picking)
        def _(event) -> None:
            self._close(None)

        @keys.add("<any>", filter=picking)
        def _(event) -> None:
            """Other keys do nothing while choosing."""

        return keys
