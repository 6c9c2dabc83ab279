"""An example anges plug-in: one action and one model provider, registered through the `anges.plugins` hooks.

    pip install ./examples/plugin
    anges --action COUNT_LINES --model lines:README.md -q "How long is the README?"
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from anges import Event
from anges.actions import Action, ActionContext, Param
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
