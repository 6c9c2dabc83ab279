"""The slash commands of the session: a registry of small functions, each `(session, argument) -> None`.

A command runs on a thread of its own (never the screen's); what it says goes into the transcript. Those that
change the agent (`idle_only`) wait for no run: they are refused while one works.
"""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rich.text import Text

from anges.cli.custom_commands import CustomCommand, custom_commands, project_commands
from anges.exceptions import UsageError
from anges.util.printable import printable

if TYPE_CHECKING:
    from anges.cli.build import Setup
    from anges.cli.picker import Picker
    from anges.cli.screen import Screen
    from anges.cli.session import Session
    from anges.cli.status import Status
    from anges.cli.terminal import Display
    from anges.cli.transcript import Transcript
    from anges.store.events import EventStream

SANDBOX_MODES = {"workspace": "commands may write the working directory only", "read-only": "commands write nothing "
                 "but a private /tmp", "off": "no sandbox: commands run with your rights"}
APPROVAL_MODES = {"ask": "you answer each action that needs approval", "auto": "approved without asking (leaving "
                  "the sandbox is still declined)", "deny": "declined without asking"}
KEYS = [("Enter", "send the request (queued while a run works)"),
        ("Alt-Enter, Ctrl-J, Shift-Enter", "a new line (Shift-Enter where the terminal reports it)"),
        ("Ctrl-G", "edit the request in $VISUAL or $EDITOR"),
        ("Up, Down", "earlier requests (this and past sessions); Up also takes back a queued request"),
        ("Ctrl-R", "search the earlier requests"), ("Tab", "complete a command, or a file after @"),
        ("Esc, Ctrl-C", "stop the run (what was queued comes back into the box)"),
        ("Esc Esc", "rewind: back to an earlier request (at an empty box)"),
        ("!COMMAND", "run COMMAND yourself, in the sandbox; the agent reads its output"),
        ("y n a t v", "answer an approval: yes, no, always, no and tell why, view it all"),
        ("Ctrl-C twice, Ctrl-D", "leave (at an empty box)")]


class Interactive(Protocol):
    """What a command may use of the session (`anges.cli.interactive.Interactive`); a command runs once it is
    loaded, a completion perhaps before."""

    @property
    def setup(self) -> Setup: ...
    @property
    def session(self) -> Session:
        """The agent of the stream being worked on."""
    @property
    def stream(self) -> EventStream: ...
    @property
    def transcript(self) -> Transcript: ...
    status: Status
    screen: Screen
    picker: Picker
    display: Display
    running: bool
    cancel: threading.Event | None
    """Set when Esc asks a command's long work (a fold) to stop; the command sets it up and takes it away."""

    def use(self, stream, show_earlier: bool = True, new_model: bool = False) -> None: ...
    def request(self, text: str, echo: bool = True, typed: bool = False) -> None:
        """Send `text` as a request (queued while a run works); on the screen's thread."""
    def say(self, text: str, style: str = "") -> None: ...
    def edit(self, text: str) -> None:
        """Put `text` into the input box (on the screen's thread)."""
    def cwd(self) -> str: ...
    def leave(self) -> None: ...
    def run_in_background(self, work: Callable[[], None]) -> None: ...
    def loaded(self) -> bool: ...


@dataclass(frozen=True)
class Command:
    """One slash command."""

    name: str
    usage: str
    help: str
    run: Callable[[Interactive, str], None]
    idle_only: bool = False
    complete: Callable[[Interactive, str], Iterable[tuple[str, str]]] | None = None


COMMANDS: dict[str, Command] = {}
ALIASES = {"quit": "exit", "?": "help"}


def command(usage: str, help: str, idle_only: bool = False, complete=None):
    """Register the decorated function as the command `usage` starts with."""
    def register(function):
        name = usage.split()[0].lstrip("/")
        COMMANDS[name] = Command(name, usage, help, function, idle_only, complete)
        return function
    return register


