"""What the ACP layer reads from recorded events: every `Event.data` key it uses is read here, and only here."""

from __future__ import annotations

from typing import Any

from anges.store.events import Event
from anges.store.results import FileEdit, ShellRun

EVENT_ACTION_TYPES = {"edit_file": "EDIT_FILE", "new_child_agent": "CALL_CHILD_AGENT",
                      "resume_child_agent": "CALL_CHILD_AGENT"}


def action_type(event: Event) -> str:
    """The action type an event is the result of ("" when it is not an action's result)."""
    data = event.data
    if event.type in EVENT_ACTION_TYPES:
        return EVENT_ACTION_TYPES[event.type]
    if event.type.startswith("child_agent_"):
        return "CALL_CHILD_AGENT"
    if event.type in ("approval_requested", "approval_decided"):
        return str(data.get("action_type") or "")
    if event.type == "action":
        return str(data.get("action_type") or ("RUN_SHELL_CMD" if "command" in data else ""))
    return ""


def action_args(event: Event) -> dict:
    """The arguments of the action an event records, as far as its facts tell (for naming a tool call)."""
    data = event.data
    shown = ("command", "path", "directive", "server", "tool", "inputs", "api", "operation", "method", "url")
    args: dict[str, Any] = {key: data[key] for key in shown if key in data}
    if "escalated" in data:
        args["escalate"] = bool(data["escalated"])
    if event.type in ("approval_requested", "approval_decided") and data.get("subject"):
        args["subject"] = str(data["subject"])
    return args


def raw_input(event: Event) -> dict | None:
    """The input the model gave the action an event records (a tool call's `rawInput`); None when it says none."""
    data = event.data
    if event.type in ("new_child_agent", "resume_child_agent"):
        return {"directive": str(data.get("directive") or ""), "agent_input": event.content}
    value = data.get("input")
    return dict(value) if isinstance(value, dict) else None


def failed(event: Event) -> bool:
    """True when the action did not do what was asked: an error, a tool error, a web API's error status (4xx, 5xx), a
    non-zero exit, a killed command."""
    data = event.data
    if data.get("error") or data.get("is_error"):
        return True
    if data.get("action_type") == "CALL_API" and isinstance(data.get("status"), int) and data["status"] >= 400:
        return True
    shell = ShellRun.of(event)
    return shell is not None and (shell.state in ("timed_out", "interrupted") or shell.exit_code not in (0, None))


def command_status(event: Event) -> str:
    """How a command ended, in a few words."""
    shell = ShellRun.of(event) or ShellRun("")
    return f"exit {shell.exit_code} · {shell.duration:.1f} s" if shell.state == "exited" else shell.ending()


def command_text(event: Event) -> str:
    """A command's output (stdout, then stderr)."""
    shell = ShellRun.of(event)
    return shell.output() if shell is not None else ""


def exit_code(event: Event) -> int | None:
    """A command's exit code (None while in the background or when it was killed)."""
    return event.data.get("exit_code")


def edit_path(event: Event) -> str:
    """The absolute path an edit changed ("" when it failed before finding one)."""
    return str(event.data.get("path") or "")


def edit_diff_text(event: Event) -> str:
    """An edit's unified diff ("" if none)."""
    edit = FileEdit.of(event)
    return edit.diff if edit is not None else ""


def error(event: Event) -> str:
    """The error an action reported ("" if none)."""
    value = event.data.get("error")
    return str(value) if value and value is not True else ""


def child_id(event: Event) -> str:
    """The child stream a delegation event is about."""
    return str(event.data.get("agent_id") or "")


def child_exit(event: Event) -> str:
    """How a child agent returned: task_completion, agent_requested_help, agent_text_response or task_interrupted."""
    return str(event.data.get("exit_type") or event.type[len("child_agent_"):])


def request_id(event: Event) -> str:
    """The approval request an approval event belongs to ("" for a decision nobody was asked about)."""
    return str(event.data.get("request_id") or "")


def approval(event: Event) -> dict:
    """The facts of an approval event: decision, by, rule, reason, feedback, skipped, subject, detail, scope."""
    data = event.data
    return {"decision": data.get("decision", ""), "by": data.get("by", ""), "rule": data.get("rule", ""),
            "reason": data.get("reason", ""), "feedback": data.get("feedback", ""),
            "skipped": int(data.get("skipped") or 0), "subject": data.get("subject", ""),
            "detail": data.get("detail", ""), "scope": data.get("scope", ""), "escalate": bool(data.get("escalate"))}


def stop_reason(event: Event) -> str:
    """Why a run stopped (interrupt, timeout, event_limit, budget, ...), from its `task_interrupted` event."""
    return str(event.data.get("reason") or "")
