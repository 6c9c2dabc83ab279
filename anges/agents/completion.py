"""The completion check (`agents.*.completion_check`): a TASK_COMPLETE is held once when the run shows a cause anges
can see, named in a short message; one sent with `only_if_succeeded` is dropped when an earlier action of its reply
failed. With no cause, nothing happens: no model call, no prompt text. See docs/results.md."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Protocol

from anges.prompt.templates import render_template
from anges.store.events import Event, kind_of
from anges.store.plans import Plan
from anges.store.results import APICall, FileEdit, ShellRun
from anges.util.clipping import one_line

if TYPE_CHECKING:
    from anges.actions.base import Action
    from anges.config.types import AgentConfig, Config
    from anges.safety.run_safety import RunSafety
    from anges.store.events import EventStream

CHECK_TOOLS = {"pytest", "py.test", "tox", "nox", "unittest", "ruff", "flake8", "pylint", "mypy", "pyright", "black",
               "isort", "eslint", "tsc", "jest", "vitest", "mocha", "ctest", "rspec", "phpunit", "shellcheck",
               "prettier", "rubocop", "golangci-lint"}
"""Commands that are a check by their name (`python -m NAME` too)."""
RUNNERS = {"cargo", "go", "npm", "npx", "yarn", "pnpm", "make", "just", "mvn", "gradle", "gradlew", "dotnet", "bazel",
           "swift", "deno", "bun", "mix", "sbt", "poetry", "uv", "hatch", "pdm", "bundle", "composer"}
"""Project tools whose sub-command says whether they check: `make test`, `npm run lint`, `cargo build` (`make`
alone builds)."""
CHECK_WORDS = re.compile(r"test|lint|check|build|vet|clippy|verify|typecheck|compile|spec")
WRAPPERS = {"env", "time", "timeout", "nice", "xvfb-run", "exec", "command", "bash", "sh", "zsh"}
SIMPLE_COMMANDS = re.compile(r"&&|\|\||[;|\n]")
SHOWN = 5
"""Causes of one kind a held completion names (the rest are counted), so its result stays short."""
UNFINISHED = ("new_child_agent", "resume_child_agent", "queued_child_agent")
"""Events whose action's outcome is not known yet when they are recorded (a child's report comes later)."""


class Planned(Protocol):
    """The run's state as far as the check reads it: the plan."""

    @property
    def plan(self) -> Plan | None: ...


class Finishing(Protocol):
    """What the check reads of the agent whose completion it judges."""

    agent_config: AgentConfig
    config: Config
    event_stream: EventStream | None
    run_safety: RunSafety | None

    @property
    def run_state(self) -> Planned | None: ...

    def running_children(self) -> list[dict]: ...


class CompletionCheck:
    """The check of one request's completions: each TASK_COMPLETE is judged by `held` before it takes effect."""

    def __init__(self, agent: Finishing):
        self.agent = agent
        self.mode = agent.agent_config.completion_check
        events = agent.event_stream.events_list if agent.event_stream is not None else []
        self.request_start = max(len(events) - 1, 0)
        """The request's own event: causes are looked for from there."""
        self.reply_start = len(events)
        self.held_once = False

    def reply_starts(self, length: int) -> None:
        """A reply's actions start running: the stream has `length` events before them."""
        self.reply_start = length

    def held(self, action: Action, args: dict) -> Event | None:
        """The event that holds or drops this action when it is a TASK_COMPLETE that must not take effect yet; None
        to let it (every other action, and a completion with no cause or already held once)."""
        if action.type != "TASK_COMPLETE":
            return None
        events = self.agent.event_stream.events_list if self.agent.event_stream is not None else []
        answer = str(args.get("content") or "")
        if args.get("only_if_succeeded") is True:
            failed = [("reply", text) for text in self._failures(events)]
            if failed:
                return self._event("completion_dropped", "only_if_succeeded", failed, answer)
        if self.mode == "off" or self.held_once:
            return None
        state = self.agent.run_state
        causes = self.causes(events, state.plan if state is not None else None)
        if not causes and self.mode != "always":
            return None
        self.held_once = True
        return self._event("completion_held", self.mode, causes, answer)

    def causes(self, events: list[Event], plan: Plan | None) -> list[tuple[str, str]]:
        """(kind, sentence) for each cause to hold a completion: jobs or children still running, open plan steps,
        a failed check with files changed after it, a failed action of the same reply."""
        causes = [("running", text) for text in self._running(events)]
        if plan is not None and plan.open_steps:
            steps = "; ".join(one_line(step.step, 80) for step in plan.open_steps[:SHOWN])
            more = f" (and {len(plan.open_steps) - SHOWN} more)" if len(plan.open_steps) > SHOWN else ""
            causes.append(("plan", f"the plan has {_count(len(plan.open_steps), 'open step')}: {steps}{more}"))
        if check := failed_check(events[self.request_start:]):
            causes.append(("check", check))
        return causes + [("reply", text) for text in self._failures(events, "in this reply, ")]

    def _failures(self, events: list[Event], lead: str = "") -> list[str]:
        """Why each action of the current reply that failed did (a few, and a count of the rest)."""
        failed = [lead + why for why in map(failure, events[self.reply_start:]) if why]
        return _few(failed, "more actions of this reply failed")

    def _running(self, events: list[Event]) -> list[str]:
        """The background jobs this agent started that still run, and the children it started that have not
        returned."""
        safety = self.agent.run_safety
        mine = {run.pid for run in map(ShellRun.of, events) if run is not None and run.pid is not None}
        jobs = [job for job in (safety.job_lines()[0] if safety is not None else [])
                if job["status"] == "running" and job["pid"] in mine]
        after = "it keeps running after the run" if safety is not None and safety.config.keep_background \
            else "the end of the run ends it"
        texts = [f"pid {job['pid']} `{one_line(job['command'], 100)}` is still running ({after})" for job in jobs]
        return _few(texts + [f"child agent {child['name']} ({child['task']}) is still {child['state']} (completing "
                             "stops it)" for child in self.agent.running_children()], "more still running")

    def _event(self, kind: str, check: str, causes: list[tuple[str, str]], answer: str) -> Event:
        texts = [text for _, text in causes]
        content = render_template(f"{kind}.j2", self.agent.config.prompt.template_dir, causes=texts).strip()
        message = f"{kind_of(kind).title.lower()}: " + ("; ".join(texts) or "one check before it is accepted")
        return Event(kind, content=content, message=message,
                     data={"check": check, "causes": [{"kind": k, "text": t} for k, t in causes], "answer": answer})


