"""What a person reads of an event: one renderer for the live session, the `-q` transcript and `anges show`.

Everything is drawn from `Event.type` and `Event.data` as rich renderables; untrusted text is made printable first
and only ever put in `Text` (never parsed as markup). Unstyled, the lines read exactly as they do styled, without
colour, and the Markdown of an answer is left as written.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, TypedDict, TypeVar

from rich.padding import Padding
from rich.text import Text

from anges.cli.fold_view import fold_lines
from anges.cli.gutter import Wrapped
from anges.cli.hook_view import hook_lines
from anges.cli.terminal import seconds
from anges.store.events import (
    ChildReturn,
    FileEdit,
    ShellRun,
    StepUsage,
    group_of,
    kind_of,
    shown_path,
    status_of,
    stop_explanation,
)
from anges.store.export import drawn_output, printable_event
from anges.store.plans import MARKS, Plan
from anges.store.results import ActionResult, APICall, ports_text
from anges.store.turns import reasoning_after, turn_reasoning
from anges.util.clipping import clip_lines, shorten
from anges.util.printable import printable, visible

if TYPE_CHECKING:
    from rich.console import OverflowMethod, RenderableType

    from anges.store.events import Event

SHOWN_STATUS = {"completed": ("completed", "green"), "answered": ("answered", "green"),
                "help_needed": ("help needed", "yellow"), "interrupted": ("stopped", "yellow"),
                "running": ("running", "cyan")}
"""How each stream status (anges.store.events.status_of) reads and is coloured."""
APPROVERS = {"auto": "automatically (--approval auto)", "approval=deny": "(--approval deny)",
             "no_one": "(no one can approve here)", "always": "(approved earlier for the whole run)",
             "terminal": "by you", "interrupt": "", "limit": "(too long to be shown whole)"}
"""How `approval_decided` says who decided (the `by` fact); a channel's own name reads "by NAME"."""
STOP_REASONS = {"interrupt": "interrupted", "timeout": "out of time", "event_limit": "out of steps",
                "model_call_limit": "out of model calls", "repetition": "stuck repeating itself",
                "invalid_replies": "the model's replies were invalid", "model_error": "the model failed",
                "reply_cut_off": "the model's replies were cut off at max_output_tokens",
                "model_setup": "the model is not usable", "abandoned": "its process ended without finishing",
                "budget": "over budget", "context_window": "the prompt does not fit the model's context window",
                "hook": "stopped by a hook"}
T = TypeVar("T")


class Cut(TypedDict):
    no_wrap: bool
    overflow: OverflowMethod


OUTPUT: Cut = {"no_wrap": True, "overflow": "ellipsis"}
"""One-line heads (a tool's call, an API's request) are cut at the edge of the screen; command output, commands
and diff lines wrap under their gutter (`anges.cli.gutter`), prose wraps."""


