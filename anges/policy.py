"""The policy: one function decides every action — allow, ask or deny — from the rules and the sandbox."""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass

from anges.config import SafetyConfig, SafetyRule
from anges.sandbox import SandboxSettings


@dataclass(frozen=True)
class Verdict:
    """What the policy says about one action, and why."""

    decision: str
    """allow, ask or deny."""
    rule: str = ""
    """What decided: `safety.rules[N]`, `safety.default_rules[N]`, `escalation`, `unsandboxed`, `writable_paths`,
    `hidden_paths`, or "" (nothing objected)."""
    reason: str = ""
    subject: str = ""
    """The command, path, server.tool or directive the decision is about."""
    grant: tuple = ()
    """What an "always" answer approves for the rest of the run."""
    scope: str = ""
    """The same, in words."""
    escalate: bool = False
    """The command asks to run outside the sandbox."""


class Policy:
    """The rules of a run (yours, then the defaults) and the sandbox they are judged against."""

    def __init__(self, safety: SafetyConfig, settings: SandboxSettings, cwd: str, sandboxed: bool,
                 unsandboxed_reason: str = ""):
        self.rules = [(f"safety.rules[{i}]", r) for i, r in enumerate(safety.rules)]
        self.rules += [(f"safety.default_rules[{i}]", r) for i, r in enumerate(safety.default_rules)]
        self.settings = settings
        self.cwd = cwd
        self.sandboxed = sandboxed
        self.unsandboxed_reason = unsandboxed_reason
        self._patterns: dict[str, re.Pattern] = {}

    def decide(self, action_type: str, args: dict) -> Verdict:
        """The decision for one action: the first matching rule, then the sandbox's limits, else allow."""
        action_type = action_type.upper()
        subjects = self.subjects(action_type, args)
        subject = subjects[0] if subjects else ""
        escalate = action_type == "RUN_SHELL_CMD" and bool(args.get("escalate")) and self.sandboxed
        matched_rule = None
        for name, rule in self.rules:
            matched = self._matching(rule, action_type, subjects)
            if matched is None:
                continue
            if rule.decision == "deny":
                return Verdict("deny", name, rule.reason or f"matches {rule.match!r}", matched)
            matched_rule = (name, rule, matched)
            break
        if escalate:
            return Verdict("ask", "escalation", "the command asks to run outside the sandbox", subject,
                           (action_type, "escalation", subject), "this same command, outside the sandbox",
                           escalate=True)
        if matched_rule is None:
            return self._limits(action_type, args, subject)
        name, rule, matched = matched_rule
        if rule.decision == "allow":
            return Verdict("allow", name, subject=matched)
        return Verdict("ask", name, rule.reason or f"matches {rule.match!r}", matched, (action_type, name),
                       f"{action_type} matching {rule.match}")

    def subjects(self, action_type: str, args: dict) -> list[str]:
        """What rules match against: the command; the resolved path; server.tool; inputs and output; directive."""
        if action_type == "RUN_SHELL_CMD":
            return [str(args.get("command", ""))]
        if action_type == "EDIT_FILE":
            path = self._edit_path(args)
            return [path] if path else []
        if action_type == "USE_MCP_TOOL":
            return [f"{str(args.get('mcp_server_name', '')).strip()}.{str(args.get('tool_name', '')).strip()}"]
        if action_type == "READ_MIME_FILES":
            inputs = [str(i) for i in args.get("inputs") or [] if isinstance(i, (str, os.PathLike))]
            output = str(args.get("output") or "").strip()
            return [self._local(i) for i in inputs] + ([self._resolve(output)] if output else [])
        if action_type == "CALL_CHILD_AGENT":
            return [str(args.get("directive", ""))]
        return [json.dumps({k: v for k, v in args.items() if k != "action_type"}, sort_keys=True, default=str)]

    # -- helpers ----------------------------------------------------------------------------------------------

    def _limits(self, action_type: str, args: dict, subject: str) -> Verdict:
        """The sandbox's rule when no configured rule matched."""
        if action_type == "RUN_SHELL_CMD" and not self.sandboxed:
            return Verdict("ask", "unsandboxed", self.unsandboxed_reason, subject, (action_type, "unsandboxed"),
                           "every command run without the sandbox")
        if action_type == "EDIT_FILE" and subject:
            return self._path_check(action_type, read=[], write=[subject])
        if action_type == "READ_MIME_FILES":
            output = str(args.get("output") or "").strip()
            reads = [self._local(i) for i in args.get("inputs") or [] if isinstance(i, str) and not _is_url(i)]
            return self._path_check(action_type, read=reads, write=[self._resolve(output)] if output else [])
        return Verdict("allow", subject=subject)

    def _path_check(self, action_type: str, read: list[str], write: list[str]) -> Verdict:
        for path in read + write:
            if self.settings.is_hidden(path):
                return Verdict("ask", "hidden_paths", "a credential place hidden from commands", path,
                               (action_type, "hidden_paths", path), f"{action_type} of {path}")
        for path in write:
            if not self.settings.can_write(path):
                where = ", ".join(self.settings.writable) or "nothing (read-only sandbox)"
                return Verdict("ask", "writable_paths", f"outside the writable paths ({where})", path,
                               (action_type, "writable_paths", path), f"{action_type} of {path}")
        return Verdict("allow", subject=(write or read or [""])[0])

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
        from anges.fileedit import EditError, edit_target

        try:
            return self._resolve(edit_target(str(args.get("directive_line", "")), self.cwd)[1])
        except EditError:
            return ""  # the edit fails on its own with a message for the model

    def _local(self, item: str) -> str:
        return item if _is_url(item) else self._resolve(item)

    def _resolve(self, path: str) -> str:
        return os.path.realpath(os.path.join(self.cwd, os.path.expanduser(path)))


def _is_url(text: str) -> bool:
    return re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://", text) is not None