def run_command(session: Interactive, line: str) -> None:
    """Run the command `line` (`/name argument`); an unknown one says which exist."""
    name, _, argument = line.lstrip("/").partition(" ")
    found = COMMANDS.get(ALIASES.get(name.lower(), name.lower()))
    custom = your_commands(session) if found is None else {}
    if name.lower() in custom:
        run_custom(session, custom[name.lower()], argument.strip())
    elif found is None:
        known = ", ".join(f"/{name}" for name in [*COMMANDS, *custom])
        session.say(f"unknown command /{name}: the commands are {known} (/help says more)", "yellow")
    elif found.idle_only and session.running:
        session.say(f"/{found.name} changes the agent: it waits for no run (Esc stops the one working)", "yellow")
    else:
        found.run(session, argument.strip())


def is_command(text: str) -> bool:
    """`/help`, `/model NAME`...: a slash command, not a request (`/etc/hosts is wrong` is one)."""
    name = text.split()[0][1:].lower() if text.startswith("/") else ""
    return bool(name) and ALIASES.get(name, name) in COMMANDS


def your_commands(session: Interactive) -> dict[str, CustomCommand]:
    """The commands of your Markdown files (and the trusted project's) by name, but for the built-in names."""
    reserved = {*COMMANDS, *ALIASES}
    if not session.loaded():
        return custom_commands(None, None, reserved)
    return custom_commands(session.cwd(), session.setup.config.safety, reserved)


def run_custom(session: Interactive, custom: CustomCommand, arguments: str) -> None:
    """Send a command file's request (queued while a run works)."""
    if custom.problem:
        session.say(f"/{custom.name}: {custom.path} is {custom.problem.removeprefix('not usable: ')}", "yellow")
        return
    text = custom.request(arguments)
    if not text:
        session.say(f"/{custom.name}: {custom.path} holds no request", "yellow")
        return
    lines = text.count("\n") + 1
    session.say(f"/{custom.name}: the request of {custom.path} ({lines} line{'s' if lines != 1 else ''})", "dim")
    session.screen.in_loop(lambda: session.request(text, echo=False))


def completions(session: Interactive, before: str) -> list[tuple[str, str]]:
    """(completion, meaning) pairs for the text before the cursor, a line starting with `/`."""
    name, space, argument = before.lstrip("/").partition(" ")
    if not space:
        return [*((f"/{found.name}", found.help) for found in COMMANDS.values()),
                *((f"/{custom.name}", custom.help) for custom in your_commands(session).values())]
    found = COMMANDS.get(name)
    return list(found.complete(session, argument)) if found is not None and found.complete else []


def _choices(options: dict[str, str]):
    return lambda session, argument: list(options.items())


def _models(session: Interactive, argument: str) -> list[tuple[str, str]]:
    if not session.loaded():
        return []
    return [(name, f"{preset.provider}:{preset.model}") for name, preset in session.setup.config.models.items()]


def _streams(session: Interactive, argument: str) -> list[tuple[str, str]]:
    if not session.loaded():
        return []
    return [(info.uid, (info.title or "")[:60]) for info in _recent(session)]


PICKED_RUNS = 200
"""Runs the /resume picker offers (the most recent)."""


def _recent(session: Interactive, count: int = 12) -> list:
    return [info for info in session.setup.store.list() if not info.parent_ids][:count]


@command("/help", "the commands and keys")
def show_help(session: Interactive, argument: str) -> None:
    custom = your_commands(session)
    width = max(len(usage) for usage in [*(found.usage for found in COMMANDS.values()),
                                         *(found.usage for found in custom.values())])
    lines = [Text("commands", "bold")]
    lines += [Text.assemble(("  " + found.usage.ljust(width), "cyan"), "  " + found.help)
              for found in COMMANDS.values()]
    if custom:
        lines.append(Text("your commands (a request each)", "bold"))
        lines += [Text.assemble(("  " + found.usage.ljust(width), "cyan"), "  " + printable(found.help))
                  for found in custom.values()]
    _, untrusted = project_commands(session.cwd(), session.setup.config.safety)
    if untrusted:
        lines.append(Text(printable(untrusted), "dim"))
    lines.append(Text("keys", "bold"))
    key_width = max(len(key) for key, _ in KEYS)
    lines += [Text.assemble(("  " + key.ljust(key_width), "cyan"), "  " + meaning) for key, meaning in KEYS]
    session.transcript.print(lines)


