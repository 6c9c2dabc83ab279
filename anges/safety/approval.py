"""Approvals: what an `ask` becomes, and the channels a person answers on.

A channel is any callable `channel(request: ApprovalRequest) -> Decision` (or a shorthand: True / False,
"allow", "deny", "always"). It may block; it should return soon after `request.cancelled` is set (the
run was interrupted), and the run does not wait for it either way. The CLI's `TerminalPrompt` is one;
the library's `approval=` callback, the web chat and editor integrations are others.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from anges.exceptions import RunStopped
from anges.safety import approval_text
from anges.safety.approval_text import MAX_DETAIL_CHARS, Shown
from anges.store.events import Event, new_id
from anges.util.clipping import shorten
from anges.util.printable import visible
from anges.util.waiting import future_done, wait_for

if TYPE_CHECKING:
    from anges.config.types import Config
    from anges.prompt.parsing import ParsedReply
    from anges.safety.policy import Policy, Verdict

LEAVING_THE_SANDBOX = ("escalation", "writable_paths", "protected_paths", "hidden_paths", "private_paths", "network")
"""The rules whose `ask` lets an action do what the sandbox forbids commands: --approval auto does not approve
them unless `safety.auto_escalate` says so."""

log = logging.getLogger("anges.safety.approval")

MODES = ("ask", "auto", "deny")
MAX_REASONING_CHARS = 2_000
"""The most of the model's reasoning a request keeps."""
_ALLOW_WORDS = ("allow", "approve", "approved", "yes", "y")
_DENY_WORDS = ("deny", "decline", "declined", "no", "n")


class Asker(Protocol):
    """What the gate knows of the agent asking for an action (an action's context): who it is, the reply that
    asked, its secrets, how to record an event, and when to stop waiting."""

    agent_id: str
    agent_type: str
    secrets: list[str]
    app_config: Config

    @property
    def reply(self) -> ParsedReply | None: ...
    @property
    def record(self) -> Callable[..., None]: ...
    @property
    def interrupt_check(self) -> Callable[[], bool]: ...


@dataclass
class ApprovalRequest:
    """One action waiting for a person's answer; `to_data()` is what the `approval_requested` event records."""

    action_type: str
    subject: str
    """The command, the file path, server.tool, or the child directive."""
    detail: str
    """What to show: the command, the diff the edit would make, the tool's arguments."""
    rule: str
    """What asked: `safety.rules[N]`, `safety.default_rules[N]`, `escalation`, `unsandboxed`, `writable_paths`,
    `protected_paths`, `hidden_paths`, `private_paths`, `network`."""
    reason: str
    scope: str
    """What an "always" answer approves for the rest of the run."""
    escalate: bool = False
    """Approving runs the command outside the sandbox."""
    justification: str = ""
    """The model's one-line reason for leaving the sandbox."""
    reasoning: str = ""
    """The model's reasoning in the reply that asks for the action (the web chat's card shows it while it waits)."""
    agent_id: str = ""
    agent_type: str = ""
    id: str = field(default_factory=new_id)
    created_at: str = field(default_factory=lambda: datetime.now().isoformat(timespec="seconds"))
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    """Set when the run stops before an answer: a channel should stop waiting and return."""

    def shown(self, max_lines: int = approval_text.MAX_SHOWN_LINES) -> Shown:
        """Its detail as a surface shows it first: marked, its size, head and tail when too long for the screen
        (then `complete` is False and approval waits until the person has opened all of it)."""
        return approval_text.shown(self.detail, max_lines)

    @property
    def refusal(self) -> str:
        """Why it cannot be approved ("" when it can): too long to be shown whole. The gate declines such a request
        without asking."""
        return approval_text.refusal(self.detail)

    def text(self) -> str:
        """The whole request as a person should read it (for a channel of your own): what asks and why, its size,
        the whole detail with every unseen character marked, leaving the sandbox, what "always" approves."""
        lines = [f"{self.action_type} needs your approval — {visible(self.reason)} [{self.rule}]",
                 f"({approval_text.size(self.detail)})", *approval_text.marked(self.detail)]
        if self.escalate:
            lines.append(approval_text.escalation(self.justification, self.action_type))
        lines.append(f"always = for the rest of this run: {visible(self.scope)}")
        return "\n".join(lines)

    def to_data(self) -> dict:
        """JSON-able facts of the request; a detail over MAX_DETAIL_CHARS is cut, and `detail_cut` says so (a
        channel showing the record must not offer approval for what it cannot show)."""
        keys = ("id", "action_type", "subject", "detail", "rule", "reason", "scope", "escalate", "justification",
                "reasoning", "agent_id", "agent_type", "created_at")
        data = {key: getattr(self, key) for key in keys}
        data["request_id"] = data.pop("id")
        data["detail_cut"] = len(self.detail) > MAX_DETAIL_CHARS
        if data["detail_cut"]:
            left = len(self.detail) - MAX_DETAIL_CHARS
            data["detail"] = f"{self.detail[:MAX_DETAIL_CHARS]}\n… ({left} more characters)"
        return data


