"""Approvals on the live screen: one block, answered by one key (y, n, a, t; v shows what is cut).

The channel is called on the approval gate's thread; the keys arrive on the screen's. What the block shows is
decided in `approval_block` alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import ConditionalContainer, HSplit, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.utils import get_cwidth
from prompt_toolkit.widgets import TextArea

from anges.cli.screen import Pane
from anges.safety.approval_text import escalation
from anges.util.clipping import one_line
from anges.util.printable import visible

if TYPE_CHECKING:
    from anges.cli.screen import Screen
    from anges.safety.approval import ApprovalRequest, Decision

TYPING_GAP = 0.4
"""A question that appears within this many seconds of typing into the input box is not answered by the keys that
follow one another faster than this (the typing going on), only by one after a pause."""
WAITING = "waiting for your answer"
"""What the status line says while a request is asked."""
KEYS_ALL = [("y", "yes"), ("n", "no"), ("a", "always"), ("t", "no, and tell the agent why")]
KEYS_PART = [("v", "view it all"), ("n", "no"), ("t", "no, and tell the agent why")]


def approval_block(request: ApprovalRequest, rows: int, width: int, child: bool = False, viewed: bool = False
                   ) -> tuple[list[tuple[str, str]], bool]:
    """What a pending request shows, as (style, line) pairs, within `rows` lines of `width` columns; and whether
    that is all of its detail (else y and a wait for v, which prints it whole above: then it is `viewed`). What
    any surface shows of a request (marks, size, head and tail, the words for leaving the sandbox) comes from
    `anges.safety.approval_text`; the screen only cuts it further to the rows it has. A `child` agent's request
    says which child asks."""
    shown = request.shown()
    who = f" [{visible(request.agent_type)} {request.agent_id}]" if child else ""
    lines = [("approval.head", f"? {request.action_type} needs your approval{who} — {visible(request.reason)} "
                               f"[{request.rule}]")]
    room, inner = max(rows - 8, 3), max(width - 5, 10)
    fits = sum(1 + get_cwidth(line) // inner for line in shown.lines) <= room
    complete = shown.complete and fits
    if not fits:  # the head and tail of the detail itself, so that the marker counts its lines
        shown = request.shown(min(room, len(shown.lines)))
    lines += [("", f"  │ {line}") for line in shown.lines]
    if viewed:
        lines.append(("hint", f"  ({shown.size}; the whole of it is printed above)"))
    else:
        lines.append(("hint" if complete else "notice", f"  ({shown.size}"
                      + ("" if complete else "; only part of it is shown: v shows it all, above") + ")"))
    if request.escalate:
        lines.append(("notice", f"  {one_line(escalation(request.justification), 400)}"))
    lines.append(("hint", f"  always = for the rest of this run: {one_line(visible(request.scope), 300)}"))
    return lines, complete or viewed


@dataclass
class Asking:
    """A request on the screen and its answer, once given."""

    request: ApprovalRequest
    viewed: bool = False
    """`v` printed the whole detail."""
    armed: bool = True
    telling: bool = False
    decision: Decision | None = None
    answered: threading.Event = field(default_factory=threading.Event)


class ApprovalPane(Pane):
    """The approval channel of the live screen (`name` "terminal": its decisions read "by you")."""

    name = "terminal"

    def __init__(self, typed_at: Callable[[], float] = lambda: 0.0):
        self.typed_at = typed_at
        """When text was last typed into the input box (monotonic seconds)."""
        self.screen: Screen | None = None
        self.root = ""
        """The top-level agent's id: a request of any other comes from a child agent."""
        self.asking: Asking | None = None
        self._one_at_a_time = threading.Lock()
        self.feedback = TextArea(multiline=False, prompt="  tell the agent: ", height=1)
        self.block = Window(FormattedTextControl(self._block_text, focusable=True, show_cursor=False),
                            dont_extend_height=True, wrap_lines=True)
        self.container = ConditionalContainer(
            HSplit([self.block, ConditionalContainer(self.feedback, Condition(lambda: self._telling))]),
            Condition(lambda: self.asking is not None))
        self.bindings = self._keys()
        self._previous_focus: Window | None = None

    @property
    def _telling(self) -> bool:
        return self.asking is not None and self.asking.telling

    def attach(self, screen: Screen) -> None:
        self.screen = screen

    def _on(self) -> tuple[Screen, Asking]:
        """The screen and the request on it (the keys and the blocks act only while one is asked)."""
        if self.screen is None or self.asking is None:
            raise RuntimeError("no approval is being asked on a screen")
        return self.screen, self.asking

    # -- the gate's thread ---------------------------------------------------------------------------------------

    def __call__(self, request: ApprovalRequest) -> Decision:
        with self._one_at_a_time:
            if request.cancelled.is_set() or self.screen is None:
                return _decision("cancelled", by="interrupt")
            asking, screen = Asking(request), self.screen
            screen.status.hold(WAITING)  # not "running ...": nothing runs before the answer
            screen.in_loop(lambda: self._show(asking))
            try:
                while not asking.answered.wait(0.05):
                    if request.cancelled.is_set():
                        return _decision("cancelled", by="interrupt")
                return asking.decision or _decision("cancelled", by="interrupt")  # set before `answered` is
            finally:
                screen.status.hold("")
                screen.in_loop(self._hide)

    # -- the screen's thread ---------------------------------------------------------------------------------

    def _show(self, asking: Asking) -> None:
        _discard_typed_ahead()
        asking.armed = time.monotonic() - self.typed_at() > TYPING_GAP
        self.asking = asking
        app = self._on()[0].app
        self._previous_focus = app.layout.current_window
        app.layout.focus(self.block)
        app.invalidate()

    def _hide(self) -> None:
        screen, self.asking = self.screen, None
        self.feedback.text = ""
        if screen is None:
            return
        app = screen.app
        if self._previous_focus is not None:
            try:
                app.layout.focus(self._previous_focus)
            except ValueError:  # no longer on the screen
                pass
        screen.say("")
        app.invalidate()

    def _shown(self) -> tuple[list[tuple[str, str]], bool]:
        """The block at the terminal's size now, and whether the person has all of the detail (on the screen, or
        printed above by `v`): a resize can cut what was whole."""
        screen, asking = self._on()
        size = screen.app.output.get_size()
        return approval_block(asking.request, size.rows, size.columns, asking.request.agent_id != self.root,
                              asking.viewed)

    def _block_text(self):
        if self.asking is None:
            return []
        lines, complete = self._shown()
        keys = KEYS_ALL if complete else KEYS_PART
        asking = self.asking
        fragments = []
        for style, line in lines:
            fragments += [(f"class:{style}" if style else "", line), ("", "\n")]
        if not asking.telling:
            for number, (key, meaning) in enumerate(keys):
                fragments += [("", "  " if number == 0 else " · "), ("class:approval.keys", key),
                              ("class:hint", f" {meaning}")]
        return fragments

    def _answer(self, decision: Decision) -> None:
        asking = self.asking
        if asking is not None and not asking.answered.is_set():
            asking.decision = decision
            asking.answered.set()

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        choosing = Condition(lambda: self.asking is not None and not self.asking.telling)

        def key(name: str):
            def register(handler):
                @keys.add(name, filter=choosing, eager=True)
                def _(event) -> None:
                    if self._typed_on(event):
                        handler(event)
                return handler
            return register

        @key("y")
        def _(event) -> None:
            self._approve(always=False)

        @key("a")
        def _(event) -> None:
            self._approve(always=True)

        @key("n")
        def _(event) -> None:
            self._answer(_decision("deny", by=self.name))

        @key("t")
        def _(event) -> None:
            self._on()[1].telling = True
            event.app.layout.focus(self.feedback)

        @key("v")
        def _(event) -> None:
            self._view()

        @keys.add("enter", filter=Condition(lambda: self._telling))
        def _(event) -> None:
            self._answer(_decision("deny", feedback=self.feedback.text.strip(), by=self.name))

        @keys.add("escape", filter=Condition(lambda: self._telling), eager=True)
        def _(event) -> None:
            self._on()[1].telling = False
            self.feedback.text = ""
            event.app.layout.focus(self.block)

        @keys.add("<any>", filter=choosing)
        def _(event) -> None:
            self._typed_on(event)

        return keys

    def _typed_on(self, event) -> bool:
        """Whether a key answers: not while the person is still typing what began before the question."""
        screen, asking = self._on()
        if asking.armed:
            return True
        if time.monotonic() - screen.previous_key > TYPING_GAP:
            asking.armed = True
            return True
        screen.say("a question appeared while you typed: those keys did not answer it")
        return False

    def _approve(self, always: bool) -> None:
        if not self._shown()[1]:
            self._on()[0].say("part of it is not on the screen: view it all with v before you approve it")
            return
        self._answer(_decision("allow", always=always, by=self.name))

    def _view(self) -> None:
        """Print the whole detail above (into the scrollback): then it may be approved."""
        from rich.text import Text

        screen, asking = self._on()
        lines = visible(asking.request.detail).split("\n")
        framed = [Text.assemble(("  │ ", "dim"), line) for line in lines]
        heading = Text(f"the whole {asking.request.action_type} detail ({len(lines)} lines):", "bold")
        screen.print(screen.display.text([heading, *framed]))
        asking.viewed = True
        screen.say("the whole detail is above; y, n, a or t")


def _decision(verdict: str, **facts) -> Decision:
    from anges.safety.approval import Decision  # the gate has loaded it: not loaded before the input box shows

    return Decision(verdict, **facts)


def _discard_typed_ahead() -> None:
    """Drop what was typed but not read yet, so keys queued before the question cannot answer it."""
    import os
    import termios

    if os.isatty(0):
        try:
            termios.tcflush(0, termios.TCIFLUSH)
        except termios.error:
            pass
