"""A choice on the live screen: a list, Up and Down to move, Enter to take, Esc to leave it (`/resume`, `/model`,
`/rewind`); with `filter`, what is typed narrows the list. A long list shows the rows around the one chosen."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import ConditionalContainer, Window
from prompt_toolkit.layout.controls import FormattedTextControl

from anges.cli.screen import Pane, Screen

ROWS = 10
"""Choices shown at once (the rest: "↑ 3 more", "↓ 12 more")."""


class Picker(Pane):
    """Offers (value, label) choices; `choose` is called with the value taken (None when left)."""

    def __init__(self, screen_of: Callable[[], Screen]):
        self.screen_of = screen_of
        self.title = ""
        self.choices: Sequence[tuple[str, str]] = ()
        self.index = 0
        self.query = ""
        self.filtering = False
        self.choose: Callable[[str | None], None] | None = None
        self.window = Window(FormattedTextControl(self._text, focusable=True, show_cursor=False),
                             dont_extend_height=True)
        self.container = ConditionalContainer(self.window, Condition(lambda: self.open))
        self.bindings = self._keys()
        self._previous: Window | None = None

    @property
    def open(self) -> bool:
        return self.choose is not None

    def offer(self, title: str, choices: Sequence[tuple[str, str]], choose: Callable[[str | None], None],
              filter: bool = False) -> None:
        """Show the choices (on the screen's thread); with `filter`, typing narrows them."""
        layout = self.screen_of().app.layout
        self.title, self.choices, self.index, self.choose = title, choices, 0, choose
        self.query, self.filtering = "", filter
        self._previous = layout.current_window
        layout.focus(self.window)
        self.screen_of().refresh()

    @property
    def shown(self) -> list[tuple[str, str]]:
        """The choices the filter lets through (every word typed is in the label, in any case)."""
        words = self.query.lower().split()
        return [choice for choice in self.choices if all(word in choice[1].lower() for word in words)]

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
        shown = self.shown
        self.index = min(self.index, max(len(shown) - 1, 0))
        fragments = [("class:approval.head", self.title), ("", "\n")]
        if self.filtering:
            fragments += [("class:hint", "  filter: "), ("", self.query + "▏"), ("", "\n")]
        start = min(max(self.index - ROWS // 2, 0), max(len(shown) - ROWS, 0))
        if start:
            fragments += [("class:hint", f"  ↑ {start} more"), ("", "\n")]
        for number, (_, label) in enumerate(shown[start:start + ROWS], start):
            chosen = number == self.index
            fragments += [("class:approval.keys" if chosen else "", ("› " if chosen else "  ") + label), ("", "\n")]
        if len(shown) > start + ROWS:
            fragments += [("class:hint", f"  ↓ {len(shown) - start - ROWS} more"), ("", "\n")]
        if not shown:
            fragments += [("class:hint", "  (nothing matches)"), ("", "\n")]
        typing = " · type to filter" if self.filtering else ""
        fragments.append(("class:hint", f"  ↑↓ choose · Enter take · Esc leave{typing}"))
        return fragments

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        picking = Condition(lambda: self.open)

        @keys.add("up", filter=picking)
        def _(event) -> None:
            self.index = (self.index - 1) % max(len(self.shown), 1)

        @keys.add("down", filter=picking)
        def _(event) -> None:
            self.index = (self.index + 1) % max(len(self.shown), 1)

        @keys.add("enter", filter=picking)
        def _(event) -> None:
            shown = self.shown
            if shown:
                self._close(shown[min(self.index, len(shown) - 1)][0])

        @keys.add("escape", filter=picking, eager=True)
        @keys.add("c-c", filter=picking)
        def _(event) -> None:
            self._close(None)

        @keys.add("backspace", filter=picking)
        def _(event) -> None:
            self.query = self.query[:-1]

        @keys.add("<any>", filter=picking)
        def _(event) -> None:
            """Typing narrows a list that filters; other keys do nothing while choosing."""
            if self.filtering and event.data.isprintable() and len(event.data) == 1:
                self.query += event.data
                self.index = 0

        return keys