@dataclass
class Decision:
    """A person's (or the policy's) answer."""

    verdict: str
    """allow or deny (cancelled when the run stopped first)."""
    always: bool = False
    """Approve the same action and rule for the rest of the run."""
    feedback: str = ""
    """Why, in the person's words; sent back to the model."""
    by: str = ""
    """Who decided: rule, auto, approval=deny, no_one, always, interrupt, or the channel's name."""


@dataclass
class Permit:
    """The outcome of the gate for one action."""

    allowed: bool
    verdict: Verdict
    decision: Decision | None = None
    request_id: str | None = None

    @property
    def escalate(self) -> bool:
        return self.allowed and self.verdict.escalate

    def facts(self) -> dict:
        """The `approval` facts put on the action's event (empty for a plain allow)."""
        if self.decision is None:
            return {}
        return {"request_id": self.request_id, "rule": self.verdict.rule, "by": self.decision.by,
                "escalated": self.verdict.escalate}


def as_decision(answer: Any, by: str) -> Decision:
    """A channel's answer as a Decision: a Decision, True/False, or one of allow, deny, always."""
    if isinstance(answer, Decision):
        answer.by = answer.by or by
        if answer.verdict not in ("allow", "deny"):
            answer.verdict, answer.always = "deny", False
        return answer
    if isinstance(answer, bool):
        return Decision("allow" if answer else "deny", by=by)
    word = str(answer).strip().lower() if isinstance(answer, str) else ""
    if word in ("always", "a"):
        return Decision("allow", always=True, by=by)
    if word in _ALLOW_WORDS:
        return Decision("allow", by=by)
    if word in _DENY_WORDS:
        return Decision("deny", by=by)
    return Decision("deny", feedback=f"the approval channel gave an answer anges does not understand: {answer!r}",
                    by=by)


def channel_name(channel) -> str:
    """How a channel is named in the record: its `name` attribute, else `callback`."""
    name = getattr(channel, "name", "")
    return name if isinstance(name, str) and name and not name.startswith("<") else "callback"