def failure(event: Event) -> str:
    """Why the action an event records did not succeed, in a few words ("" when it did, or is no action's)."""
    run = ShellRun.of(event)
    if run is not None:
        command = f"`{one_line(run.command, 80)}`"
        return {"exited": f"{command} exited with code {run.exit_code}" if run.exit_code else "",
                "timed_out": f"{command} was killed after its timeout", "interrupted": f"{command} was interrupted",
                "background": f"{command} went on in the background: its result is not known yet"}[run.state]
    api = APICall.of(event)
    if api is not None:  # a call answered outside 2xx did not succeed, as a command exiting non-zero
        return "" if api.ok else f"CALL_API {api.api}.{api.operation}: {api.outcome()}"
    edit = FileEdit.of(event)
    if edit is not None:
        return f"the edit `{one_line(edit.directive, 80)}` failed: {one_line(edit.error, 120)}" if edit.error else ""
    if event.type in UNFINISHED:
        return f"child agent {event.data.get('agent_id', '')} was started: its report is not in yet"
    error = event.data.get("error") if event.type == "action" else None
    if error or event.data.get("is_error"):
        return f"{event.data.get('action_type') or 'an action'} failed: {one_line(str(error or event.content), 120)}"
    return ""


def failed_check(events: list[Event]) -> str:
    """When the last check command among `events` failed and files were edited after it with no passing check since:
    the sentence saying so; else ""."""
    edited: list[str] = []
    for event in reversed(events):
        run = ShellRun.of(event)
        if run is not None and run.state in ("exited", "timed_out") and is_check(run.command):
            if run.state == "exited" and run.exit_code == 0 or not edited:
                return ""
            how = f"exit code {run.exit_code}" if run.state == "exited" else "killed after its timeout"
            files = ", ".join(f"`{os.path.basename(path)}`" for path in dict.fromkeys(reversed(edited)))
            return (f"the last check, `{one_line(run.command, 80)}`, failed ({how}), and {files} changed after it "
                    "with no passing check since")
        edit = FileEdit.of(event)
        if edit is not None and edit.error is None:
            edited.append(edit.path or edit.directive.split(None, 1)[-1])
    return ""


def is_check(command: str) -> bool:
    """Whether a command runs a check: tests, a build, a linter or a type checker (`pytest -q`, `npm test`,
    `make`, `cargo clippy`, `python -m mypy .`, `./run_tests.sh`, `bash tests/run.sh`)."""
    return any(_checks(part.split()) for part in SIMPLE_COMMANDS.split(command))


def _checks(words: list[str]) -> bool:
    while words and ("=" in words[0] and not words[0].startswith("=") or words[0] in WRAPPERS
                     or words[0].startswith("-") or words[0].isdigit()):
        words = words[1:]  # VAR=value, env, timeout 60, bash ...
    if not words or words[0] == "cd":
        return False
    name = os.path.basename(words[0].strip("'\""))
    if name in CHECK_TOOLS:
        return True
    if re.fullmatch(r"python[\d.]*", name):
        rest = words[1:]
        return rest[:1] == ["-m"] and rest[1:2] != [] and rest[1] in CHECK_TOOLS or \
            bool(rest) and not rest[0].startswith("-") and bool(CHECK_WORDS.search(rest[0]))
    if name in RUNNERS:
        verbs = [word for word in words[1:4] if not word.startswith("-") and word not in ("run", "exec", "x")]
        return (name == "make" and not verbs) or any(_checks([verb]) or CHECK_WORDS.search(verb) for verb in verbs)
    return "/" in words[0] and bool(CHECK_WORDS.search(words[0]))


def _few(texts: list[str], more: str) -> list[str]:
    """The first `SHOWN` of `texts`, and how many more there are."""
    return texts[:SHOWN] + ([f"and {len(texts) - SHOWN} {more}"] if len(texts) > SHOWN else [])


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
