"""A stream as a tree of events (children in place), and as a readable Markdown report."""

from __future__ import annotations

import copy
import json
import re
from typing import TYPE_CHECKING

from anges.store.events import ChildReturn, Event, StepUsage, kind_of, stream_status, walk
from anges.store.plans import Plan
from anges.store.results import APICall, FileEdit, ShellRun
from anges.store.turns import reasoning_after, turn_reasoning
from anges.util.printable import as_drawn, printable, printable_texts

if TYPE_CHECKING:
    from anges.store.event_store import EventStore
    from anges.store.events import EventStream

def to_markdown(stream: EventStream, store: EventStore) -> str:
    """A readable report: title, metadata, then each event as a section, child agents nested under their parent."""
    status = store.shown_status(stream.uid, stream_status(stream.events_list))
    settings = printable_texts(stream.agent_settings)
    lines = [f"# {printable(str(stream.title or stream.uid))}", ""]
    facts = [
        ("Stream", f"`{stream.uid}`"),
        ("Agent", printable(stream.agent_type or "default")),
        ("Status", status),
        ("Created", stream.created_at.strftime("%Y-%m-%d %H:%M:%S")),
        ("Model", settings.get("model", "")),
        ("Working directory", f"`{settings['cmd_init_dir']}`" if settings.get("cmd_init_dir") else ""),
        ("Command prefix", f"`{settings['prefix_cmd']}`" if settings.get("prefix_cmd") else ""),
        ("Parents", ", ".join(f"`{p}`" for p in stream.parent_event_stream_uids)),
    ]
    lines += [f"- **{name}:** {value}" for name, value in facts if value]
    notes = [n for n in settings.get("notes") or [] if isinstance(n, str) and n.strip()]
    if notes:
        lines += ["", "**Notes:**", ""] + [f"- {_one_line(note)}" for note in notes]
    counters: dict[str, int] = {}
    turns: dict[str, str] = {}  # per stream, the reasoning in effect: a reply's reasoning shows once
    for depth, owner, event in walk(stream, store.load):
        previous = turns.get(owner.uid, "")
        turns[owner.uid] = reasoning_after(event, previous)
        if not kind_of(event.type).in_report:
            continue
        counters[owner.uid] = counters.get(owner.uid, 0) + 1
        shown = printable_event(drawn_output(event))
        lines += ["", *_section(shown, depth, owner if depth else None, counters[owner.uid],
                                printable(turn_reasoning(event, previous)))]
    return "\n".join(lines).rstrip() + "\n"


def _section(event: Event, depth: int, child: EventStream | None, number: int, reasoning: str) -> list[str]:
    data = event.data
    shell, edit, returned, call = ShellRun.of(event), FileEdit.of(event), ChildReturn.of(event), APICall.of(event)
    tool_call = event.type == "action" and "server" in data and "tool" in data
    title = kind_of(event.type).title
    if tool_call:
        title = f"MCP tool {data['server']}.{data['tool']}"
    elif call is not None:
        title = f"API call {call.api}.{call.operation}" if call.api else f"API call {call.operation}"
    elif returned is not None:
        title = f"{title} ({returned.exit_type})"
    heading = "#" * min(2 + depth, 6)
    where = f" — {printable(child.agent_type)} `{child.uid}`" if child is not None else ""
    stamp = event.created_at.strftime("%H:%M:%S")
    out = [f"{heading} {number}. {title}{where}", "", f"*{stamp}*"]
    if reasoning.strip():
        out += ["", *(f"> {line}" if line else ">" for line in reasoning.strip().splitlines())]
    out.append("")
    if shell is not None:
        out += _fence(shell.command, "bash")
        out += ["", _command_status(shell), ""]
        if shell.output().strip():
            out += _fence(shell.output(), "text")
    elif tool_call:
        out += _fence(json.dumps(data.get("args") or {}, indent=2, ensure_ascii=False), "json")
        out += ["", *_fence(event.content, "text")]
    elif call is not None:
        if isinstance(data.get("input"), dict):
            out += [*_fence(json.dumps(data["input"], indent=2, ensure_ascii=False), "json"), ""]
        out += _fence(event.content, "text")
    elif edit is not None and edit.error is None:
        out += [f"`{edit.directive or edit.path}`", ""]
        out += _fence(edit.diff, "diff") if edit.diff else ["(no change)"]
    elif event.type == "approval_requested":
        outside = " It would run outside the sandbox" + (f": {data['justification']}" if data.get("justification")
                                                          else ".")
        out += [f"{data.get('action_type', '')} needs approval: {data.get('reason', '')} (`{data.get('rule', '')}`)."
                + (outside if data.get("escalate") else ""), ""]
        out += _fence(str(data.get("detail", "")), "diff" if data.get("action_type") == "EDIT_FILE" else "text")
    elif event.type == "approval_decided":
        out.append(f"**{data.get('decision', '')}** by `{data.get('by', '')}`"
                   + (" (for the rest of the run)" if data.get("always") else "") + f": {event.content.strip()}")
    elif event.type == "task_interrupted":
        reason = data.get("reason")
        out.append(event.content + (f" (reason: `{reason}`)" if reason else ""))
    elif (plan := Plan.of(event)) is not None:
        out += [f"{plan.progress()}:", ""] + [f"- [{'x' if step.done else ' '}] {step.step}"
                                              + (" (in progress)" if step.status == "in_progress" else "")
                                              for step in plan.steps]
    elif event.type in ("new_child_agent", "resume_child_agent"):
        out += [f"{data.get('agent_type', 'child')} `{data.get('agent_id', '')}`:", ""]
        out += _fence(event.content, "text")
    else:
        out.append(event.content.strip() or "(empty)")
    usage = StepUsage.of(data)
    if usage is not None:
        out += ["", f"<sub>{usage.line()}</sub>"]
    return out


def _command_status(shell: ShellRun) -> str:
    ending = shell.ending()
    return f"{ending[:1].upper()}{ending[1:]}."


def _fence(text: str, language: str) -> list[str]:
    """A fenced code block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", text.rstrip("\n"), fence]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def printable_event(event: Event) -> Event:
    """A copy of `event` whose texts, those in `data` included, are `printable`."""
    texts = {name: printable_texts(getattr(event, name)) for name in ("reasoning", "content", "title", "message",
                                                                         "analysis", "data")}
    return Event(event.type, est_input_token=event.est_input_token, est_output_token=event.est_output_token,
                 created_at=event.created_at, **texts)


def drawn_output(event: Event) -> Event:
    """A command's result with its output as a terminal would have left it (`as_drawn`): no colour codes, a
    progress bar at its latest."""
    outputs = {key: event.data[key] for key in ("stdout", "stderr") if isinstance(event.data.get(key), str)}
    if not any("\x1b" in text or "\r" in text for text in outputs.values()):
        return event
    drawn = copy.copy(event)
    drawn.data = {**event.data, **{key: as_drawn(text) for key, text in outputs.items()}}
    return drawn