@command("/new", "start a new stream (the next request starts afresh)", idle_only=True)
def new_stream(session: Interactive, argument: str) -> None:
    session.use(session.setup.stream(), show_earlier=False)
    session.say("a new stream: the next request starts afresh", "dim")


@command("/resume [ID]", "continue an earlier run (without ID: choose one, by age, folder or title)", idle_only=True,
         complete=_streams)
def resume(session: Interactive, argument: str) -> None:
    if argument:
        session.use(session.setup.store.load(argument))
        session.say(f"resumed {argument}: the next request continues it", "dim")
        return
    recent = _recent(session, count=PICKED_RUNS)
    if not recent:
        session.say("no earlier runs yet", "yellow")
        return
    now = datetime.datetime.now()
    choices = [(info.uid, f"{age(now - info.updated_at):>9}  {shown_folder(info.folder, 28):<28}  {info.status:<11}  "
                          f"{printable(info.title or '')[:60]}  {info.uid}") for info in recent]

    def chosen(uid: str | None) -> None:
        if uid is not None:
            session.run_in_background(lambda: resume(session, uid))

    session.screen.in_loop(lambda: session.picker.offer("resume which run? (newest first)", choices, chosen,
                                                        filter=True))


def age(elapsed: datetime.timedelta) -> str:
    """`just now`, `5 min ago`, `3 h ago`, `2 days ago`."""
    seconds = max(elapsed.total_seconds(), 0)
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h ago"
    days = seconds // 86400
    return f"{days:.0f} day{'s' if days != 1 else ''} ago"


def shown_folder(folder: str, width: int) -> str:
    """A working directory as a person reads it: `~/src/app`, its end when it is long."""
    home = os.path.expanduser("~")
    if folder == home or folder.startswith(home + os.sep):
        folder = "~" + folder[len(home):]
    folder = printable(folder) or "?"
    return folder if len(folder) <= width else "…" + folder[-(width - 1):]


@command("/list", "recent runs, children under their parent")
def list_runs(session: Interactive, argument: str) -> None:
    from anges.cli.runs import format_list

    infos = session.setup.store.list()
    session.transcript.print(format_list(infos, limit=15) if infos else [Text("no runs yet", "dim")])


@command("/model [NAME]", "the model of the next requests (a preset, PROVIDER:MODEL-ID, ...; without NAME: choose)",
         idle_only=True, complete=_models)
def model(session: Interactive, argument: str) -> None:
    if not argument:
        presets = session.setup.config.models
        current = session.status.model
        choices = [(name, f"{name:<14} {preset.provider}:{preset.model}" + ("  (now)" if current.startswith(
            f"{name}:") else "")) for name, preset in presets.items()]

        def chosen(name: str | None) -> None:
            if name is not None:
                session.run_in_background(lambda: model(session, name))

        session.say(f"model now: {current} (or type /model PROVIDER:MODEL-ID)", "dim")
        session.screen.in_loop(lambda: session.picker.offer("which model?", choices, chosen, filter=True))
        return
    agent = session.session.agent
    session.setup.model_for(agent.agent_type, argument)  # a name that cannot be used says why, and changes nothing
    session.setup.model = argument
    session.use(agent.event_stream, show_earlier=False, new_model=True)
    session.say(f"model: {session.status.model}", "dim")


@command("/sandbox [MODE]", "where commands may write: workspace, read-only or off", idle_only=True,
         complete=_choices(SANDBOX_MODES))
def sandbox(session: Interactive, argument: str) -> None:
    _setting(session, "sandbox", argument, SANDBOX_MODES)


