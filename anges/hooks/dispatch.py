"""The loop's hook points (`Hooks`): which hooks an event runs, in order, and what their answers become.

One `HookSet` serves a run and its child agents: the command hooks of the configuration, then those of the project's
`.anges/config.yaml` once the user trusts that exact content, then the plug-ins' Python hooks. With none, every point
returns at once: no process is started, nothing is imported.
"""

from __future__ import annotations

import json
import os
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from anges.exceptions import RunStopped
from anges.hooks.answers import Outcome
from anges.hooks.record import HookRun, hook_event
from anges.safety.approval import Asker
from anges.store.events import RETURN_TO_PARENT_EVENT_TYPES, Event, action_input, interrupted_event, kind_of

if TYPE_CHECKING:
    from anges.config.trust import Project, Subject
    from anges.config.types import Config, HookConfig
    from anges.hooks.python import PythonHook, RunView, Spending
    from anges.safety.run_safety import RunSafety
    from anges.store.events import EventStream
    from anges.tools.mcp import MCPManager

BLOCKING = ("request", "before_action", "before_complete")
"""The events whose hooks can stop what comes next (as `anges.config.types.BLOCKING_EVENTS`)."""
TAKES_CONTEXT = ("run_start", "request", "after_action")
"""The events whose hooks' text (plain output, or `context`) the model reads."""
ENV_CHARS = 65_536
"""The most of a command or path an `ANGES_HOOK_*` variable holds (the whole is on stdin)."""


class RunContext(Asker, Protocol):
    """The run's action context, as the hooks use it: who asks, how to record, how to render a guide again."""

    @property
    def render_guide(self) -> Callable[[Any], str] | None: ...


class RunParts(Protocol):
    """The parts of the current run the hooks use: its action context and budget."""

    @property
    def context(self) -> RunContext: ...
    @property
    def budget(self) -> Spending: ...


class Hooked(Protocol):
    """What the hooks know of the agent whose run they act in."""

    uid: str
    agent_type: str
    parent_ids: list[str]
    cmd_init_dir: str
    config: Config
    registered_actions: list

    @property
    def event_stream(self) -> EventStream | None: ...
    @property
    def run_state(self) -> RunParts | None: ...
    @property
    def run_safety(self) -> RunSafety | None: ...
    @property
    def mcp(self) -> MCPManager | None: ...

    def stop_requested(self) -> bool: ...


@dataclass(frozen=True)
class CommandHook:
    """A command hook and where it came from (the configuration, a trusted project). One that runs what commands
    may write (a project's, or a script in the working directory) has the digest the user trusted and a way to read
    it again: checked before each run, content changed since does not run."""

    config: HookConfig
    source: str
    trusted: str = ""
    current: Callable[[], str] | None = None
    folder: str = ""
    """Where it runs ("": the run's working directory); a project's hooks run in the project's folder."""


@dataclass
class HookSet:
    """The hooks of a run and its child agents."""

    commands: list[CommandHook]
    python: dict[str, list[PythonHook]] | None = None
    """The plug-ins' Python hooks, by event."""

    def __bool__(self) -> bool:
        return bool(self.commands or self.python)


_sets: weakref.WeakKeyDictionary[Any, HookSet] = weakref.WeakKeyDictionary()
"""The hook set of each run (by its `RunSafety`, which a child agent shares with its parent)."""


