"""The policy: one function decides every action — allow, ask or deny — from the rules and the sandbox.

Rules on a command's text are a guard against accidents, not a boundary: a shell offers endless ways to spell
a command, so the sandbox is what holds. The policy fails safe where it can: every deny rule is checked before
any allow or ask rule, and matches the command as written and with its quotes and backslashes removed; an allow
rule (but `*`, which means every command) covers one simple command only, and an "always" answer the same
command text.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from anges.config.types import SafetyConfig, SafetyRule
from anges.safety.sandbox import SandboxSettings
from anges.util.paths import resolve

if TYPE_CHECKING:
    from anges.tools.openapi import APIs

_COMPOUND = re.compile(r"[;&|`<>\n\r]|\$\(")
"""What makes a command more than one simple command: separators, pipes, substitutions, redirections."""


@dataclass(frozen=True)
class Verdict:
    """What the policy says about one action, and why."""

    decision: str
    """allow, ask or deny."""
    rule: str = ""
    """What decided: `safety.rules[N]`, `safety.default_rules[N]`, `escalation`, `unsandboxed`, `writable_paths`,
    `protected_paths`, `hidden_paths`, `private_paths`, `network`, `changing_path`, or "" (nothing objected)."""
    reason: str = ""
    subject: str = ""
    """The command, path, server.tool or directive the decision is about."""
    grant: tuple = ()
    """What an "always" answer approves for the rest of the run."""
    scope: str = ""
    """The same, in words."""
    escalate: bool = False
    """The command asks to run outside the sandbox."""
    paths: tuple[str, ...] = ()
    """The resolved local paths judged (an edit's file; READ_MIME_FILES' inputs and output): the action must use
    these, and no other, or refuse."""
    hidden: bool = False
    """Some judged path is hidden from commands: its contents must not be shown or recorded before approval."""
    detail: str = ""
    """What a person asked to approve it reads, when the policy made it (a web API call: its method, full URL, headers
    and body); "" when the approval makes it."""


class Policy:
    """The rules of a run (yours, then the defaults) and the sandbox they are judged against."""

    def __init__(self, safety: SafetyConfig, settings: SandboxSettings, cwd: str, sandboxed: bool,
                 unsandboxed_reason: str = "", apis: APIs | None = None):
        self.rules = [(f"safety.rules[{i}]", r) for i, r in enumerate(safety.rules)]
        self.rules += [(f"safety.default_rules[{i}]", r) for i, r in enumerate(safety.default_rules)]
        self.settings = settings
        self.cwd = cwd
        self.sandboxed = sandboxed
        self.unsandboxed_reason = unsandboxed_reason
        self.apis = apis
        """The run's web APIs: a CALL_API is judged as the request it makes."""
        self._patterns: dict[str, re.Pattern] = {}

    def decide(self, action_type: str, args: dict) -> Verdict:
        """The decision for one action: any deny rule; an escalation; the first allow or ask rule; the sandbox's
        limits; else allow. A path that keeps changing while it is resolved is denied (the model may try again)."""
        try:
            return self._decide(action_type.upper(), args)
        except OSError as exc:  # sandbox.PathChanging: a symlink on the way replaced again and again
            return Verdict("deny", "changing_path", str(exc))

    def _decide(self, action_type: str, args: dict) -> Verdict:
        if action_type == "CALL_API":
            return self._api_call(args)
        subjects = self.subjects(action_type, args)
        subject = subjects[0] if subjects else ""
        paths = self.paths(action_type, args)
        texts = subjects + ([unquoted(subject)] if action_type == "RUN_SHELL_CMD" else [])
        for name, rule in self.rules:
            matched = self._matching(rule, action_type, texts) if rule.decision == "deny" else None
            if matched is not None:
                return Verdict("deny", name, rule.reason or f"matches {rule.match!r}", _shown(matched, subjects),
                               paths=paths)
        if action_type == "RUN_SHELL_CMD" and args.get("escalate") and self.sandboxed:
            return Verdict("ask", "escalation", "the command asks to run outside the sandbox", subject,
                           (action_type, "escalation", subject), "this exact command, outside the sandbox",
                           escalate=True)
        for name, rule in self.rules:
            matched = self._matching(rule, action_type, texts) if rule.decision != "deny" else None
            if matched is None:
                continue
            if rule.decision == "allow":
                if action_type == "RUN_SHELL_CMD" and rule.match != "*" and not is_simple(subject):
                    continue  # `make *` covers one simple command, never what follows a `;` or a `|`
                return Verdict("allow", name, subject=_shown(matched, subjects), paths=paths)
            return self._ask(action_type, name, rule.reason or f"matches {rule.match!r}", _shown(matched, subjects),
                             paths)
        return self._limits(action_type, subject, paths, args)

    def subjects(self, action_type: str, args: dict) -> list[str]:
        """What rules match against: the command; the resolved path; server.tool; inputs and output; directive."""
        if action_type == "RUN_SHELL_CMD":
            return [str(args.get("command", ""))]
        if action_type == "EDIT_FILE":
            return list(self.paths(action_type, args))
        if action_type == "USE_MCP_TOOL":
            return [f"{str(args.get('mcp_server_name', '')).strip()}.{str(args.get('tool_name', '')).strip()}"]
        if action_type == "CALL_API":
            judged = self.apis.judge(args) if self.apis is not None else None
            return judged.subjects if judged is not None else []
        if action_type == "READ_MIME_FILES":
            from anges.tools.mime import is_url

            urls = [i.strip() for i in _strings(args.get("inputs")) if is_url(i)]
            return [*urls, *self.paths(action_type, args)]
        if action_type == "CALL_CHILD_AGENT":
            return [str(args.get("directive", ""))]
        return [json.dumps({k: v for k, v in args.items() if k != "action_type"}, sort_keys=True, default=str)]

    def paths(self, action_type: str, args: dict) -> tuple[str, ...]:
        """The resolved local paths an action reads or writes in-process (resolved as the action resolves them)."""
        if action_type == "EDIT_FILE":
            path = self._edit_path(args)
            return (path,) if path else ()
        if action_type == "READ_MIME_FILES":
            from anges.tools.mime import is_url

            reads = [_local(i, self.cwd) for i in _strings(args.get("inputs")) if i.strip() and not is_url(i)]
            return (*(path for path in reads if path), *self._mime_output(args))
        return ()

    def _api_call(self, args: dict) -> Verdict:
        """A web API call, judged by the rules on `api.operationId` and `api METHOD /path` (by default GET and HEAD
        run, the rest ask); one that cannot be made is let through: the action says why and sends nothing."""
        judged = self.apis.judge(args) if self.apis is not None else None
        if judged is None:
            return Verdict("allow", subject=f"{args.get('api') or ''}.{args.get('operation') or ''}".lstrip("."))
        for name, rule in sorted(self.rules, key=lambda named: named[1].decision != "deny"):
            matched = self._matching(rule, "CALL_API", judged.subjects)
            if matched is None:
                continue
            if rule.decision != "ask":
                return Verdict(rule.decision, name, rule.reason or f"matches {rule.match!r}", matched,
                               detail=judged.detail)
            return replace(self._ask("CALL_API", name, rule.reason or f"matches {rule.match!r}", matched, ()),
                           detail=judged.detail)
        return Verdict("allow", subject=judged.subjects[0], detail=judged.detail)

    # -- helpers ----------------------------------------------------------------------------------------------

    def _ask(self, action_type: str, rule: str, reason: str, subject: str, paths: tuple[str, ...]) -> Verdict:
        """An `ask`; "always" approves the same action on the same subject only (for a command: this exact text)."""
        scope = "this exact command" if action_type == "RUN_SHELL_CMD" else f"{action_type} of {subject}"
        hidden = any(self.settings.is_hidden(p) for p in paths)  # not read, shown or recorded before approval
        return Verdict("ask", rule, reason, subject, (action_type, rule, subject), scope, paths=paths, hidden=hidden)

    def _limits(self, action_type: str, subject: str, paths: tuple[str, ...], args: dict) -> Verdict:
        """The sandbox's rule when no configured rule matched."""
        if action_type == "RUN_SHELL_CMD" and not self.sandboxed:
            return self._ask(action_type, "unsandboxed", self.unsandboxed_reason, subject, ())
        if action_type == "EDIT_FILE" and paths:
            return self._path_check(action_type, read=[], write=list(paths))
        if action_type == "READ_MIME_FILES":
            write = list(self._mime_output(args))
            verdict = self._path_check(action_type, read=[p for p in paths if p not in write], write=write)
            links = [source for source in self.subjects(action_type, args) if source not in paths]
            if verdict.decision == "allow" and links and self.sandboxed and not self.settings.network:
                return self._ask(action_type, "network", "a link the model's provider fetches from the internet, "
                                 "which this run's sandbox keeps commands from (safety.network is off): what the link "
                                 "carries reaches that site", links[0], paths)
            return verdict
        return Verdict("allow", subject=subject, paths=paths)

    def _path_check(self, action_type: str, read: list[str], write: list[str]) -> Verdict:
        paths = (*read, *write)
        for path in paths:
            if self.settings.is_hidden(path):
                return self._ask(action_type, "hidden_paths", "a credential place hidden from commands", path, paths)
        for path in read:
            if self.settings.is_private(path):
                return self._ask(action_type, "private_paths", "private to the sandbox: its commands have a /tmp "
                                 "(and /run, /dev/shm) of their own, and this is the machine's", path, paths)
        for path in write:
            if self.settings.is_protected(path) or self.settings.is_sealed(path):
                return self._ask(action_type, "protected_paths", "read-only in the sandbox: a repository's .git, "
                                 "code anges itself runs, a startup file, or a new file right in your home (it could "
                                 "be one)", path, paths)
            if not self.settings.can_write(path):
                where = ", ".join(self.settings.writable) or "nothing (read-only sandbox)"
                return self._ask(action_type, "writable_paths", f"outside the writable paths ({where})", path, paths)
        return Verdict("allow", subject=(write or read or [""])[0], paths=paths)

    def _matching(self, rule: SafetyRule, action_type: str, subjects: list[str]) -> str | None:
        """The first subject the rule matches, or None."""
        if rule.action != "*" and rule.action.upper() != action_type:
            return None
        for subject in subjects or [""]:
            if rule.match.startswith("re:"):
                pattern = self._patterns.get(rule.match)
                if pattern is None:
                    pattern = self._patterns[rule.match] = re.compile(rule.match[3:])
                if pattern.search(subject):
                    return subject
            elif fnmatch.fnmatchcase(subject, rule.match):
                return subject
        return None

    def _edit_path(self, args: dict) -> str:
        from anges.tools.fileedit import EditError, edit_target

        try:
            return resolve(edit_target(str(args.get("directive_line", "")), self.cwd)[1])
        except EditError:
            return ""  # the edit fails on its own with a message for the model

    def _mime_output(self, args: dict) -> tuple[str, ...]:
        output = _local(str(args.get("output") or ""), self.cwd)
        return (output,) if output else ()


def is_simple(command: str) -> bool:
    """True for one simple command: no `;`, `&`, `|`, newline, command substitution or redirection (quoted or
    not: this errs on the side of asking)."""
    return _COMPOUND.search(command) is None


def unquoted(command: str) -> str:
    """The command with its quotes and backslashes removed (`r""m -rf '/'` becomes `rm -rf /`), for deny rules."""
    return re.sub(r"\\(.)", r"\1", command.replace("\\\n", "")).replace("'", "").replace('"', "")


def _shown(matched: str, subjects: list[str]) -> str:
    """The subject as given (a deny rule may have matched the command's unquoted form)."""
    return matched if matched in subjects or not subjects else subjects[0]


def _local(source: str, cwd: str) -> str:
    """A local input's or output's resolved path, as the reader resolves it; "" for none, or for text no path can
    hold (the action refuses it with the reason)."""
    from anges.tools.mime import MimeError, local_path

    if not source.strip():
        return ""
    try:
        return local_path(source, cwd)
    except MimeError:
        return ""


def _strings(value) -> list[str]:
    return [str(item) for item in value if isinstance(item, (str, os.PathLike))] if isinstance(value, list) else []
