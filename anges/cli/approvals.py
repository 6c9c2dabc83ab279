"""Approvals on the live screen: one block, answered by one key pressed on purpose (y, n, t; a, then Enter; v shows
what is cut).

A key answers only once the question has been on the screen READ_SECONDS (`anges.safety.approval_text`), and only
after TYPING_PAUSE without typing: until then every key goes where it was going, into the input box, a paste
included. So typing that runs on through the moment a question appears, or a paste that ends in `ESC[201~y`,
neither answers it nor is lost, and a person who reads and then presses y is answered at once. The channel is
called on the approval gate's thread; the keys arrive on the screen's. What the block shows is decided in
`approval_block` alone.
"""

from __future__ import annotations

import asyncio
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

from anges.cli.screen import Pane, wrap_columns
from anges.safety.approval_text import READ_SECONDS, escalation, marked
from anges.util.clipping import one_line
from anges.util.printable import visible

if TYPE_CHECKING:
    from anges.cli.screen import Screen
    from anges.safety.approval import ApprovalRequest, Decision
    from anges.safety.approval_text import Shown

TYPING_PAUSE = 1.5
"""Seconds without typing before a key answers a question: people pause between words and sentences for half a
second and more (the key that approved by mistake came after 0.5 s), and a person who stopped to read the question
has paused longer than this by the time they have read it."""
WAITING = "waiting for your answer"
"""What the status line says while a request is asked."""
KEYS_ALL = [("y", "yes"), ("n", "no"), ("a", "always…"), ("t", "no, and tell the agent why")]
KEYS_PART = [("v", "view it all"), ("n", "no"), ("t", "no, and tell the agent why")]
ANSWER_KEYS = "ynatv"
"""The keys that answer (or open) a question; typed before it may be answered, they go into the input box."""


GUTTER = "  │ "
"""Before each line of a request's detail, and of each piece of a line too long for the screen."""
READ_HINT = "  (read it: its keys work once it has been up a moment and you have stopped typing)"
ALWAYS_HINT = "  Enter approves it for the rest of this run · any other key: not always"


def approval_block(request: ApprovalRequest, rows: int, width: int, child: bool = False, viewed: bool = False
                   ) -> tuple[list[tuple[str, str]], bool]:
    """What a pending request shows, as (style, line) pairs, within `rows` rows of `width` columns with its keys
    (their row is kept free); and whether that is all of its detail (else y and a wait for v, which prints it whole
    above: then it is `viewed`). The detail is what shrinks: the reason, the sandbox's words, the scope and the keys
    always show. What any surface shows of a request (marks, size, head and tail, the words for leaving the
    sandbox) comes from `anges.safety.approval_text`; the screen only cuts it further to the rows it has. A `child`
    agent's request says which child asks."""
    full = request.shown()
    who = f" [{visible(request.agent_type)} {request.agent_id}]" if child else ""
    head = [("approval.head", f"? {request.action_type} needs your approval{who} — {visible(request.reason)} "
                              f"[{request.rule}]")]
    tail = []
    if request.escalate:
        tail.append(("notice", f"  {one_line(escalation(request.justification, request.action_type), 400)}"))
    tail.append(("hint", f"  always = for the rest of this run: {one_line(visible(request.scope), 300)}"))
    cut_note = "; only part of it is shown: v shows it all, above"
    fixed = sum(_rows(line, width) for _, line in (*head, *tail)) + _rows(f"  ({full.size}{cut_note})", width) \
        + keys_rows(width)
    inner = max(width - get_cwidth(GUTTER), 1)
    shown = _fitting(request, full, max(rows - fixed, 1), inner)
    complete = full.complete and shown is full
    lines = head + [("", GUTTER + piece) for line in shown.lines for piece in wrap_columns(line, inner)]
    if viewed:
        lines.append(("hint", f"  ({shown.size}; the whole of it is printed above)"))
    else:
        lines.append(("hint" if complete else "notice", f"  ({shown.size}{'' if complete else cut_note})"))
    return lines + tail, complete or viewed


def keys_rows(width: int) -> int:
    """The rows the keys of a question (or what stands for them until they work) take at `width` columns."""
    keys = ["  " + " · ".join(f"{key} {meaning}" for key, meaning in choice) for choice in (KEYS_ALL, KEYS_PART)]
    return max(_rows(line, width) for line in (READ_HINT, ALWAYS_HINT, *keys))