class Renderer:
    """Turns one event into what a person reads; `styled` adds colour, Markdown and highlighting."""

    def __init__(self, styled: bool, verbose: bool = False, cwd: str = ""):
        self.styled = styled
        self.verbose = verbose
        self.cwd = cwd
        self.output_lines = 200 if verbose else 8
        self.diff_lines = 400 if verbose else 40
        self.reasoning_lines = 1000 if verbose else 3
        self._turns: dict[str, str] = {}
        """Per agent: the reasoning in effect (a reply's reasoning is shown with its first event only)."""

    def event(self, event: Event, depth: int = 0, agent: str = "", live: bool = False) -> list[RenderableType]:
        """What one event shows; `live` leaves out the top-level request and answer (the user has or gets those)
        and approval requests (the live screen asks them itself)."""
        event, agent = printable_event(drawn_output(event)), printable(agent)
        previous = self._turns.get(agent, "")
        self._turns[agent] = reasoning_after(event, previous)
        group = group_of(event)
        if not kind_of(event.type).in_report or (group == "request" and (live or depth)):  # a child's: its parent's
            return []  # line that starts it shows it
        if live and event.type == "approval_requested":
            return []
        # a child's return carries the reasoning of the step that delegated, already shown when it started
        quiet = group in ("request", "interrupted", "child_exit") or not turn_reasoning(event, previous)
        reasoning = [] if quiet else self._reasoning(event)
        body = [] if live and depth == 0 and group == "answer" else self._body(event, group, depth)
        usage = StepUsage.of(event.data) if self.verbose else None
        if usage is not None:
            body.append(Text("  " + usage.line(), "dim"))
        if depth and agent:  # children's lines interleave: each part's first line says whose it is
            reasoning, body = _tagged(reasoning, agent), _tagged(body, agent)
        return [_indented(item, depth) for item in reasoning + body]

    def answer(self, text: str) -> RenderableType:
        """A final answer: Markdown on a terminal, as written elsewhere (the text is printable already)."""
        return markdown(text) if self.styled else Text(text.rstrip("\n"))

    def _body(self, event: Event, group: str, depth: int) -> list[RenderableType]:
        data, kind = event.data, event.type
        if group == "request":
            label = "request" if kind.startswith("new") else "follow-up"
            return self._block(Text.assemble(("▶", "bold blue"), " ", (label + ":", "bold")), event.content, 6)
        jobs = ended_jobs(event)
        ended = [Text("  " + jobs, "dim")] if jobs else []
        if group == "answer":
            word, colour = SHOWN_STATUS[status_of(kind) or "answered"]  # every answer type sets a status
            head = Text.assemble(("✓" if colour == "green" else "?", f"bold {colour}"), " ", (word, f"bold {colour}"))
            if depth and not self.verbose:
                return [head, *self._clip([Text(line) for line in event.content.splitlines()], 12), *ended]
            return [head, self.answer(event.content), *ended]
        if group == "interrupted":
            return [Text.assemble(("■", "bold yellow"), " ", (stop_text(event), "yellow")), *ended]
        if group in ("shell", "tool", "api", "edit", "approval"):
            draw = {"shell": self._command, "tool": self._tool_call, "api": self._api_call,
                    "edit": self._edit}.get(group, self._approval)
            return draw(event)
        if group == "hook":
            return list(hook_lines(event, self.verbose))
        if group == "fold":
            return list(fold_lines(event, self.verbose))
        if group == "child_start":
            verb = "queues" if data.get("queued") else "starts" if kind == "new_child_agent" else "resumes"
            head = Text.assemble(("⇢", "bold magenta"), f" {verb} ", (data.get("agent_type", "child"), "bold"),
                                 f" {data.get('agent_id', '')}")
            return self._block(head, event.content, 3)
        if group == "child_exit" and (child := ChildReturn.of(event)) is not None:
            status, colour = SHOWN_STATUS.get(child.status, (child.exit_type, "yellow"))
            return [Text.assemble(("⇠", "bold magenta"), f" {child.agent_type} {child.agent_id} returned: ",
                                  (status, colour))]
        if group == "restore":
            return [Text.assemble(("↺", "bold cyan"), f" {event.message or first_line(event.content)}")]
        if group == "plan" and (plan := Plan.of(event)) is not None:
            return plan_lines(plan, whole=False, steps=not depth)
        if group == "held":
            head = Text.assemble(("⏸", "bold yellow"), " ", (kind_of(kind).title.lower(), "yellow"))
            causes = [str(cause.get("text", "")) for cause in data.get("causes") or [] if isinstance(cause, dict)]
            return [head, *self._framed([Text(one_line(cause, 300)) for cause in causes or [event.content]])]
        if group == "rejected":
            return [Text.assemble(("↻", "bold yellow"), " ", (first_line(event.content), "yellow"))]
        result = ActionResult.of(event)
        if result is not None:
            return self._action(result, event.message)
        if data.get("error"):
            return [Text.assemble(("✗", "bold red"), f" {data['error']}")]
        return [Text.assemble(("•", "bold"), f" {kind}: {event.message or first_line(event.content)}")]

    def _action(self, result: ActionResult, message: str) -> list[RenderableType]:
        """Any other action's result (a plug-in's): its name and message, then the text the model read."""
        mark = ("✗", "bold red") if result.error else ("•", "bold cyan")
        head = Text.assemble(mark, " ", (result.action_type or "action", "bold"),
                             f" {one_line(message or result.error)}".rstrip(), **OUTPUT)
        return [head, *self._framed(self._clip([Text(line) for line in result.text.splitlines()], self.output_lines))]

    def _reasoning(self, event: Event) -> list[RenderableType]:
        """The step's analysis (dim) and reasoning (dim italic), their first lines (all with --verbose): the
        analysis the person watched stream in stays once its step lands."""
        return [Text(line, style) for text, style in ((event.analysis, "dim"), (event.reasoning, "dim italic"))
                for line in self._first_lines((text or "").strip())]

    def _first_lines(self, text: str) -> list[str]:
        lines = text.splitlines()
        shown = lines[: self.reasoning_lines]
        if len(lines) > len(shown):
            shown[-1] += " …"
        return shown

    def _command(self, event: Event) -> list[RenderableType]:
        shell = ShellRun.of(event)
        if shell is None:  # group_of says "shell" only of a command's result
            return []
        mark = "!" if event.type == "user_command" else "$"  # a command the user ran (`!command`), or the agent
        head = Wrapped(Text.assemble((mark, "bold cyan"), " "), Text(one_line(shell.command, 2000), "bold"), "  ")
        lines: list[RenderableType] = [head]
        lines += self._framed(self._output(shell))
        status = Text.assemble(("  └ ", "dim"), _shell_status(shell))
        if shell.cut and shell.printed_bytes is not None and not shell.yielded:
            status.append(f" · printed {shell.printed_lines:,} lines, {shell.printed_bytes:,} bytes (cut above)",
                          "dim")
        if event.data.get("sandbox") == "none":
            status.append(" · outside the sandbox" if event.data.get("escalated") else " · no sandbox", "yellow")
        return lines + [status]

    def _output(self, shell: ShellRun) -> list[Text]:
        """The first and last lines of a command's output; the marker between counts the lines it printed that are
        not shown (of an output too large to keep, the record holds only its head and tail)."""
        lines = [Text(line) for line in shell.output().splitlines()]
        if not shell.cut or shell.printed_lines is None or len(lines) <= self.output_lines + 1:
            return self._clip(lines, self.output_lines)
        head = max(self.output_lines // 2, 1)
        tail = max(self.output_lines - head, 1)
        hidden = max(shell.printed_lines - head - tail, 0)
        return [*lines[:head], Text(f"… {hidden:,} more line{'s' if hidden != 1 else ''} …", "dim"), *lines[-tail:]]

    def _tool_call(self, event: Event) -> list[RenderableType]:
        data = event.data
        args = json.dumps(data.get("args") or {}, ensure_ascii=False)
        lines: list[RenderableType] = [Text.assemble(
            ("⚙", "bold cyan"), " ", (data["server"] + "." + data["tool"], "bold"), " " + one_line(args), **OUTPUT)]
        lines += self._framed(self._clip([Text(line) for line in event.content.splitlines()], self.output_lines))
        if data.get("error"):
            status = Text(f"not done: {data['error']}", "red")
        else:
            failed = bool(data.get("is_error"))
            status = Text("tool error" if failed else "ok", "red" if failed else "green")
            status.append(f" · {seconds(data.get('duration', 0))}", "dim")
        return lines + [Text("  └ ", "dim") + status]

    def _api_call(self, event: Event) -> list[RenderableType]:
        call = APICall.of(event)
        if call is None:  # group_of says "api" only of a CALL_API result
            return []
        name = f"{call.api}.{call.operation}" if call.api else call.operation
        head = Text.assemble(("⇄", "bold cyan"), " ", (name, "bold"), **OUTPUT)
        if not call.sent:
            lines = [Text(call.message, "red"), *(Text(problem) for problem in call.problems)]
            return [head, *self._framed(self._clip(lines, self.output_lines))]
        head.append(f" {call.method} {call.url}")
        lines = [Text(line) for line in call.body.splitlines()]
        if call.binary:
            lines = [Text(f"({call.body_bytes:,} bytes of {call.content_type or 'binary data'})", "dim")]
        good = call.ok or (call.status is not None and call.status < 400 and not call.error)
        status = Text.assemble(("  └ ", "dim"), (call.outcome(), "green" if good else "red"),
                               (f" · {seconds(call.duration)}", "dim"))
        if call.error and call.message:
            status.append(f" · {call.message}", "red")
        if call.body_path:
            status.append(f" · body in {call.body_path}", "dim")
        return [head, *self._framed(self._clip(lines, self.output_lines)), status]

    def edit(self, event: Event) -> list[RenderableType]:
        """A file edit: its path, what it added and removed, and the diff."""
        return self._edit(printable_event(event))

    def _edit(self, event: Event) -> list[RenderableType]:
        edit = FileEdit.of(event)
        if edit is None:  # group_of says "edit" only of an `edit_file` event
            return []
        if edit.error is not None:
            return [Text.assemble(("✗", "bold red"), f" edit failed: {edit.directive}"),
                    Text.assemble(("  │ ", "dim"), first_line(edit.error), **OUTPUT)]
        path = shown_path(edit.path, self.cwd) or edit.directive
        head = Text.assemble(("✎", "bold cyan"), " ", ("edited " + path, "bold"), " ",
                             (f"(+{edit.lines_added} −{edit.lines_removed})", "dim"))
        return [head, *self._clip(diff_lines(edit.diff, path, self.styled), self.diff_lines)]

    def _approval(self, event: Event) -> list[RenderableType]:
        data = event.data
        what = f"{data.get('action_type', '')} {one_line(visible(str(data.get('subject', ''))), 120)}"
        outside = " outside the sandbox" if data.get("escalate") else ""
        if event.type == "approval_requested":  # as the question shows it (safety/approval_text.py)
            outside = " (if approved, outside the sandbox)" if data.get("escalate") else ""
            return [Text.assemble(("?", "bold yellow"), " ", ("needs approval:", "yellow"),
                                  f" {what}{outside} — {data.get('reason', '')} ",
                                  (f"[{data.get('rule', '')}]", "dim"))]
        decision, by = str(data.get("decision")), data.get("by", "")
        mark, colour, verb = {"allow": ("✓", "green", "approved"), "deny": ("✗", "red", "declined")}.get(
            decision, ("■", "yellow", "not decided (interrupted)"))
        if data.get("rule") == "trust":  # content to trust (a project's hooks, an MCP server): its own words
            return [Text.assemble((mark, f"bold {colour}"), " ", one_line(visible(event.message), 400))]
        who = APPROVERS.get(by, f"by {by}")
        if by == "rule":
            who = f"by rule {data.get('rule', '')} ({data.get('reason', '')})"
        always = " (and for the rest of the run)" if data.get("always") else ""
        lines: list[RenderableType] = [Text.assemble((mark, f"bold {colour}"), " ", (verb, colour),
                               f"{' ' + who if who else ''}{always}: {what}{outside}")]
        if data.get("feedback"):
            lines.append(Text.assemble(("  │ ", "dim"), one_line(str(data["feedback"])), **OUTPUT))
        return lines

    def _block(self, head: Text, text: str, limit: int) -> list[RenderableType]:
        body = (text or "").strip().splitlines()
        if len(body) == 1:
            return [head + Text(" " + body[0])]
        return [head, *(prefixed("  ", line) for line in self._clip([Text(b) for b in body],
                                                                      limit if not self.verbose else 1000))]

    def _framed(self, lines: list[Text]) -> list[RenderableType]:
        return [Wrapped(Text("  │ ", "dim"), line) for line in lines]

    def _clip(self, lines: list[T], limit: int) -> list[T | Text]:
        """The first and last lines when there are more than `limit`, a dim `… N more lines …` between."""
        shown: list[T | Text] = list(lines)
        return clip_lines(shown, limit, lambda n: Text(f"… {n} more line{'s' if n != 1 else ''} …", "dim"))


def plan_lines(plan: Plan, whole: bool = True, steps: bool = True) -> list[RenderableType]:
    """A plan as a checklist: its progress, then each step ticked off (`whole`: wrapped, else cut at the edge); without
    `steps`, the progress and the step at work on one line (a child's plan, as its parent shows it)."""
    head = Text.assemble(("☰", "bold cyan"), " ", ("plan:", "bold"), f" {plan.progress()}")
    current = plan.current
    if not steps:
        if current is not None:
            head.append(f" · {MARKS[current.status]} {current.step}", "dim")
        return [Text.assemble(head, **OUTPUT)]
    style = {"completed": "dim", "in_progress": "bold", "pending": ""}
    lines = [Text.assemble("  ", (f"{MARKS.get(step.status, '○')} {step.step}", style.get(step.status, "")))
             for step in plan.steps]
    return [head, *(lines if whole else [Text.assemble(line, **OUTPUT) for line in lines])]


def _shell_status(shell: ShellRun) -> Text:
    if shell.state == "timed_out":
        return Text(f"killed after the timeout ({shell.duration:.0f} s)", "red")
    if shell.state == "interrupted":
        return Text("killed: interrupted", "yellow")
    if shell.yielded:
        why = f"listening on {ports_text(shell.listening)}" if shell.listening else \
            f"still running after {seconds(shell.duration)}"
        return Text(f"{why}: went on in the background as pid {shell.pid}, output in {shell.log_path}", "cyan")
    if shell.state == "background":
        return Text(f"started in the background: pid {shell.pid}, output in {shell.log_path}", "cyan")
    return Text.assemble((f"exit {shell.exit_code}", "green" if shell.exit_code == 0 else "red"),
                         (f" · {seconds(shell.duration)}", "dim"))


def _tagged(items: list[RenderableType], agent: str) -> list[RenderableType]:
    tag = Text(f"[{agent}] ", "dim magenta")
    if not items:
        return items
    first = items[0]
    if isinstance(first, Text):
        return [prefixed(tag, first), *items[1:]]
    if isinstance(first, Wrapped):  # a command: the tag before its `$`, its wrapped lines under the command
        return [Wrapped(Text.assemble(tag, first.head), first.body, first.rest), *items[1:]]
    return [tag, *items]


def _indented(item: RenderableType, depth: int) -> RenderableType:
    if not depth:
        return item
    if isinstance(item, Text):
        return prefixed("  " * depth, item)
    return Padding(item, (0, 0, 0, 2 * depth), expand=False)  # no trailing spaces to the width


def prefixed(prefix: Text | str, text: Text) -> Text:
    """`prefix` then `text`, wrapped or cut as `text` is."""
    return Text.assemble(prefix, text, no_wrap=text.no_wrap, overflow=text.overflow)


def diff_lines(diff: str, path: str, styled: bool) -> list[Text | Wrapped]:
    """A unified diff, two spaces in: added lines green, removed red, hunks cyan, and the code highlighted in the
    language of `path` (plain text, as written, unstyled)."""
    lines = diff.splitlines()
    if not styled:
        return [Wrapped("  " + line[:1], Text(line[1:]), "   ") for line in lines]
    highlight = _highlighter(path)
    shown: list[Text | Wrapped] = []
    for line in lines:
        if line.startswith(("---", "+++", "diff --git ", "index ")):
            shown.append(Text("  " + line, "dim", **OUTPUT))
        elif line.startswith("@@"):
            shown.append(Text("  " + line, "cyan", **OUTPUT))
        elif line[:1] in ("+", "-", " "):
            mark = {"+": "green", "-": "red", " ": ""}[line[0]]
            code = highlight(line[1:])
            if mark:
                code.stylize(f"on {'#005f00' if mark == 'green' else '#5f0000'}")  # the same in 256 colours
            shown.append(Wrapped(Text.assemble("  ", (line[0], f"bold {mark}".strip())), code, "   "))
        else:
            shown.append(Text("  " + line, **OUTPUT))
    return shown


def files_diff(text: str, styled: bool, limit: int = 3000) -> list[Text | Wrapped]:
    """A diff of several files as `git diff --stat --patch` writes it (the stat, then each file's diff): each file
    coloured and highlighted in its own language; past `limit` lines, the first and last."""
    text = visible(text.encode(errors="surrogateescape").decode(errors="replace"))
    stat: list[str] = []
    files: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("diff --git "):
            files.append((line.rsplit(" b/", 1)[-1], []))
        (files[-1][1] if files else stat).append(line)
    shown: list[Text | Wrapped] = [Text(line, **OUTPUT) for line in stat]
    for path, lines in files:
        shown += diff_lines("\n".join(lines), path, styled)
    return clip_lines(shown, limit, lambda n: Text(f"… {n} more lines …", "dim"))


@lru_cache(maxsize=64)
def _highlighter(path: str):
    """A function that highlights one line of code in the language of `path` (no highlighting when unknown)."""
    from pygments.lexers import get_lexer_for_filename
    from pygments.util import ClassNotFound
    from rich.syntax import Syntax

    try:
        lexer = get_lexer_for_filename(path.rsplit("/", 1)[-1], stripnl=False)
    except ClassNotFound:
        return Text
    syntax = Syntax("", lexer, theme="ansi_dark")

    def highlight(code: str) -> Text:
        text = syntax.highlight(code)
        text.rstrip()
        return text

    return highlight


def markdown(text: str) -> RenderableType:
    """Markdown as rich draws it, headings on the left and links with their address (never hidden behind a
    terminal hyperlink)."""
    return _markdown_class()(text, code_theme="ansi_dark", hyperlinks=False, justify="default")


@lru_cache(maxsize=1)
def _markdown_class():
    from markdown_it import MarkdownIt
    from rich.markdown import Heading, Markdown

    from anges.util.markdown import literal_code_words

    class LeftHeading(Heading):
        LEVEL_ALIGN = dict.fromkeys(Heading.LEVEL_ALIGN, "left")

    parser = MarkdownIt().enable("strikethrough").enable("table").use(literal_code_words)  # rich's, and the plug-in

    class LeftMarkdown(Markdown):
        elements = {**Markdown.elements, "heading_open": LeftHeading}

        def __init__(self, markup: str, **options) -> None:
            super().__init__("", **options)
            self.markup, self.parsed = markup, parser.parse(markup)

    return LeftMarkdown


def stop_text(event: Event) -> str:
    """`out of steps: the run reached 80 steps ...` from the stop reason and the recorded explanation (a model
    error's own text, when there is one)."""
    reason = event.data.get("reason", "")
    detail = event.data.get("error") or first_line(stop_explanation(event))
    return f"{STOP_REASONS.get(reason, reason or 'stopped')}: {detail}"


def ended_jobs(event: Event) -> str:
    """`ended with the run: pid 7 (python3 -m http.server)`, for an event after which the run ended its jobs."""
    jobs = event.data.get("ended_jobs") or []
    shown = ", ".join(f"pid {job.get('pid')} ({one_line(str(job.get('command', '')), 80)})" for job in jobs)
    return f"ended with the run: {shown}" if shown else ""


def first_line(text: str) -> str:
    return (text or "").strip().split("\n", 1)[0]


def one_line(text: str, limit: int = 200) -> str:
    """`text` on one line (its lines joined by ⏎), cut to `limit` characters."""
    return shorten(" ⏎ ".join(part for part in text.strip().splitlines() if part.strip()), limit)