@command("/approval [MODE]", "what needs approval gets: ask, auto or deny", idle_only=True,
         complete=_choices(APPROVAL_MODES))
def approval(session: Interactive, argument: str) -> None:
    _setting(session, "approval", argument, APPROVAL_MODES)


def _setting(session: Interactive, name: str, value: str, modes: dict[str, str]) -> None:
    current = getattr(session.setup.config.safety, name) or "ask"
    if not value:
        session.say(f"{name}: {current} ({modes[current]}); one of {', '.join(modes)}", "dim")
        return
    if value not in modes:
        raise UsageError(f"/{name} {value}: choose one of {', '.join(modes)}")
    session.setup.change_safety(**{name: value})
    session.use(session.session.agent.event_stream, show_earlier=False)
    session.say(f"{name}: {value} ({modes[value]})", "dim")


@command("/cost", "tokens, cost and cache hits of this session")
def cost(session: Interactive, argument: str) -> None:
    usage = session.status.session
    parts = [f"{usage.steps} steps", f"{usage.model_calls} model calls",
             f"{usage.input_tokens:,} input / {usage.output_tokens:,} output tokens"]
    if usage.cache_hits is not None:
        parts.append(f"{usage.cache_hits:.0%} of input from the cache ({usage.cached_tokens:,} tokens)")
    parts.append(f"${usage.cost:.4f}" if usage.cost is not None else "cost unknown (no price for this model)")
    session.say("this session: " + " · ".join(parts))


@command("/diff [STEP]", "what this stream's steps changed in the files (or one step: its number)")
def diff(session: Interactive, argument: str) -> None:
    from anges.cli.checkpoints import not_covered_lines
    from anges.cli.render import files_diff

    found = _checkpoints(session).diff(_step(argument, "/diff STEP"))
    if not found.files:
        session.say("no changes", "dim")
    else:
        uid = session.stream.uid
        session.transcript.print([*files_diff(found.text, session.display.styled),
                                  Text(f"(all of it, for git apply: anges diff {uid})", "dim")])
    for line in not_covered_lines(found):
        session.say(line, "dim")


@command("/steps", "the steps that could change files, by number (what /diff STEP and /undo STEP take)")
def steps(session: Interactive, argument: str) -> None:
    from anges.cli.checkpoints import step_lines

    found = _checkpoints(session).steps()
    if not found:
        session.say("no step has changed files yet", "dim")
        return
    session.transcript.print([Text(line) for line in step_lines(found)])


@command("/undo [STEP] [--overwrite]", "put the files back as they were before the last step that changed them "
         "(or step STEP: see /steps)",
         idle_only=True)
def undo(session: Interactive, argument: str) -> None:
    from anges.cli.checkpoints import plan_lines
    from anges.cli.render import files_diff

    words = argument.split()
    overwrite = "--overwrite" in words
    checkpoints = _checkpoints(session)
    plan = checkpoints.plan_undo(_step(" ".join(w for w in words if w != "--overwrite"), "/undo STEP"))
    if not plan.diff.files:
        session.say(f"nothing to undo: the files are as they were before step {plan.to.number}", "dim")
        return
    session.transcript.print([*files_diff(plan.diff.text, session.display.styled),
                              *(Text(line) for line in plan_lines(plan))])
    if plan.conflicts and not overwrite:
        raise UsageError("not undone: someone other than the agent changed the files above after the checkpoint "
                         "(or what they hold now is not saved); /undo --overwrite replaces them")

    def chosen(answer: str | None) -> None:
        if answer != "yes":
            session.say("not undone", "dim")
            return

        def apply() -> None:
            done = checkpoints.undo(plan.to.number, overwrite=overwrite, expect=plan.token, by="session")
            session.say(f"undone: {done.diff.stat_line}; the stream records it, so the agent knows")

        session.run_in_background(apply)

    choices = [("yes", "yes, put these files back"), ("no", "no, leave them")]
    session.screen.in_loop(lambda: session.picker.offer("undo this?", choices, chosen))


