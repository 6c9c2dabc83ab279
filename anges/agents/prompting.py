"""An agent's prompt and its actions' guides, rendered from the templates."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from anges.agents.run import of_run
from anges.models.attachments import Attachment, attachments_of
from anges.models.base import Prompt
from anges.prompt.agents_md import ProjectFile, read_agents_md
from anges.prompt.history import format_event_stream
from anges.prompt.templates import render_template
from anges.store.events import kind_of
from anges.util.clipping import clip, omission

if TYPE_CHECKING:
    from anges.actions.base import Action
    from anges.agents.run import RunState
    from anges.agents.sizing import Sizing
    from anges.config.types import AgentConfig, Config
    from anges.safety.run_safety import RunSafety
    from anges.store.events import EventStream


HISTORY_HEADING = "\n# History\n"
"""Where the stable prefix of an agent prompt ends (the templates render this heading before the history)."""
NOTHING_NOW = {"background_jobs": [], "older_jobs": 0, "plan": None, "children": [], "siblings": [],
               "after_edit": False}
HISTORY_SLOT = "\0anges-history\0"
"""Rendered where the history goes, to keep the prompt around it (`Prompter._render`); no template text has a NUL."""


class Prompted(Protocol):
    """What an agent's prompt is made of (the templates read these as `agent` too)."""

    uid: str
    config: Config
    agent_config: AgentConfig
    agent_prompt_template: str
    registered_actions: list[Action]
    event_stream: EventStream | None
    run_safety: RunSafety | None
    run_state: RunState | None
    notes: list[str]
    cmd_init_dir: str
    prefix_cmd: str
    secrets: list[str]
    readonly_shell: bool

    def running_children(self) -> list[dict]: ...

    def siblings(self) -> list[str]: ...


