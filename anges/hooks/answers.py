"""What a hook answers (go on, block with a reason, add context for the model), read from a command's exit code and
output or a Python hook's return value, and what one hook run came to."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

NO_REASON = "(the hook gave no reason)"


@dataclass(frozen=True)
class Block:
    """A Python hook's answer that stops what comes next (the action, the completion, the request)."""

    reason: str


@dataclass(frozen=True)
class Context:
    """A Python hook's answer that adds text the model reads (at the start of a run, with a request or a result)."""

    text: str


@dataclass
class Outcome:
    """What one hook run came to: ok, blocked, failed, timeout, stopped or unreadable (an answer anges cannot read)."""

    status: str
    reason: str = ""
    """Why it blocked (its words), or why it failed."""
    context: str = ""
    """Text for the model."""
    exit_code: int | None = None
    duration: float = 0.0
    output: str = ""
    """What it printed (stdout, then stderr), for people; bounded."""

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "timeout", "unreadable")


def command_outcome(exit_code: int, stdout: str, stderr: str) -> Outcome:
    """A command hook's answer: exit 0 goes on (a JSON object on stdout may block or add context; other text is
    context), exit 2 blocks with stderr as the reason, any other exit fails."""
    out, err = stdout.strip(), stderr.strip()
    if exit_code == 2:
        return Outcome("blocked", reason=err or out or NO_REASON, exit_code=2)
    if exit_code != 0:
        how = f"ended by signal {-exit_code}" if exit_code < 0 else f"exited with code {exit_code}"
        return Outcome("failed", reason=f"{how}{': ' + err.splitlines()[-1] if err else ''}", exit_code=exit_code)
    if not out.startswith("{"):
        return Outcome("ok", context=out, exit_code=0)
    try:
        answer = json.loads(out)
    except ValueError as exc:
        return Outcome("unreadable", reason=f"its output starts like JSON but is not: {exc}", exit_code=0)
    return answer_outcome(answer, exit_code=0)


def answer_outcome(answer: Any, exit_code: int | None = None) -> Outcome:
    """A hook's structured answer: None, a `Block` or `Context`, or a dict as a command prints it
    (`{"decision": "block", "reason": ...}`, `{"context": ...}`)."""
    if answer is None:
        return Outcome("ok", exit_code=exit_code)
    if isinstance(answer, Block):
        return Outcome("blocked", reason=str(answer.reason) or NO_REASON, exit_code=exit_code)
    if isinstance(answer, Context):
        return Outcome("ok", context=str(answer.text), exit_code=exit_code)
    if not isinstance(answer, dict):
        return Outcome("unreadable", reason=f"it answered {type(answer).__name__}, not an object", exit_code=exit_code)
    specific = answer.get("hookSpecificOutput")
    nested = specific.get("additionalContext") if isinstance(specific, dict) else None  # Claude Code's place for it
    context = answer.get("context", answer.get("additionalContext", nested))
    decision, reason = answer.get("decision"), answer.get("reason")
    if context is not None and not isinstance(context, str) or reason is not None and not isinstance(reason, str):
        return Outcome("unreadable", reason="its `context` and `reason` must be strings", exit_code=exit_code)
    if decision not in (None, "", "block", "approve", "allow"):
        return Outcome("unreadable", reason=f"unknown decision {str(decision)[:80]!r} (block is the one anges knows)",
                       exit_code=exit_code)
    if decision == "block":
        return Outcome("blocked", reason=(reason or "").strip() or NO_REASON, context=context or "",
                       exit_code=exit_code)
    return Outcome("ok", context=(context or "").strip(), exit_code=exit_code)
