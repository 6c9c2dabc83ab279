"""An example anges plug-in: an action, a model provider and an agent type, registered through the `anges.plugins`
hooks.

    pip install ./examples/plugin
    anges --action COUNT_LINES --model lines:README.md -q "How long is the README?"
    anges --agent line_counter --model lines:README.md -q "How long is the README?"
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from anges import Event
from anges.actions import Action, ActionContext, Param
from anges.agents import BaseAgent
from anges.plugins import hookimpl


class CountLines(Action):
    """COUNT_LINES: how many lines a text file in the working directory has."""

    type = "COUNT_LINES"
    guide_prompt = ("## COUNT_LINES\nCount the lines of one text file in the working directory.\n"
                    "Fields: `path` (string, required), relative to the working directory.\n")
    params = {"path": Param(str, non_empty=True, description="a file in the working directory")}

    def run(self, ctx: ActionContext, args: dict) -> Event:
        workdir = Path(ctx.cwd).resolve()
        path = (workdir / args["path"]).resolve()
        if not path.is_relative_to(workdir):  # actions run in the anges process, outside the sandbox: stay inside
            return self._failed(args["path"], "is outside the working directory")
        try:
            with path.open(encoding="utf-8", errors="replace") as file:
                count = sum(1 for _ in file)
        except OSError as exc:
            return self._failed(args["path"], exc.strerror or str(exc))
        return Event("action", content=f"COUNT_LINES {args['path']}: {count} lines",
                     message=f"counted the lines of {args['path']}",
                     data={"action_type": self.type, "path": str(path), "lines": count})

    def _failed(self, path: str, why: str) -> Event:
        return Event("action", content=f"COUNT_LINES {path}: FAILED, {why}", message=f"could not count {path}",
                     data={"action_type": self.type, "error": why})


class LineCounter(BaseAgent):
    """An agent type that answers how long files are: the task executor's prompt with a role of its own, and
    COUNT_LINES among its actions (no --action needed)."""

    agent_type = "line_counter"
    template = ('{% extends "agents/task_executor.j2" %}{% block role %}You are a line counter: you find out how '
                "long the user's files are, counting their lines with COUNT_LINES, and report the counts."
                "{% endblock %}")
    action_types = ("COUNT_LINES", "RUN_SHELL_CMD", "TASK_COMPLETE", "HELP_NEEDED")
    can_be_child = True  # an orchestrator may delegate to it: NEW_CHILD_AGENT LINE_COUNTER


class LinesModel:
    """A model that needs no network: it counts the lines of the file its model id names, then reports them.

    A provider is any class called as `cls(preset, settings, retry, name=...)` whose instances turn a prompt into
    a reply: `lines:README.md` gives the preset `provider="lines", model="README.md"`.
    """

    RESULT = re.compile(r"COUNT_LINES (?P<path>\S+): (?P<count>\d+) lines")

    def __init__(self, preset, settings=None, retry=None, *, name: str = ""):
        self.path = preset.model
        self.name = name or f"lines:{preset.model}"

    def __call__(self, prompt: str, temperature: float = 0.0) -> str:
        found = self.RESULT.search(prompt.split("# History", 1)[-1])
        if found:
            action = {"action_type": "TASK_COMPLETE", "content": f"{found['path']} has {found['count']} lines."}
        else:
            action = {"action_type": "COUNT_LINES", "path": self.path}
        return json.dumps({"reasoning": "count, then report", "actions": [action]})


@hookimpl
def register_actions(register):
    register(CountLines)


@hookimpl
def register_providers(register):
    register(LinesModel, name="lines")


@hookimpl
def register_agent_types(register):
    register(LineCounter)