class Gate:
    """Policy, then grants, then the approval mode and channel: the one place an action is let through or not.

    One gate serves a run and its child agents, so they ask on the same channel and share "always" answers.
    """

    def __init__(self, policy: Policy, mode: str, channel=None, auto_escalate: bool = False):
        self.policy = policy
        self.mode = mode
        self.channel = channel
        self.auto_escalate = auto_escalate
        """--approval auto also approves leaving the sandbox (escalations, paths outside the writable ones)."""
        self.grants: set[tuple] = set()
        self._lock = threading.Lock()

    def asks(self, action_type: str, args: dict) -> bool:
        """Whether `check` would ask the channel about this action now (it decides nothing and records nothing)."""
        if self.channel is None or self.mode in ("auto", "deny"):
            return False
        verdict = self.policy.decide(action_type, args)
        with self._lock:
            return verdict.decision == "ask" and verdict.grant not in self.grants

    def check(self, asker: Asker, action_type: str, args: dict) -> Permit:
        """Decide one action for `asker` (who asks, how to record, when to stop); records `approval_requested` while
        a person is asked. Raises RunStopped when the run stops first."""
        verdict = self.policy.decide(action_type, args)
        if verdict.decision == "allow":
            return Permit(True, verdict)
        if verdict.decision == "deny":
            return Permit(False, verdict, Decision("deny", by="rule"))
        with self._lock:
            if verdict.grant in self.grants:
                return Permit(True, verdict, Decision("allow", by="always"))
        if self.mode == "auto":
            if verdict.rule in LEAVING_THE_SANDBOX and not self.auto_escalate:
                return Permit(False, verdict, Decision("deny", by="auto"))
            return Permit(True, verdict, Decision("allow", by="auto"))
        if self.mode == "deny":
            return Permit(False, verdict, Decision("deny", by="approval=deny"))
        if self.channel is None:
            return Permit(False, verdict, Decision("deny", by="no_one"))
        request = self._request(asker, action_type, args, verdict)
        if request.refusal:  # no one can be shown all of it: no one is asked
            return Permit(False, verdict, Decision("deny", feedback=request.refusal, by="limit"))
        asker.record(Event("approval_requested", content=_request_text(request), message=_request_text(request),
                           data={**request.to_data(), "channel": channel_name(self.channel)}))
        decision = self._wait(asker, request, verdict)
        if decision.verdict == "allow" and decision.always:
            with self._lock:
                self.grants.add(verdict.grant)
        return Permit(decision.verdict == "allow", verdict, decision, request.id)

    def ask(self, asker: Asker, request: ApprovalRequest) -> Decision:
        """Ask the channel about a request no policy made (content to trust, say), recorded as `approval_requested`
        while it waits; RunStopped when the run stops first. The caller records the decision."""
        from anges.safety.policy import Verdict

        asker.record(Event("approval_requested", content=_request_text(request), message=_request_text(request),
                           data={**request.to_data(), "channel": channel_name(self.channel)}))
        verdict = Verdict("ask", request.rule, request.reason, request.subject, escalate=request.escalate)
        return self._wait(asker, request, verdict)

    def decided_event(self, asker: Asker, action_type: str, permit: Permit, skipped: int = 0) -> Event:
        """The `approval_decided` event: the facts, and for the model what happened and what to do."""
        from anges.prompt.templates import render_template

        verdict, decision = permit.verdict, permit.decision or Decision("allow")  # None: a plain allow
        facts = {"request_id": permit.request_id, "action_type": action_type, "subject": verdict.subject[:2000],
                 "decision": decision.verdict, "always": decision.always, "by": decision.by, "rule": verdict.rule,
                 "reason": verdict.reason, "feedback": decision.feedback, "escalate": verdict.escalate,
                 "skipped": skipped}
        content = render_template("approval_decided.j2", asker.app_config.prompt.template_dir, **facts).strip()
        return Event("approval_decided", content=content, message=_decided_text(facts), data=facts)

    def _request(self, asker: Asker, action_type: str, args: dict, verdict: Verdict) -> ApprovalRequest:
        from anges.util.masking import mask_secrets

        secrets = asker.secrets
        return ApprovalRequest(
            action_type=action_type, subject=mask_secrets(verdict.subject, secrets),
            detail=mask_secrets(_detail(action_type, args, self.policy.cwd, verdict), secrets), rule=verdict.rule,
            reason=verdict.reason, scope=mask_secrets(verdict.scope, secrets), escalate=verdict.escalate,
            justification=mask_secrets(str(args.get("escalate") or ""), secrets) if verdict.escalate else "",
            reasoning=shorten(mask_secrets(asker.reply.reasoning if asker.reply else "", secrets), MAX_REASONING_CHARS),
            agent_id=asker.agent_id, agent_type=asker.agent_type)

    def _wait(self, asker: Asker, request: ApprovalRequest, verdict: Verdict) -> Decision:
        """The channel's answer; abandoned (and the request cancelled) as soon as the run must stop."""
        name = channel_name(self.channel)
        answer: Future = Future()

        def ask() -> None:
            try:
                answer.set_result(self.channel(request))
            except BaseException as exc:  # noqa: BLE001  (handed to the waiting thread)
                answer.set_exception(exc)

        threading.Thread(target=ask, name=f"anges-approval-{request.id}", daemon=True).start()
        try:
            if wait_for(future_done(answer), asker.interrupt_check) == "done":
                try:
                    return as_decision(answer.result(), name)
                except Exception as exc:  # a broken channel declines; the run goes on
                    log.warning("approval channel %s failed: %s", name, exc)
                    return Decision("deny", feedback=f"the approval channel failed ({type(exc).__name__}: {exc})",
                                    by=name)
        finally:
            request.cancelled.set()
        cancelled = Permit(False, verdict, Decision("cancelled", by="interrupt"), request.id)
        asker.record(self.decided_event(asker, request.action_type, cancelled))
        raise RunStopped("interrupt", "the run was interrupted")  # the agent tells which stop it was