class Hooks:
    """An agent's hook points; the loop calls them, and they record what the hooks did as events."""

    def __init__(self, agent: Hooked, interrupted: Callable[[], bool]):
        self.agent = agent
        self.interrupted = interrupted
        """True once the run was interrupted (Ctrl-C, Stop): ends run_end hooks, which run after a time limit too."""
        self.hooks = HookSet([])
        self.sent_back = 0
        """How many times before_complete hooks sent the model back in this run (hooks read it as `sent_back`)."""
        self._trusting: Any = None
        self._running = False

    # -- the points -----------------------------------------------------------------------------------------------

    def begin(self, request: str, follow_up: bool) -> bool:
        """The run starts: trust questions (a top-level run), then run_start and request hooks. True when a hook
        refused the request: the run has ended (its stop is recorded)."""
        self.sent_back = 0
        self._choose_hooks()
        if not self._running:
            return False
        data = {"request": request, "follow_up": follow_up, "from_parent": bool(self.agent.parent_ids)}
        self._run("run_start", data, subject=request)
        refused = self._run("request", data, subject=request)
        if refused is not None:
            run, outcome = refused
            why = outcome.reason if outcome.status == "blocked" else f"it failed ({outcome.reason})"
            self._record(interrupted_event("hook", f"a hook refused the request: {why}", hook=run.label))
            return True
        return False

    def blocks(self, action_type: str, args: dict, returning: bool, remaining: int = 0) -> bool:
        """Before an action: before_action hooks, then (for an action that ends the run) before_complete hooks. True
        when one blocked it: the model reads why, and the rest of its reply is not run."""
        if not self._running:
            return False
        data = {"action": {"action_type": action_type, **action_input(args)}}
        subject = self._subject(action_type, args, returning)
        if self._run("before_action", data, action_type, subject, remaining) is not None:
            return True
        if returning and self._run("before_complete", {**data, "sent_back": self.sent_back}, action_type, subject,
                                   remaining) is not None:
            self.sent_back += 1
            return True
        return False

    def after(self, action_type: str, args: dict, event: Event) -> None:
        """After an action's event is recorded: after_action hooks (their context is read with the result)."""
        if not self._running:
            return
        result = {"type": event.type, "content": event.content, "message": event.message, "data": event.data}
        data = {"action": {"action_type": action_type, **action_input(args)}, "result": result}
        self._run("after_action", data, action_type, self._subject(action_type, args, False))

    def recorded(self, event: Event) -> None:
        """An event was recorded: an approval waiting for a person runs the approval_needed hooks."""
        if self._running and event.type == "approval_requested":
            facts = event.data
            self._run("approval_needed", {"approval": facts}, str(facts.get("action_type", "")),
                      str(facts.get("subject", "")))

    def ending(self, event: Event) -> None:
        """The run is about to record the event that ends it (an answer, a stop): run_end hooks, told how it ends, so
        that event stays the stream's last. None after an interrupt: a stop takes effect at once."""
        if not self._running or event.type not in RETURN_TO_PARENT_EVENT_TYPES:
            return
        self._running = False
        if event.type == "task_interrupted" and event.data.get("reason") == "interrupt":
            return
        ended_by = kind_of(event.type).action  # TASK_COMPLETE, HELP_NEEDED, AGENT_TEXT_RESPONSE; "" for a stop
        outcome = {"event_type": event.type, "content": event.content, "reason": event.data.get("reason", "")}
        self._run("run_end", {"outcome": outcome}, ended_by, event.type, stop=self.interrupted)

    # -- running the hooks of one event ---------------------------------------------------------------------------

    def _run(self, event: str, data: dict, action_type: str = "", subject: str = "", remaining: int = 0,
             stop: Callable[[], bool] | None = None) -> tuple[HookRun, Outcome] | None:
        """Run the hooks of `event` that match, in order, recording each; the first that blocks a blocking event
        ends the rest (it is returned)."""
        stop = stop or self.agent.stop_requested
        payload = {"event": event, **self._who(), **data}
        for run, call, fail_closed in self._matching(event, action_type, subject):
            outcome = call(run, {**payload, "subject": subject}, stop)
            effect = _effect(event, outcome, fail_closed)
            self._record(hook_event(run, outcome, effect, self.agent.config.prompt.template_dir,
                                    remaining if effect == "blocked" else 0))
            if effect == "blocked":
                return run, outcome
            if outcome.status == "stopped":
                if event in ("run_end", "approval_needed"):  # the run is ending, or a person is about to be asked
                    break
                raise RunStopped("interrupt", "the run was interrupted")  # the loop records which stop it was
        return None

    def _matching(self, event: str, action_type: str, subject: str):
        """(who runs, how to call it, whether it fails closed) for each hook of `event` that matches."""
        for hook in self.hooks.commands:
            config = hook.config
            if config.event == event and _matches(config, action_type, subject):
                label = config.name or " ".join(config.command.split())
                yield (HookRun(label, hook.source, event, action_type, subject),
                       lambda run, payload, stop, hook=hook: self._command(hook, run, payload, stop),
                       config.fail_closed)
        for python in self.hooks.python.get(event, []) if self.hooks.python else []:
            name = python.plugin
            label = f"extension {os.path.basename(name)}" if name.startswith("extension:") else f"plugin {name}"
            yield (HookRun(label, "plugin", event, action_type, subject),
                   lambda run, payload, stop, python=python: python.run(self._view(), payload, stop), False)

    def _command(self, hook: CommandHook, run: HookRun, payload: dict, stop: Callable[[], bool]) -> Outcome:
        from anges.hooks.command import run_hook_command

        if hook.current is not None and hook.current() != hook.trusted:
            if not hook.trusted:
                return Outcome("failed", reason="it now runs a file commands may write, which you have not trusted: "
                                                "it runs again once you trust it")
            what = "the project's .anges/" if hook.source == "project" else "what it runs"
            return Outcome("failed", reason=f"{what} changed since you trusted it: it runs again once you trust the "
                                            "new content")
        env = {**os.environ, **_variables(run, payload["run_id"])}
        stdin = json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8", "replace")
        return run_hook_command(hook.config.command, stdin, hook.folder or self.agent.cmd_init_dir, env,
                                hook.config.timeout, stop)

    # -- the hooks of a run ---------------------------------------------------------------------------------------

    def _choose_hooks(self) -> None:
        """The run's hooks: a child's are its parent's; a top-level run asks first what must be trusted (the hooks
        chosen so far hear of those questions: approval_needed)."""
        safety, config = self.agent.run_safety, self.agent.config
        if self.agent.parent_ids and safety is not None and safety in _sets:
            self.hooks = _sets[safety]
            self._running = bool(self.hooks)
            return
        from anges.config.trust import hook_subject
        from anges.hooks.python import python_hooks

        cwd, writable = self.agent.cmd_init_dir, self._writable()
        subjects = [hook_subject(hook, cwd, writable) for hook in config.hooks]
        # every config hook is checked again before each run: a file it names that appears later is not trusted
        self.hooks = HookSet([CommandHook(hook, "config", "", partial(_hook_digest, hook, cwd, writable))
                              for hook, subject in zip(config.hooks, subjects) if subject is None],
                             python_hooks(config))
        self._running = bool(self.hooks)
        if any(subjects):
            self.hooks.commands[:] = [
                CommandHook(hook, "config", subject.digest if subject is not None else "",
                            partial(_hook_digest, hook, cwd, writable))
                for hook, subject in zip(config.hooks, subjects) if subject is None or self._trust(subject)]
        project = self._trusted_project()
        if project is not None:
            current = partial(_project_digest, cwd, writable)
            self.hooks.commands += [CommandHook(hook, "project", project.subject.digest, current, project.root)
                                    for hook in project.hooks]
        self._admit_mcp_servers()
        self._running = bool(self.hooks)
        if safety is not None:
            _sets[safety] = self.hooks

    def _trusted_project(self) -> Project | None:
        """The project's `.anges/` content when the user trusts it (asked now if a person can be); else None."""
        from anges.config.trust import load_project, project_root
        from anges.exceptions import ConfigError

        if project_root(self.agent.cmd_init_dir) is None:
            return None
        try:
            project = load_project(self.agent.cmd_init_dir, self._writable())
        except ConfigError as exc:  # the run goes on without them, and says why
            self._record(hook_event(HookRun(".anges/config.yaml", "project", "run_start"),
                                    Outcome("failed", reason=f"the project's hooks are not loaded: {exc}"), "",
                                    self.agent.config.prompt.template_dir))
            return None
        if project is None or not project.hooks:
            return None
        return project if self._trust(project.subject) else None

    def _admit_mcp_servers(self) -> None:
        """Ask about each MCP server whose program lies where commands may write; start the trusted ones."""
        mcp, state = self.agent.mcp, self.agent.run_state
        if mcp is None or state is None or not mcp.awaiting_trust():
            return
        for name, subject in mcp.awaiting_trust().items():
            if self._trust(subject):
                mcp.admit(name)
            else:
                mcp.refuse(name, f"not started: {subject.title} is not trusted (anges trust {subject.folder})")
        render = state.context.render_guide
        for action in self.agent.registered_actions:  # its guide lists the servers' tools: as they are now
            if action.type == "USE_MCP_TOOL" and render is not None:
                action.guide_prompt = render(action)

    def _trust(self, subject: Subject) -> bool:
        """Whether `subject` may run: trusted before, or by the person asked now (see `anges.safety.trusting`)."""
        from anges.safety.trusting import Trusting

        state, safety = self.agent.run_state, self.agent.run_safety
        if state is None or safety is None:
            return False
        if self._trusting is None:
            from anges.config.trust import TrustStore

            self._trusting = Trusting(TrustStore())
        return self._trusting.trusted(subject, safety.gate, state.context)

    def _writable(self) -> Callable[[str], bool]:
        safety = self.agent.run_safety
        return safety.settings.can_write if safety is not None else (lambda path: True)

    # -- what the hooks are told ----------------------------------------------------------------------------------

    def _who(self) -> dict:
        stream = self.agent.event_stream
        return {"run_id": stream.uid if stream is not None else self.agent.uid, "agent_id": self.agent.uid,
                "agent_type": self.agent.agent_type, "parent_ids": list(self.agent.parent_ids),
                "cwd": os.path.abspath(self.agent.cmd_init_dir)}

    def _subject(self, action_type: str, args: dict, returning: bool) -> str:
        """What a hook's pattern searches: the command, the resolved path, server.tool, the answer, ..."""
        if returning:
            return str(args.get("content", ""))
        safety = self.agent.run_safety
        if safety is None:
            return ""
        try:
            subjects = safety.policy.subjects(action_type, args)
        except OSError:  # a path that keeps changing: the policy declines the action anyway
            return ""
        return subjects[0] if subjects else ""

    def _view(self) -> RunView:
        from anges.hooks.python import RunView

        stream, state = self.agent.event_stream, self.agent.run_state
        assert stream is not None
        return RunView(stream.uid, self.agent.uid, self.agent.agent_type, tuple(self.agent.parent_ids),
                       self.agent.cmd_init_dir, self.agent.config, stream,
                       state.budget if state is not None else None)

    def _record(self, event: Event) -> None:
        state = self.agent.run_state
        if state is not None:
            state.context.record(event)