def _checkpoints(session: Interactive):
    from anges.checkpoints import Checkpoints

    config = session.setup.config
    return Checkpoints(session.session.agent.event_stream, session.setup.store, config.checkpoints,
                       config.prompt.template_dir)


def _step(argument: str, usage: str) -> int | None:
    """A step number, or None for none."""
    if not argument:
        return None
    if not argument.isdigit() or int(argument) < 1:
        raise UsageError(f"{usage}: STEP is a step's number (its event's number in the stream)")
    return int(argument)


@command("/jobs [kill N]", "the run's background jobs; kill one by its number or pid")
def jobs(session: Interactive, argument: str) -> None:
    safety = session.session.agent.run_safety
    found = safety.runners.jobs() if safety is not None else []
    if argument:
        verb, _, which = argument.partition(" ")
        if verb != "kill" or not which.strip().isdigit():
            raise UsageError("/jobs kill N: N is a job's number in /jobs or its pid")
        number = int(which)
        job = next((job for n, job in enumerate(found, 1) if number in (n, job.pid)), None)
        if job is None:
            raise UsageError(f"no background job {number} (see /jobs)")
        job.process.kill()
        session.say(f"killed job {number} (pid {job.pid}): {job.status()}", "dim")
        return
    if not found:
        session.say("no background jobs", "dim")
        return
    for number, job in enumerate(found, 1):
        session.say(f"{number}  pid {job.pid}  {job.status():<18}  {' '.join(job.command.split())[:80]}  "
                    f"(log: {job.log_path})")


@command("/plan", "the plan the agent keeps, every step of it")
def plan(session: Interactive, argument: str) -> None:
    from anges.cli.render import plan_lines
    from anges.store.export import printable_event
    from anges.store.plans import Plan

    latest = next((event for event in reversed(session.stream.events_list) if event.type == "plan_updated"), None)
    found = Plan.of(printable_event(latest)) if latest is not None else None
    if found is None or not found.total:
        session.say("no plan: the agent keeps one (UPDATE_PLAN) on a task of several steps", "dim")
        return
    session.transcript.print(plan_lines(found))


@command("/export [FILE]", "the stream as a Markdown report (default: anges-ID.md here)")
def export(session: Interactive, argument: str) -> None:
    from anges.cli.streams import writable_roots, write_report
    from anges.store.export import to_markdown
    from anges.util.paths import links_on_the_way, links_text

    stream = session.stream
    path = os.path.join(session.cwd(), os.path.expanduser(argument or f"anges-{stream.uid}.md"))

    def write() -> None:
        write_report(path, to_markdown(stream, session.setup.store))
        session.say(f"wrote {path}", "dim")

    links = links_on_the_way(path, writable_roots({"cmd_init_dir": session.cwd()}, session.setup.config.safety))
    through = [(link, target) for link, target in links if link != os.path.normpath(path)]
    if through:
        session.say(f"not written: {links_text(through)}, and anges never writes through a link a command may have "
                    "made; name another file", "dim")
        return
    if not os.path.lexists(path):
        write()
        return

    def chosen(answer: str | None) -> None:
        if answer != "yes":
            session.say(f"not written: {path} is as it was", "dim")
            return
        session.run_in_background(write)

    shown = printable(argument or os.path.basename(path))
    if links:
        question = f"{shown} is a link to {printable(os.path.normpath(links[0][1]))}: replace the link with the " \
                   "report? (what it points to stays as it is)"
        choices = [("yes", "yes, replace the link"), ("no", "no, keep it")]
    else:
        question, choices = f"{shown} exists: replace it?", [("yes", f"yes, replace {shown}"), ("no", "no, keep it")]
    session.screen.in_loop(lambda: session.picker.offer(question, choices, chosen))


@command("/exit", "leave the session (/quit too)")
def leave(session: Interactive, argument: str) -> None:
    session.screen.in_loop(session.leave)