def _request_text(request: ApprovalRequest) -> str:
    where = " (if approved, outside the sandbox)" if request.escalate else ""
    return (f"waiting for approval: {approval_text.title(request.action_type, request.subject)}{where} — "
            f"{visible(request.reason)} [{request.rule}]")


def _decided_text(facts: dict) -> str:
    verb = {"allow": "approved", "deny": "declined", "cancelled": "approval cancelled"}[facts["decision"]]
    return f"{verb} ({facts['by']}): {approval_text.title(facts['action_type'], facts['subject'])}"


def _detail(action_type: str, args: dict, cwd: str, verdict: Verdict | None = None) -> str:
    """What a person needs to see to decide: the command, the diff an edit would make, the request a web API call
    makes (the policy's `detail`), the tool's arguments.

    Of a hidden file (a credential) nothing is read: the detail is what the model wrote, so a declined request
    leaves none of the file in the record.
    """
    import json

    if verdict is not None and verdict.detail:
        return verdict.detail
    if action_type == "RUN_SHELL_CMD":
        return str(args.get("command", ""))
    if action_type == "EDIT_FILE":
        if verdict is not None and verdict.hidden:
            return _unread_edit(args)
        return preview_edit(args, cwd, resolved=verdict.paths[0] if verdict is not None and verdict.paths else None)
    return json.dumps({k: v for k, v in args.items() if k != "action_type"}, indent=2, ensure_ascii=False,
                      default=str)


def _unread_edit(args: dict) -> str:
    text = f"{str(args.get('directive_line', '')).strip()}\n(a hidden file: its contents are not read or shown)"
    if args.get("old_text"):
        text += f"\nreplacing:\n{args['old_text']}"
    return text + (f"\nwith:\n{args['content']}" if args.get("content") else "")


def preview_edit(args: dict, cwd: str, max_bytes: int = 5_000_000, resolved: str | None = None) -> str:
    """The diff an EDIT_FILE action would make, computed on a copy of the file (the file is not touched).

    The file is read at `resolved` (the path the policy judged; else the directive's path, resolved now)
    without following a symlink on the way.
    """
    import stat
    import tempfile

    from anges.tools.fileedit import EditError, apply_edit, edit_target
    from anges.util.paths import open_nofollow, write_file

    directive = str(args.get("directive_line", "")).strip()
    try:
        operation, path, arguments = edit_target(directive, cwd)
        real = resolved or os.path.realpath(path)
        with tempfile.TemporaryDirectory(prefix="anges-preview-") as scratch:
            copy = os.path.join(scratch, "f")
            try:
                fd = open_nofollow(real, os.O_RDONLY | os.O_NONBLOCK)
            except FileNotFoundError:
                fd = None
            if fd is not None:
                with os.fdopen(fd, "rb") as source:
                    info = os.fstat(source.fileno())
                    if not stat.S_ISREG(info.st_mode):
                        return f"{directive}\n(the edit would fail: not a regular file)"
                    if info.st_size > max_bytes:
                        return f"{directive}\n(the file is too large to preview)"
                    write_file(copy, source.read(max_bytes + 1))
            result = apply_edit(f"{operation} {copy} {arguments}".strip(), str(args.get("content") or ""),
                                base_dir=scratch, old_text=args.get("old_text"))
    except (EditError, OSError) as exc:
        return f"{directive}\n(the edit would fail: {exc})"
    relative = os.path.relpath(path, cwd)
    before, after = (path, path) if relative.startswith(os.pardir) else (f"a/{relative}", f"b/{relative}")
    diff = result.diff.replace("--- a/f\n", f"--- {before}\n", 1).replace("+++ b/f\n", f"+++ {after}\n", 1)
    return f"{directive}\n{diff or '(no change)'}"