def _hook_digest(hook: HookConfig, cwd: str, writable: Callable[[str], bool]) -> str:
    from anges.config.trust import hook_subject

    subject = hook_subject(hook, cwd, writable)
    return subject.digest if subject is not None else ""


def _project_digest(cwd: str, writable: Callable[[str], bool]) -> str:
    from anges.config.trust import load_project

    try:
        project = load_project(cwd, writable)
    except Exception:  # noqa: BLE001  (a config made invalid since: not what was trusted)
        return ""
    return project.subject.digest if project is not None else ""


def _matches(config: HookConfig, action_type: str, subject: str) -> bool:
    """True when a hook's `match` takes this occurrence: its action (events without one ignore it) and pattern."""
    named = {part.strip().upper() for part in config.match.action.split("|")} - {""}
    if action_type and named and "*" not in named and action_type.upper() not in named:
        return False
    return not config.match.pattern or re.search(config.match.pattern, subject) is not None


def _effect(event: str, outcome: Outcome, fail_closed: bool) -> str:
    """What an outcome does to the run: blocked, context (the model reads it), or "" (recorded only). A block where
    nothing can be stopped is a context (after_action: the action ran) or recorded only."""
    if event in BLOCKING and (outcome.status == "blocked" or (outcome.failed and fail_closed)):
        return "blocked"
    if outcome.status == "blocked":
        outcome.status, outcome.context, outcome.reason = "ok", outcome.context or outcome.reason, ""
    return "context" if event in TAKES_CONTEXT and outcome.context.strip() else ""


def _variables(run: HookRun, run_id: str) -> dict[str, str]:
    """The `ANGES_HOOK_*` variables of a command hook's environment."""
    found = {"ANGES_HOOK_EVENT": run.event, "ANGES_HOOK_ACTION": run.action_type, "ANGES_RUN_ID": run_id}
    if run.action_type == "RUN_SHELL_CMD" and run.event != "approval_needed":
        found["ANGES_HOOK_COMMAND"] = run.subject
    if run.action_type == "EDIT_FILE" and run.event != "approval_needed" and run.subject:
        found["ANGES_HOOK_PATH"] = run.subject  # resolved, as the policy judged it
    return {name: value.replace("\0", "")[:ENV_CHARS] for name, value in found.items()}