def _fitting(request: ApprovalRequest, full: Shown, room: int, inner: int) -> Shown:
    """The detail as `full` has it when its lines fit `room` rows of `inner` columns, else the most of its head and
    tail that does (one line at the least)."""
    def fits(shown: Shown) -> bool:
        return sum(len(wrap_columns(line, inner)) for line in shown.lines) <= room

    if fits(full):
        return full
    low, high, best = 1, max(len(full.lines) - 1, 1), request.shown(1)
    while low <= high:  # the most lines whose rows fit
        middle = (low + high) // 2
        shown = request.shown(middle)
        if fits(shown):
            low, best = middle + 1, shown
        else:
            high = middle - 1
    return best


def _rows(line: str, width: int) -> int:
    """The rows `line` takes on the screen, wrapped at `width` columns."""
    return max(1, -(-get_cwidth(line) // max(width, 1)))


@dataclass
class Asking:
    """A request on the screen and its answer, once given."""

    request: ApprovalRequest
    drawn_at: float | None = None
    """When the block was first drawn (monotonic seconds): the read time counts from there."""
    viewed: bool = False
    """`v` printed the whole detail."""
    always: bool = False
    """`a` was pressed: Enter approves for the rest of the run, any other key takes it back."""
    telling: bool = False
    decision: Decision | None = None
    answered: threading.Event = field(default_factory=threading.Event)


class ApprovalPane(Pane):
    """The approval channel of the live screen (`name` "terminal": its decisions read "by you"). `give_back(text)`
    puts text into the input box (the `a` of a word typed on, not an answer): none when there is no box."""

    name = "terminal"

    def __init__(self, give_back: Callable[[str], None] | None = None):
        self.give_back = give_back
        self.screen: Screen | None = None
        self.root = ""
        """The top-level agent's id: a request of any other comes from a child agent."""
        self.asking: Asking | None = None
        self._one_at_a_time = threading.Lock()
        self._redraw: asyncio.TimerHandle | None = None
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
        screen.app.after_render += self._drawn

    def _on(self) -> tuple[Screen, Asking]:
        """The screen and the request on it (the keys and the blocks act only while one is asked)."""
        if self.screen is None or self.asking is None:
            raise RuntimeError("no approval is being asked on a screen")
        return self.screen, self.asking

    def ready(self, at: float) -> bool:
        """Whether a key pressed at `at` (monotonic seconds) answers the question on the screen: it has been drawn
        for READ_SECONDS, and nothing was typed for TYPING_PAUSE."""
        asking, screen = self.asking, self.screen
        if asking is None or screen is None or asking.drawn_at is None:
            return False
        return at - asking.drawn_at >= READ_SECONDS and at - screen.typed_at >= TYPING_PAUSE

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
        self.asking = asking  # the keys stay where they were (the input box) until it may be answered
        self._on()[0].app.invalidate()

    def _drawn(self, _app) -> None:
        """After each redraw: the first one that showed the question starts its read time; until it may be
        answered, the screen is drawn again when it may (the keys show then)."""
        asking, screen = self.asking, self.screen
        if asking is None or screen is None:
            return
        now = time.monotonic()
        if asking.drawn_at is None:
            asking.drawn_at = now
        if not self.ready(now) and screen.app.loop is not None:
            wait = max(asking.drawn_at + READ_SECONDS, screen.typed_at + TYPING_PAUSE) - now
            if self._redraw is not None:
                self._redraw.cancel()
            self._redraw = screen.app.loop.call_later(max(wait, 0.01), screen.app.invalidate)

    def _hide(self) -> None:
        screen, self.asking = self.screen, None
        self.feedback.text = ""
        if screen is None:
            return
        self._focus_back(screen)
        screen.say("")
        screen.app.invalidate()

    def _focus_back(self, screen: Screen) -> None:
        if self._previous_focus is not None:
            try:
                screen.app.layout.focus(self._previous_focus)
            except ValueError:  # no longer on the screen
                pass
            self._previous_focus = None

    def _shown(self) -> tuple[list[tuple[str, str]], bool]:
        """The block at the terminal's size now, and whether the person has all of the detail (on the screen, or
        printed above by `v`): a resize can cut what was whole."""
        screen, asking = self._on()
        rows = screen.rows_for(self.container) - (1 if asking.telling else 0)  # the feedback box's row
        return approval_block(asking.request, rows, screen.width(), asking.request.agent_id != self.root,
                              asking.viewed)

    def _block_text(self):
        if self.asking is None:
            return []
        lines, complete = self._shown()
        asking = self.asking
        fragments = []
        for style, line in lines:
            fragments += [(f"class:{style}" if style else "", line), ("", "\n")]
        if asking.telling:
            return fragments
        if asking.always:
            key, rest = ALWAYS_HINT.split(" approves", 1)
            return fragments + [("class:approval.keys", key), ("class:hint", " approves" + rest)]
        if not self.ready(time.monotonic()):
            return fragments + [("class:hint", READ_HINT)]
        for number, (key, meaning) in enumerate(KEYS_ALL if complete else KEYS_PART):
            fragments += [("", "  " if number == 0 else " · "), ("class:approval.keys", key),
                          ("class:hint", f" {meaning}")]
        return fragments

    def _answer(self, decision: Decision) -> None:
        asking = self.asking
        if asking is not None and not asking.answered.is_set():
            asking.decision = decision
            asking.answered.set()

    # -- keys ------------------------------------------------------------------------------------------------------

    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        choosing = Condition(lambda: self.asking is not None and not self.asking.answered.is_set()
                             and not self.asking.telling and not self.asking.always)
        answers = choosing & Condition(lambda: self.screen is not None and self.ready(self.screen.key_at))
        always = Condition(lambda: self.asking is not None and self.asking.always)
        telling = Condition(lambda: self._telling)

        def key(name: str):
            def register(handler):
                @keys.add(name, filter=answers, eager=True)
                def _(event) -> None:
                    self._on()[0].take_key()
                    handler(event)
                return handler
            return register

        @key("y")
        def _(event) -> None:
            self._approve()

        @key("a")
        def _(event) -> None:
            if self._seen_all():
                self._on()[1].always = True

        @key("n")
        def _(event) -> None:
            self._answer(_decision("deny", by=self.name))

        @key("t")
        def _(event) -> None:
            self._on()[1].telling = True
            self._previous_focus = event.app.layout.current_window
            event.app.layout.focus(self.feedback)

        @key("v")
        def _(event) -> None:
            self._view()

        for letter in ANSWER_KEYS:  # too soon: it is typing, and goes where typing goes
            @keys.add(letter, filter=choosing & ~answers)
            def _(event) -> None:
                event.current_buffer.insert_text(event.data)
                self._on()[0].say("the question's keys work once you stop typing"
                                  + ("; that key went into the input box" if self.give_back else ""))

        @keys.add("<any>", filter=always)
        def _(event) -> None:  # not Enter: the `a` was typing, and so is this key
            self._on()[1].always = False
            if self.give_back is not None:
                self.give_back("a")
            event.app.key_processor.feed(event.key_sequence[0], first=True)

        @keys.add("enter", filter=always, eager=True)
        def _(event) -> None:
            self._on()[0].take_key()
            self._answer(_decision("allow", always=True, by=self.name))

        @keys.add("escape", filter=always, eager=True)
        def _(event) -> None:
            self._on()[0].take_key()
            self._on()[1].always = False

        @keys.add("enter", filter=telling)
        def _(event) -> None:
            self._on()[0].take_key()
            self._answer(_decision("deny", feedback=self.feedback.text.strip(), by=self.name))

        @keys.add("escape", filter=telling, eager=True)
        def _(event) -> None:  # what was typed goes back into the input box: it may have been a word typed on
            screen, asking = self._on()
            screen.take_key()
            asking.telling = False
            if self.give_back is not None:
                self.give_back("t" + self.feedback.text)
            self.feedback.text = ""
            self._focus_back(screen)

        return keys

    def _seen_all(self) -> bool:
        if self._shown()[1]:
            return True
        self._on()[0].say("part of it is not on the screen: view it all with v before you approve it")
        return False

    def _approve(self) -> None:
        if self._seen_all():
            self._answer(_decision("allow", by=self.name))

    def _view(self) -> None:
        """Print the whole detail above (into the scrollback): then it may be approved."""
        from rich.text import Text

        screen, asking = self._on()
        lines = marked(asking.request.detail)
        framed = [Text.assemble(("  │ ", "dim"), line) for line in lines]
        heading = Text(f"the whole {asking.request.action_type} detail ({len(lines)} lines):", "bold")
        screen.print(screen.display.text([heading, *framed]))
        asking.viewed = True
        screen.say("the whole detail is above; y, n, a or t")


def _decision(verdict: str, **facts) -> Decision:
    from anges.safety.approval import Decision  # the gate has loaded it: not loaded before the input box shows

    return Decision(verdict, **facts)
