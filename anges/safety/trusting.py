"""Trusting content that runs outside the sandbox although the model could have written it (a project's hooks, an
MCP server's program in the working directory): asked through the run's approval channel, once per content, and
said once where no one can be asked. The digests trusted are `anges.config.trust.TrustStore`'s."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from anges.safety.approval import ApprovalRequest, Asker, Gate
from anges.store.events import Event

if TYPE_CHECKING:
    from anges.config.trust import Subject, TrustStore

ACTION_TYPE = "TRUST"
"""What an approval request to trust content is called."""
REASONS = {
    "project": "a project's hooks run outside the sandbox, with your rights: trust them only if you know who wrote "
               "them (the agent may have)",
    "mcp_server": "this MCP server's program lies where commands may write, and would run outside the sandbox with "
                  "your rights: trust it only if you know who wrote it (the agent may have)",
    "hook": "your hook runs a file that lies where commands may write, outside the sandbox with your rights: trust "
            "it only if you know who wrote it (the agent may have)",
}
SCOPE = "this exact content, from now on, until it changes (yes does the same)"
WHY_NOT = {"auto": "--approval auto never trusts content", "approval=deny": "--approval deny",
           "no_one": "no one can be asked here", "limit": "too long to be shown in a question (anges trust shows it)",
           "unreadable": "it cannot be read as it is", "interrupt": "the run stopped first"}
"""Why content was not trusted, by who (or what) decided; a channel's name means a person declined it."""


class Trusting:
    """Decides, for one agent across its runs, whether content may run: trusted before, or trusted now by a person
    asked through the run's gate. A question declined (or that no one could be asked) is not asked again."""

    def __init__(self, store: TrustStore):
        self.store = store
        self.settled: set[str] = set()
        """Digests asked about (or said to be untrusted) already: not asked again, not said again."""

    def trusted(self, subject: Subject, gate: Gate, asker: Asker) -> bool:
        """True when `subject` may run; records the question, the answer, or why no one was asked."""
        if self.store.trusts(subject):
            return True
        if subject.digest in self.settled:
            return False
        self.settled.add(subject.digest)
        why = "unreadable" if subject.problem else _no_one(gate)
        request = ApprovalRequest(action_type=ACTION_TYPE, subject=subject.key, detail=subject.text(whole=False),
                                  rule="trust", reason=REASONS[subject.kind], scope=SCOPE, escalate=True,
                                  agent_id=asker.agent_id, agent_type=asker.agent_type)
        if not why and (request.refusal or not subject.fits):  # a question shows all of it, or is not asked
            why = "limit"
        if why:
            asker.record(_decided(asker, subject, request, "deny", why, None))
            return False
        decision = gate.ask(asker, request)
        allowed = decision.verdict == "allow"
        if allowed and not subject.unchanged():
            allowed, decision.feedback = False, "it changed while the question was open: it is asked again next run"
            self.settled.discard(subject.digest)
        if allowed:
            try:
                self.store.trust(subject)
            except OSError as exc:  # ANGES_HOME read-only, say: the person's answer holds for this run
                decision.feedback = f"trusted for this run only: it could not be kept ({exc.strerror or exc})"
        asker.record(_decided(asker, subject, request, "allow" if allowed else "deny", decision.by or "callback",
                              request.id, decision.feedback))
        return allowed


def _no_one(gate: Gate) -> str:
    """Why no person can be asked in this session ("" when one can)."""
    if gate.mode in ("auto", "deny"):
        return "auto" if gate.mode == "auto" else "approval=deny"
    return "" if gate.channel is not None else "no_one"


def _decided(asker: Asker, subject: Subject, request: ApprovalRequest, decision: str, by: str,
             request_id: str | None, feedback: str = "") -> Event:
    """The `approval_decided` event of a question about trust (or of the one no one could be asked)."""
    from anges.prompt.templates import render_template

    asked = by not in WHY_NOT  # a person answered on a channel (its name)
    why = "" if decision == "allow" else "you declined it" if asked else WHY_NOT[by]
    hint = "" if decision == "allow" else f"; to trust it: anges trust {shlex.quote(subject.folder)}"
    facts = {"request_id": request_id, "action_type": ACTION_TYPE, "subject": subject.key, "decision": decision,
             "always": decision == "allow", "by": by, "rule": "trust", "reason": request.reason,
             "feedback": feedback or (hint[2:] if why and not asked else ""), "escalate": True, "skipped": 0,
             "title": subject.title}
    content = render_template("hooks/trust_decided.j2", asker.app_config.prompt.template_dir, decision=decision,
                              title=subject.title, kind=subject.kind, why="" if asked else why).strip()
    verb = "trusted" if decision == "allow" else f"not trusted ({why})"
    return Event("approval_decided", content=content, message=f"{verb}: {subject.title}{hint}", data=facts)
