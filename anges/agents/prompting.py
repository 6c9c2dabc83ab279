"""An agent's prompt and its actions' guides, rendered from the templates."""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Protocol

from anges.agents.run import of_run
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
NOTHING_NOW = {"background_jobs": [], "older_jobs": 0, "plan": None, "children": [], "after_edit": False}


class Prompted(Protocol):
    """What an agent's prompt is made of (the templates read these as `agent` too)."""

    uid: str
    config: Config
    agent_config: AgentConfig
    agent_prompt_template: str
    registered_actions: list[Action]
    event_stream: EventStream | None
    run_safety: RunSafety | None
    notes: list[str]
    cmd_init_dir: str
    prefix_cmd: str
    secrets: list[str]
    readonly_shell: bool
    run_state: RunState | None

    def running_children(self) -> list[dict]: ...


class Prompter:
    """Renders one agent's prompt. The environment facts are read once per run: they belong to the prompt's stable
    prefix, which must stay byte-identical from step to step."""

    def __init__(self, agent: Prompted, sizing: Sizing):
        self.agent = agent
        self.sizing = sizing
        """Holds the run's prompt limits (`config.prompt`, scaled down for a small context window)."""
        self._facts: dict | None = None
        self._project: list[ProjectFile] | None = None
        self._history = ""
        """The history the last prompt showed: where the next one may hit the provider's cache."""

    def new_run(self) -> None:
        """Read the facts and the project's AGENTS.md again (either may differ) and render every action's guide."""
        self._facts = None
        self._project = None
        self._history = ""
        for action in self.agent.registered_actions:
            if action.guide_template:
                action.guide_prompt = self.guide(action)

    def prompt(self, feedback: str = "", limit: int = 0) -> Prompt:
        """The full prompt for the next step; `feedback` says what was wrong with the last reply. Past `limit`
        characters (0: none) the middle of the history is cut, never the instructions or the tail."""
        agent = self.agent
        stream = of_run(agent.event_stream)
        events = stream.events_list
        history = format_event_stream(stream, self.sizing.prompt)
        jobs, older_jobs = agent.run_safety.job_lines() if agent.run_safety else ([], 0)
        last = next((event for event in reversed(events) if kind_of(event.type).group != "hook"), None)
        plan = agent.run_state.plan if agent.run_state is not None else None
        now = {"background_jobs": jobs, "older_jobs": older_jobs, "plan": plan if plan and plan.total else None,
               "children": agent.running_children(),
               "after_edit": last is not None and last.type == "edit_file"}  # a formatter's hook may have run since
        text = self._render(history, now, feedback)
        if 0 < limit < len(text):
            room = len(history) - (len(text) - limit)
            if room <= 0 and self.sizing.window is None:  # the fixed part alone is past max_prompt_chars: the call's
                room = limit // 2  # clip cuts its middle, and the history's end (the request) stays
            history = clip(history, room) if room > 0 else omission(len(history)).strip()
            text = self._render(history, now, feedback)
        return self._cacheable(text, history)

    def fixed_text(self) -> str:
        """The prompt's fixed part: everything before the `# History` heading."""
        text = self._render("", NOTHING_NOW, "")
        return text[:text.find(HISTORY_HEADING) + 1 or len(text)]

    def _render(self, history: str, now: dict, feedback: str) -> str:
        """The prompt; `now` holds what its tail (`# Now`) shows: background jobs, the plan, running children, the
        reminder after an edit."""
        agent, config = self.agent, self.sizing.prompt
        return render_template(
            agent.agent_prompt_template, config.template_dir, **self.offered(), **now,
            action_guides=[a.guide_prompt for a in agent.registered_actions], platform=self.facts(),
            project_files=self.project_files(), project_limit=config.max_agents_md_chars,
            notes=agent.notes, history=history, feedback=feedback, agent=agent)

    def _cacheable(self, text: str, history: str) -> Prompt:
        """The prompt with its cache breaks: the end of the stable prefix, of the history the last prompt showed
        (the provider cached up to there) and of this history."""
        key = f"anges-{self.agent.uid}"
        fixed = text.find(HISTORY_HEADING) + 1
        if not fixed:
            return Prompt(text, cache_key=key)
        start = text.find(history, fixed)
        if start < 0:
            return Prompt(text, (fixed,), (fixed,), key)
        previous, self._history = self._history, history
        grown = start + len(previous) if previous and history.startswith(previous) else 0
        return Prompt(text, (fixed, grown, start + len(history)), (fixed, start + len(history)), key)

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
