"""What a tool call shows in an editor: its title and location, a permission request's text, how an approval
was decided; every character a person could not see marked, as on every approval surface."""

from __future__ import annotations

import os
import re

from acp import text_block, tool_content
from acp.schema import ToolCallLocation

from anges.safety import approval_text
from anges.util.printable import visible

TITLE_CHARS = 160
DECIDERS = {"editor": "you", "approval=deny": "--approval deny", "no_one": "no one (no one can approve here)",
            "limit": "anges (too long to be shown whole)"}


def describe(agent_type: str, depth: int, action_type: str, args: dict, cwd: str
             ) -> tuple[str, list[ToolCallLocation] | None]:
    """A tool call's title (`[TYPE]` first for a child agent's, at `depth` > 0) and the file it touches, from the
    action's arguments or an event's facts."""
    subject = str(args.get("subject") or "")
    path = ""
    if action_type == "RUN_SHELL_CMD":
        title = one_line(str(args.get("command") or subject or "a command"))
        if args.get("escalate"):
            title += " (outside the sandbox)"
    elif action_type == "EDIT_FILE":
        path = str(args.get("path") or edit_path(args.get("directive_line") or args.get("directive"), cwd)
                   or subject)
        title = f"Edit {shown(path, cwd)}" if path else "Edit a file"
    elif action_type == "CALL_CHILD_AGENT":
        title = delegation(str(args.get("directive") or subject))
    elif action_type == "USE_MCP_TOOL":
        server, tool = args.get("mcp_server_name") or args.get("server"), args.get("tool_name") or args.get("tool")
        title = f"{server}.{tool}" if server and tool else subject or "an MCP tool"
    elif action_type in ("CALL_API", "DESCRIBE_API_OPERATION"):
        name = ".".join(str(args[key]) for key in ("api", "operation") if args.get(key))
        title = f"{args['method']} {args['url']}" if args.get("url") else name or subject or "a web API"
    elif action_type == "READ_MIME_FILES":
        inputs = args.get("inputs") or []
        names = [str(i.get("source", i) if isinstance(i, dict) else i) for i in inputs] if isinstance(
            inputs, list) else []
        title = f"Read {', '.join(names)}" if names else "Read files"
    elif action_type in ("TRUST", "HOOK"):
        title = f"{action_type.capitalize()} {subject}"
    else:
        title = action_type or "an action"
    title = one_line(f"[{agent_type}] {title}" if depth else title)
    return title, [ToolCallLocation(path=path)] if path else None


def request_text(request) -> str:
    """What a person reads to decide on a permission request, as every approval surface shows it
    (`approval_text`): its size, the command whole with every unseen character marked, leaving the sandbox."""
    lines = [f"{visible(request.reason)} [{request.rule}]", f"({approval_text.size(request.detail)})"]
    if request.action_type == "RUN_SHELL_CMD":
        lines.append(fenced("\n".join(approval_text.marked(request.detail))))
    if request.escalate:
        why = "" if request.action_type == "TRUST" else f" The agent says why: {visible(request.justification or '-')}"
        lines.append(f"**{approval_text.ESCALATION_NOTE}**{why}")
    lines.append(f"“Always allow” approves {visible(request.scope)} until this prompt is done.")
    return "\n\n".join(lines)


def declined(approval: dict):
    if approval["decision"] == "cancelled":
        text = "Not run: the run stopped before an answer."
    else:
        text = f"Declined by {decider(approval)}" + (f": {approval['feedback']}" if approval["feedback"] else ".")
    return tool_content(text_block(text))


def decider(approval: dict) -> str:
    if approval["by"] == "rule":
        return f"rule {approval['rule']} ({approval['reason']})"
    return DECIDERS.get(approval["by"], approval["by"] or "the policy")


def delegation(directive: str) -> str:
    words = directive.split()
    if len(words) == 2 and words[0].upper() == "NEW_CHILD_AGENT":
        return f"Delegate to {words[1].lower()}"
    if len(words) == 2 and words[0].upper() == "RESUME_CHILD_AGENT":
        return f"Resume child agent {words[1]}"
    return directive or "Delegate to a child agent"


def edit_path(directive: object, cwd: str) -> str:
    from anges.tools.fileedit import EditError, edit_target

    if not isinstance(directive, str):
        return ""
    try:
        return edit_target(directive, cwd)[1]
    except EditError:
        return ""


def shown(path: str, cwd: str) -> str:
    relative = os.path.relpath(path, cwd) if cwd else path
    return path if relative.startswith(os.pardir) else relative


def one_line(text: str, limit: int = TITLE_CHARS) -> str:
    """A tool call's title: one line, every character a person could not see marked, as on every approval surface."""
    line = " ".join(visible(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def fenced(text: str) -> str:
    """`text` in a Markdown code block whose fence no line of it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"
