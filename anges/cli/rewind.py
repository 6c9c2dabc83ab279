"""`/rewind` (and Esc Esc at an empty box): take the conversation back to before one of your requests, with its
files if you like, and get the request back into the box to edit.

Nothing is lost: the conversation goes on in a new stream that holds a copy of the events before that request
(and the summaries within them), with a `conversation_rewound` event that tells the model what happened; the
stream rewound from stays as it was, and its id is in the new one's settings (`forked_from`). Taking the files
back is an undo on the old stream (`Checkpoints.undo`), recorded there like any other.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from anges.cli.commands import Interactive, age, command
from anges.cli.mentions import MENTIONS_MARK
from anges.store.events import REQUEST_EVENT_TYPES, Event, EventStream, EventSummary
from anges.util.clipping import one_line
from anges.util.printable import printable

if TYPE_CHECKING:
    from anges.checkpoints.workspace import UndoPlan


@command("/rewind", "take the conversation (and the files, if you like) back to before one of your requests",
         idle_only=True)
def rewind(session: Interactive, argument: str) -> None:
    stream = session.stream
    requests = [(number, event) for number, event in enumerate(stream.events_list, 1)
                if event.type in REQUEST_EVENT_TYPES[:2]]
    if not requests:
        session.say("nothing to rewind: no request yet", "dim")
        return
    now = datetime.datetime.now()
    choices = [(str(number), f"{age(now - event.created_at):>9}  event {number:<4} "
                             f"{printable(one_line(typed_text(event.content), 90))}")
               for number, event in reversed(requests)]

    def chosen(value: str | None) -> None:
        if value is not None:
            session.run_in_background(lambda: _files_choice(session, int(value)))

    session.screen.in_loop(lambda: session.picker.offer("rewind to before which request? (newest first)", choices,
                                                        chosen, filter=True))


def _files_choice(session: Interactive, number: int) -> None:
    """Ask whether the files go back too, when steps after the request changed them."""
    plan, why = _files_plan(session, number)
    if plan is None:
        if why:
            session.say(why, "dim")
        _rewind(session, number, None)
        return
    changed = plan.diff.stat_line
    choices = [("both", f"the conversation and the files ({changed})"),
               ("conversation", "the conversation only: the files stay as they are now")]

    def chosen(value: str | None) -> None:
        if value is not None:
            session.run_in_background(lambda: _rewind(session, number, plan if value == "both" else None))
        else:
            session.say("not rewound", "dim")

    session.screen.in_loop(lambda: session.picker.offer(f"take the files back to before event {number} too?",
                                                        choices, chosen))


def _files_plan(session: Interactive, number: int) -> tuple[UndoPlan | None, str]:
    """The undo that takes the files back to before request `number` (None when none changed, or it cannot be
    done, and why)."""
    from anges.cli.commands import _checkpoints
    from anges.exceptions import CheckpointError

    checkpoints = _checkpoints(session)
    try:
        later = [step for step in checkpoints.steps() if step.number > number and not step.undone]
        if not later:
            return None, ""
        plan = checkpoints.plan_undo(later[0].number)
    except CheckpointError as exc:
        return None, f"the files stay as they are: {exc}"
    if not plan.diff.files:
        return None, ""
    if plan.conflicts:
        names = ", ".join(conflict.path for conflict in plan.conflicts[:5])
        return None, (f"the files stay as they are: someone other than the agent changed {names} since (/undo "
                      f"{later[0].number} --overwrite takes them back anyway)")
    return plan, ""


def _rewind(session: Interactive, number: int, plan: UndoPlan | None) -> None:
    old = session.stream
    request = old.events_list[number - 1]
    if plan is not None:
        from anges.cli.commands import _checkpoints

        _checkpoints(session).undo(plan.to.number, expect=plan.token, by="rewind")
    new = fork(old, number, files_back=plan is not None, changed=plan.diff.stat_line if plan is not None else "",
               template_dir=session.setup.config.prompt.template_dir)
    session.setup.store.sync(new)
    session.use(new, show_earlier=False)
    files = f"; the files are back too ({plan.diff.stat_line})" if plan is not None else "; the files stay as they are"
    session.say(f"rewound to before event {number}: stream {new.uid} goes on from there{files}. The whole of "
                f"{old.uid} is kept (anges show {old.uid}). Your request is back in the box.", "dim")
    text = typed_text(request.content)
    session.screen.in_loop(lambda: session.edit(text))


def fork(stream: EventStream, before: int, files_back: bool = False, changed: str = "", template_dir: str = ""
         ) -> EventStream:
    """A new stream with a copy of `stream`'s events before event `before` (and the summaries within them), and,
    when any, a `conversation_rewound` event that tells the model what was left out."""
    from anges.prompt.templates import render_template

    title = stream.title if stream.title != stream.uid else None
    new = EventStream(title=f"{title} (rewound)" if title else None, agent_type=stream.agent_type)
    new.agent_settings = {**stream.agent_settings, "forked_from": {"stream": stream.uid, "before_event": before}}
    new.events_list = [Event.from_dict(event.to_dict()) for event in stream.events_list[:before - 1]]
    new.event_summaries_list = [EventSummary.from_dict(summary.to_dict()) for summary in stream.event_summaries_list
                                if summary.end_event_idx < before]
    if new.events_list:
        content = render_template("conversation_rewound.j2", template_dir, before=before, origin=stream.uid,
                                  files_back=files_back, changed=changed).strip()
        message = f"rewound to before event {before} of {stream.uid}" + (" (files too)" if files_back else "")
        new.events_list.append(Event("conversation_rewound", content=content, message=message, data={
            "origin": stream.uid, "before_event": before, "files_back": files_back}))
    return new


def typed_text(content: str) -> str:
    """A request as typed: without the files `@` attached to it."""
    return content.split(MENTIONS_MARK, 1)[0]
