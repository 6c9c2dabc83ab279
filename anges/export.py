"""A stream as a tree of events (children in place), and as a readable Markdown report."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from anges.events import walk
from anges.printable import printable, printable_event, printable_texts

if TYPE_CHECKING:
    from anges.events import Event, EventStream
    from anges.store import EventStore

_TITLES = {
    "new_request": "Request",
    "follow_up_request": "Follow-up request",
    "new_request_from_parent": "Request from the parent agent",
    "follow_up_request_from_parent": "Follow-up from the parent agent",
    "action": "Command",
    "edit_file": "File edit",
    "task_completion": "Task completed",
    "agent_requested_help": "Help needed",
    "agent_text_response": "Answer",
    "task_interrupted": "Stopped",
    "approval_requested": "Approval requested",
    "approval_decided": "Approval decision",
    "new_child_agent": "Child agent started",
    "resume_child_agent": "Child agent resumed",
}


def command_output(event: Event) -> str:
    """A command's output: stdout, then stderr under a `STDERR:` label ("" if none).

    Streams recorded by anges 0.1.x carry no facts in `data`; for them the STDOUT:/STDERR: blocks of the
    content are shown, and nothing rather than a guess.
    """
    if "stdout" in event.data or "stderr" in event.data:
        out, err = event.data.get("stdout") or "", event.data.get("stderr") or ""
        if not err:
            return out
        return f"{out}{'' if not out or out.endswith(chr(10)) else chr(10)}STDERR:\n{err}"
    lines = event.content.splitlines()
    start = next((i for i, line in enumerate(lines) if line in ("STDOUT:", "STDERR:")), len(lines))
    return "\n".join(lines[start:])


def edit_diff(event: Event) -> str:
    """The unified diff of an EDIT_FILE event ("" if there is none)."""
    if "diff" in event.data:
        return event.data["diff"]
    lines = event.content.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("--- ")), len(lines))
    return "\n".join(lines[start:])


def to_markdown(stream: EventStream, store: EventStore) -> str:
    """A readable report: title, metadata, then each event as a section, child agents nested under their parent."""
    from anges.store import stream_status

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
    for depth, owner, event in walk(stream, store=store):
        if event.type in ("child_agent_running", "summary_failed"):
            continue
        counters[owner.uid] = counters.get(owner.uid, 0) + 1
        lines += ["", *_section(printable_event(event), depth, owner if depth else None, counters[owner.uid])]
    return "\n".join(lines).rstrip() + "\n"


def _section(event: Event, depth: int, child: EventStream | None, number: int) -> list[str]:
    data = event.data
    title = _TITLES.get(event.type)
    tool_call = event.type == "action" and "server" in data and "tool" in data
    if tool_call:
        title = f"MCP tool {data['server']}.{data['tool']}"
    elif title is None and event.type.startswith("child_agent_"):
        title = f"Child agent returned ({data.get('exit_type', event.type[len('child_agent_'):])})"
    heading = "#" * min(2 + depth, 6)
    where = f" — {printable(child.agent_type)} `{child.uid}`" if child is not None else ""
    stamp = event.created_at.strftime("%H:%M:%S")
    out = [f"{heading} {number}. {title or event.type}{where}", "", f"*{stamp}*"]
    if event.reasoning.strip():
        out += ["", *(f"> {line}" if line else ">" for line in event.reasoning.strip().splitlines())]
    out.append("")
    if event.type == "action" and "command" in data:
        out += _fence(data["command"], "bash")
        out += ["", _command_status(data), ""]
        output = command_output(event)
        if output.strip():
            out += _fence(output, "text")
    elif tool_call:
        out += _fence(json.dumps(data.get("args") or {}, indent=2, ensure_ascii=False), "json")
        out += ["", *_fence(event.content, "text")]
    elif event.type == "edit_file" and not data.get("error"):
        out += [f"`{data.get('directive') or data.get('path', '')}`", ""]
        diff = edit_diff(event)
        out += _fence(diff, "diff") if diff else ["(no change)"]
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
    elif event.type in ("new_child_agent", "resume_child_agent"):
        out += [f"{data.get('agent_type', 'child')} `{data.get('agent_id', '')}`:", ""]
        out += _fence(event.content, "text")
    else:
        out.append(event.content.strip() or "(empty)")
    usage = data.get("usage")
    if usage:
        cost = f", ${data['cost']:.4f}" if data.get("cost") is not None else ""
        model = f" from {data['model']}" if data.get("model") else ""
        tokens = f"{usage.get('input_tokens', 0)} input / {usage.get('output_tokens', 0)} output tokens"
        out += ["", f"<sub>{tokens}{model}{cost}</sub>"]
    return out


def _command_status(data: dict) -> str:
    if data.get("timed_out"):
        return f"Killed after the timeout ({data.get('duration', 0):.1f} s)."
    if data.get("interrupted"):
        return "Killed: the run was interrupted."
    if data.get("exit_code") is None and data.get("pid"):
        return f"Started in the background: pid {data['pid']}, output in `{data.get('log_path')}`."
    return f"Exit code {data.get('exit_code')} after {data.get('duration', 0):.1f} s."


def _fence(text: str, language: str) -> list[str]:
    """A fenced code block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", text.rstrip("\n"), fence]


def _one_line(text: str) -> str:
    return " ".join(text.split())