class Prompter:
    """Renders one agent's prompt. The environment facts are read once per run: they belong to the prompt's stable
    prefix, which must stay byte-identical from step to step."""

    def __init__(self, agent: Prompted, sizing: Sizing):
        self.agent = agent
        self.sizing = sizing
        """Holds the run's prompt limits (`config.prompt`, scaled down for a small context window)."""
        self._facts: dict | None = None
        self._python3: str | None = None
        self._project: list[ProjectFile] | None = None
        self._cached = ""
        """The last prompt up to the end of its history: where the next one may hit the provider's cache."""
        self._attachments: tuple[Attachment, ...] = ()
        """The files the request being run attached (read once, when it was sent)."""
        self._frame: tuple[dict, tuple[str, str] | None] | None = None
        """The template's inputs but the history, and the prompt rendered from them before and after its history."""
        self._history_at = -1
        """Where the last prompt rendered from the frame put its history."""

    def new_run(self) -> None:
        """Read the facts and the project's AGENTS.md again (either may differ) and render every action's guide."""
        self._facts = self._python3 = None
        self._project = None
        self._cached = ""
        self._frame = None
        for action in self.agent.registered_actions:
            if action.guide_template:
                action.guide_prompt = self.guide(action)

    def prompt(self, feedback: str = "", limit: int = 0) -> Prompt:
        """The full prompt for the next step; `feedback` says what was wrong with the last reply. Past `limit`
        characters (0: none) the middle of the history is cut, never the instructions or the tail."""
        agent = self.agent
        events = of_run(agent.event_stream).events_list
        jobs, older_jobs = agent.run_safety.job_lines() if agent.run_safety else ([], 0)
        last = next((event for event in reversed(events) if kind_of(event.type).in_prompt  # not a rejected reply
                     and kind_of(event.type).group != "hook"), None)  # nor what a formatter's hook said since
        plan = agent.run_state.plan if agent.run_state is not None else None
        now = {"background_jobs": jobs, "older_jobs": older_jobs, "plan": plan if plan and plan.total else None,
               "children": agent.running_children(), "siblings": agent.siblings(),
               "after_edit": last is not None and last.type == "edit_file"}  # a formatter's hook may have run since
        return self._fitted(lambda history: self._render(history, now, feedback), limit)

    def asking(self, request: str) -> Prompt:
        """The prompt's head (the fixed part and the history, as the next step shows them), then `request` where the
        tail would be: a fold's prompt, which the provider's cache serves up to the end of the history. Within the
        model's limit, like every prompt."""
        def render(history: str) -> str:
            return f"{self._render(history, NOTHING_NOW, '').removesuffix(chr(10))}\n\n{request}"

        return self._fitted(render, None)

    def _fitted(self, render: Callable[[str], str], limit: int | None) -> Prompt:
        """`render(history)`; past `limit` characters (0: none; None: what fits the model), the history's middle cut."""
        history = format_event_stream(of_run(self.agent.event_stream), self.sizing.prompt)
        text = render(history)
        limit = self.sizing.fit(text) if limit is None else limit
        if 0 < limit < len(text):
            room = len(history) - (len(text) - limit)
            if room <= 0 and self.sizing.window is None:  # the fixed part alone is past max_prompt_chars: the call's
                room = limit // 2  # clip cuts its middle, and the history's end (the request) stays
            history = clip(history, room) if room > 0 else omission(len(history)).strip()
            text = render(history)
        return self._cacheable(text, history)

    def fixed_text(self) -> str:
        """The prompt's fixed part: everything before the `# History` heading."""
        text = self._render("", NOTHING_NOW, "")
        return text[:text.find(HISTORY_HEADING) + 1 or len(text)]

    def _render(self, history: str, now: dict, feedback: str) -> str:
        """The prompt; `now` holds what its tail (`# Now`) shows: background jobs, the plan, running children, the
        siblings working in the same folder, the reminder after an edit. A packaged template is rendered again only
        when an input other than the history changed; one of the user's or a plug-in's (inline source) may read
        anything of the agent: rendered every time."""
        agent, config = self.agent, self.sizing.prompt
        inputs = {**self.offered(), **now, "action_guides": [a.guide_prompt for a in agent.registered_actions],
                  "platform": {**self.facts(), "python3": self.python3()}, "project_files": self.project_files(),
                  "project_limit": config.max_agents_md_chars, "notes": list(agent.notes), "feedback": feedback}
        if config.template_dir or "{{" in agent.agent_prompt_template or "{%" in agent.agent_prompt_template:
            self._history_at = -1
            return self._template(config.template_dir, inputs, history)
        if self._frame is None or self._frame[0] != inputs:
            head, slot, tail = self._template("", inputs, HISTORY_SLOT).partition(HISTORY_SLOT)
            self._frame = (inputs, (head, tail) if slot and HISTORY_SLOT not in tail else None)
        parts = self._frame[1]
        self._history_at = len(parts[0]) if parts else -1
        return f"{parts[0]}{history}{parts[1]}" if parts else self._template("", inputs, history)

    def _template(self, template_dir: str, inputs: dict, history: str) -> str:
        agent = self.agent
        return render_template(agent.agent_prompt_template, template_dir, **inputs, history=history, agent=agent)

    def _cacheable(self, text: str, history: str) -> Prompt:
        """The prompt with its cache breaks: the end of the stable prefix, of what the last prompt cached (the provider
        reads it from there) and of this history; and the facts of this machine and folder it states. The history's
        block takes the blank lines after it (a provider sends no blank block), so that the next prompt can break
        where the cached block ended."""
        key, local = f"anges-{self.agent.uid}", {"workdir": self.agent.cmd_init_dir, "python3": self.python3()}
        fixed = text.find(HISTORY_HEADING) + 1
        if not fixed:
            return Prompt(text, cache_key=key, local_facts=local, attachments=self._attachments)
        at = self._history_at
        start = at if history and at >= fixed and text.startswith(history, at) else text.find(history, fixed)
        if start < 0:
            return Prompt(text, (fixed,), (fixed,), key, local, self._attachments)
        end = start + len(history)
        end += len(text) - end - len(text[end:].lstrip())
        grown = len(self._cached) if self._cached and text.startswith(self._cached) else 0
        if grown and not text[grown:end].strip():
            end = grown  # the same history: its block ends where the cached one did
        self._cached = text[:end]
        return Prompt(text, (fixed, grown, end), (fixed, end), key, local, self._attachments)

    def request_facts(self, stop: Callable[[], bool], request: str = "") -> dict:
        """What a request's event records of the run's prompt: the model's window (`Sizing.new_run`), the
        AGENTS.md files read for it (`agents_md`, when they are read: `ProjectFile.facts`; `/status` shows them) and
        the files the request attached (`attachments`: their facts, never their bytes), which every prompt of the
        run carries."""
        facts = self.sizing.new_run(self.fixed_text, stop)
        self._attachments = attachments_of(request)
        if self._attachments:
            facts["attachments"] = [item.facts() for item in self._attachments]
        if self.sizing.prompt.agents_md:
            facts["agents_md"] = [file.facts() for file in self.project_files()]
        return facts

    def project_files(self) -> list[ProjectFile]:
        """The project's AGENTS.md files (none when `prompt.agents_md` is off), read once per run: they belong to
        the prompt's stable prefix."""
        if self._project is None:
            config, agent = self.sizing.prompt, self.agent
            self._project = read_agents_md(agent.cmd_init_dir, config.max_agents_md_chars, agent.secrets,
                                           self._hidden()) if config.agents_md else []
        return self._project

    def _hidden(self):
        """What the run's sandbox hides from commands: anges reads none of it for the prompt either."""
        from anges.safety.sandbox import SandboxSettings

        agent = self.agent
        settings = agent.run_safety.settings if agent.run_safety else SandboxSettings.for_run(
            agent.config.safety, agent.cmd_init_dir)
        return settings.is_hidden

    def guide(self, action: Action) -> str:
        """The guide of one built-in action, rendered from its `guide_template`."""
        agent, facts = self.agent, self.facts()
        return render_template(
            action.guide_template, agent.config.prompt.template_dir, shell=facts["shell"], sandbox=facts["sandbox"],
            default_timeout=int(agent.agent_config.shell_cmd_timeout),
            max_timeout=int(agent.agent_config.max_shell_cmd_timeout), agent=agent, action=action, **self.offered())

    def offered(self) -> dict[str, list[str]]:
        """The agent's action types, and those that end its turn: the prompt speaks of these only."""
        actions = self.agent.registered_actions
        return {"action_types": [a.type for a in actions],
                "returning": [a.type for a in actions if a.returning_action]}

    def facts(self) -> dict:
        """The environment section: OS, shell, working directory, command prefix, sandbox."""
        if self._facts is None:
            from anges.safety.shell import find_shell

            agent = self.agent
            self._facts = {"os": platform.system(), "shell": os.path.basename(find_shell()),
                           "cwd": agent.cmd_init_dir, "prefix_cmd": agent.prefix_cmd,
                           "sandbox": agent.run_safety.facts(agent.readonly_shell) if agent.run_safety else None}
        return self._facts

    def python3(self) -> str:
        """Where the run's commands find `python3` ("" when they find none, or before the run has its environment)."""
        state = self.agent.run_state
        if self._python3 is None and state is not None:
            from anges.safety.python_env import commands_python

            self._python3 = commands_python(state.context.env or os.environ)
        return self._python3 or ""
