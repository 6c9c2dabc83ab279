"""What a person sees of a run: the live transcript on stderr, the final answer as Markdown-ish text on stdout.

Everything is drawn from `Event.type` and `Event.data`; colour and the spinner appear only on a terminal.
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import TYPE_CHECKING, TextIO

from anges.cli.terminal import Spinner, Style, cut, is_terminal, last_lines, render_markdown, seconds, wants_colour
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
    stream_status,
    walk,
)
from anges.store.export import printable_event
from anges.store.results import ActionResult
from anges.store.turns import reasoning_after, turn_reasoning
from anges.util.clipping import clip_lines, shorten
from anges.util.printable import printable, visible

if TYPE_CHECKING:
    from anges.store.events import Event

SHOWN_STATUS = {"completed": ("completed", "green"), "answered": ("answered", "green"),
                "help_needed": ("help needed", "yellow"), "interrupted": ("stopped", "yellow"),
                "running": ("running", "cyan")}
"""How each stream status (anges.store.events.status_of) reads and is coloured."""
APPROVERS = {"auto": "automatically (--approval auto)", "approval=deny": "(--approval deny)",
             "no_one": "(no one can approve here)", "always": "(approved earlier for the whole run)",
             "terminal": "by you", "interrupt": "", "limit": "(too long to be shown whole)"}
"""How `approval_decided` says who decided (the `by` fact); a channel's own name reads "by NAME"."""


class Renderer:
    """Turns one event into the lines a person reads; shared by the live view and `anges show`."""

    def __init__(self, style: Style, verbose: bool = False, width: int | None = None, cwd: str = ""):
        self.style = style
        self.verbose = verbose
        self.width = width
        self.cwd = cwd
        self.output_lines = 200 if verbose else 8
        self.diff_lines = 400 if verbose else 40
        self.reasoning_lines = 1000 if verbose else 3
        self._turns: dict[str, str] = {}
        """Per agent: the reasoning in effect (a reply's reasoning is shown with its first event only)."""

    def event(self, event: Event, depth: int = 0, agent: str = "", live: bool = False) -> list[str]:
        """The lines of one event; `live` leaves out the top-level request and answer (the user has or gets those)."""
        event, agent = printable_event(event), printable(agent)
        previous = self._turns.get(agent, "")
        self._turns[agent] = reasoning_after(event, previous)
        group = group_of(event)
        if not kind_of(event.type).in_report or (live and depth == 0 and group == "request"):
            return []
        # a child's return carries the reasoning of the step that delegated, already shown when it started
        quiet = group in ("request", "interrupted", "child_exit") or not turn_reasoning(event, previous)
        reasoning = [] if quiet else self._reasoning(event)
        body = [] if live and depth == 0 and group == "answer" else self._body(event, group, depth)
        usage = StepUsage.of(event.data) if self.verbose else None
        if usage is not None:
            body.append(self.style("  " + usage.line(), "dim"))
        if depth and body:
            pad = "  " * depth
            tag = self.style(f"[{agent}] ", "dim", "magenta") if agent else ""
            reasoning = [pad + line for line in reasoning]
            body = [pad + tag + body[0]] + [pad + line for line in body[1:]]
        lines = reasoning + body
        return [cut(line, self.width) for line in lines] if self.width else lines

    def _body(self, event: Event, group: str, depth: int) -> list[str]:
        s, data, kind = self.style, event.data, event.type
        if group == "request":
            label = "request" if kind.startswith("new") else "follow-up"
            return self._block(f"{s('▶', 'bold', 'blue')} {s(label + ':', 'bold')}", event.content, 6)
        if group == "answer":
            word, colour = SHOWN_STATUS[status_of(kind)]
            head = f"{s('✓' if colour == 'green' else '?', 'bold', colour)} {s(word, 'bold', colour)}"
            limit = 12 if depth and not self.verbose else 100_000
            body = self._clip(render_markdown(event.content, s).splitlines(), limit)
            return [head] + body + ([s("  " + ended_jobs(event), "dim")] if ended_jobs(event) else [])
        if group == "interrupted":
            ended = [s("  " + ended_jobs(event), "dim")] if ended_jobs(event) else []
            return [f"{s('■', 'bold', 'yellow')} {s(_stop_text(event), 'yellow')}"] + ended
        if group in ("shell", "tool", "edit", "approval"):
            draw = {"shell": self._command, "tool": self._tool_call, "edit": self._edit}.get(group, self._approval)
            return draw(event)
        if group == "child_start":
            verb = "starts" if kind == "new_child_agent" else "resumes"
            who = f"{s(data.get('agent_type', 'child'), 'bold')} {data.get('agent_id', '')}"
            return self._block(f"{s('⇢', 'bold', 'magenta')} {verb} {who}", event.content, 3)
        if group == "child_exit":
            child = ChildReturn.of(event)
            status, colour = SHOWN_STATUS.get(child.status, (child.exit_type, "yellow"))
            return [f"{s('⇠', 'bold', 'magenta')} {child.agent_type} {child.agent_id} returned: {s(status, colour)}"]
        result = ActionResult.of(event)
        if result is not None:
            return self._action(result, event.message)
        if data.get("error"):
            return [f"{s('✗', 'bold', 'red')} {data['error']}"]
        return [f"{s('•', 'bold')} {kind}: {event.message or _first_line(event.content)}"]

    def _action(self, result: ActionResult, message: str) -> list[str]:
        """Any other action's result (a plug-in's): its name and message, then the text the model read."""
        s = self.style
        mark = s("✗", "bold", "red") if result.error else s("•", "bold", "cyan")
        head = f"{mark} {s(result.action_type or 'action', 'bold')} {_one_line(message or result.error)}".rstrip()
        return [head] + [s("  │ ", "dim") + line for line in self._clip(result.text.splitlines(), self.output_lines)]

    def _reasoning(self, event: Event) -> list[str]:
        text = (event.reasoning or "").strip()
        if self.verbose and event.analysis.strip():
            text = f"{event.analysis.strip()}\n{text}".strip()
        if not text:
            return []
        lines = text.splitlines()
        shown = lines[: self.reasoning_lines]
        if len(lines) > len(shown):
            shown[-1] += " …"
        return [self.style(line, "dim", "italic") for line in shown]

    def _command(self, event: Event) -> list[str]:
        s, shell = self.style, ShellRun.of(event)
        lines = [f"{s('$', 'bold', 'cyan')} {s(_one_line(shell.command), 'bold')}"]
        lines += [s("  │ ", "dim") + line for line in self._clip(shell.output().splitlines(), self.output_lines)]
        if shell.state == "timed_out":
            status = s(f"killed after the timeout ({shell.duration:.0f} s)", "red")
        elif shell.state == "interrupted":
            status = s("killed: interrupted", "yellow")
        elif shell.yielded:
            why = f"listening on port {', '.join(map(str, shell.listening))}" if shell.listening else \
                f"still running after {seconds(shell.duration)}"
            status = s(f"{why}: went on in the background as pid {shell.pid}, output in {shell.log_path}", "cyan")
        elif shell.state == "background":
            status = s(f"started in the background: pid {shell.pid}, output in {shell.log_path}", "cyan")
        else:
            status = s(f"exit {shell.exit_code}", "green" if shell.exit_code == 0 else "red")
            status += s(f" · {seconds(shell.duration)}", "dim")
        if shell.cut and shell.printed_bytes is not None and not shell.yielded:
            status += s(f" · printed {shell.printed_lines:,} lines, {shell.printed_bytes:,} bytes (cut above)", "dim")
        if event.data.get("sandbox") == "none":
            status += s(" · outside the sandbox" if event.data.get("escalated") else " · no sandbox", "yellow")
        return lines + [s("  └ ", "dim") + status]

    def _tool_call(self, event: Event) -> list[str]:
        s, data = self.style, event.data
        args = json.dumps(data.get("args") or {}, ensure_ascii=False)
        lines = [f"{s('⚙', 'bold', 'cyan')} {s(data['server'] + '.' + data['tool'], 'bold')} {_one_line(args)}"]
        lines += [s("  │ ", "dim") + line for line in self._clip(event.content.splitlines(), self.output_lines)]
        if data.get("error"):
            status = s(f"not done: {data['error']}", "red")
        else:
            status = s("tool error" if data.get("is_error") else "ok", "red" if data.get("is_error") else "green")
            status += s(f" · {seconds(data.get('duration', 0))}", "dim")
        return lines + [s("  └ ", "dim") + status]

    def _edit(self, event: Event) -> list[str]:
        s, edit = self.style, FileEdit.of(event)
        if edit.error is not None:
            return [f"{s('✗', 'bold', 'red')} edit failed: {edit.directive}",
                    s("  │ ", "dim") + _first_line(edit.error)]
        counts = s(f"(+{edit.lines_added} −{edit.lines_removed})", "dim")
        path = shown_path(edit.path, self.cwd) or edit.directive
        lines = [f"{s('✎', 'bold', 'cyan')} {s('edited ' + path, 'bold')} {counts}"]
        for line in self._clip(edit.diff.splitlines(), self.diff_lines):
            colour = ("dim" if line.startswith(("---", "+++")) else "green" if line.startswith("+")
                      else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else "")
            lines.append("  " + (s(line, colour) if colour else line))
        return lines

    def _approval(self, event: Event) -> list[str]:
        s, data = self.style, event.data
        what = f"{data.get('action_type', '')} {_one_line(visible(str(data.get('subject', ''))), 120)}"
        outside = " outside the sandbox" if data.get("escalate") else ""
        if event.type == "approval_requested":  # as the prompt below shows it (safety/approval_text.py)
            outside = " (if approved, outside the sandbox)" if data.get("escalate") else ""
            return [f"{s('?', 'bold', 'yellow')} {s('needs approval:', 'yellow')} {what}{outside} — "
                    f"{data.get('reason', '')} {s('[' + str(data.get('rule', '')) + ']', 'dim')}"]
        decision, by = data.get("decision"), data.get("by", "")
        mark, colour, verb = {"allow": ("✓", "green", "approved"), "deny": ("✗", "red", "declined")}.get(
            decision, ("■", "yellow", "not decided (interrupted)"))
        who = APPROVERS.get(by, f"by {by}")
        if by == "rule":
            who = f"by rule {data.get('rule', '')} ({data.get('reason', '')})"
        always = " (and for the rest of the run)" if data.get("always") else ""
        lines = [f"{s(mark, 'bold', colour)} {s(verb, colour)}{' ' + who if who else ''}{always}: {what}{outside}"]
        if data.get("feedback"):
            lines.append(s("  │ ", "dim") + _one_line(str(data["feedback"])))
        return lines

    def _block(self, head: str, text: str, limit: int) -> list[str]:
        body = (text or "").strip().splitlines()
        if len(body) == 1:
            return [f"{head} {body[0]}"]
        return [head] + ["  " + line for line in self._clip(body, limit if not self.verbose else 1000)]

    def _clip(self, lines: list[str], limit: int) -> list[str]:
        """The first and last lines when there are more than `limit`, a dim `… N more lines …` between."""
        return clip_lines(lines, limit, lambda n: self.style(f"… {n} more line{'s' if n != 1 else ''} …", "dim"))


class WatchedModel:
    """Wraps a model so the spinner says when the model is thinking and when its actions are running."""

    def __init__(self, model, spinner: Spinner):
        self.model = model
        self.spinner = spinner
        self.name = getattr(model, "name", "")

    def __call__(self, prompt: str, temperature: float = 0.0):
        self.spinner.start("thinking")
        reply = None
        try:
            reply = self.model(prompt, temperature=temperature)
            return reply
        finally:
            self.spinner.start(printable(_activity(reply)))

    def __getattr__(self, name: str):
        return getattr(self.model, name)


class Transcript:
    """The live view of a run on stderr: each event as it is recorded, and a spinner in between."""

    def __init__(self, out: TextIO = sys.stderr, verbose: bool = False, quiet: bool = False):
        self.out = out
        self.quiet = quiet
        terminal = is_terminal(out)
        self.style = Style(wants_colour(out))
        width = shutil.get_terminal_size().columns if terminal else None
        self.renderer = Renderer(self.style, verbose=verbose, width=width)
        self.spinner = Spinner(out, self.style, enabled=terminal and not quiet)

    def watch(self, model):
        """The model, wrapped to drive the spinner when there is one."""
        return WatchedModel(model, self.spinner) if self.spinner.enabled else model

    def on_message(self, message) -> None:
        """Message handler: draw the event the agent just recorded."""
        if self.quiet:
            return
        event = message.event
        agent = f"{message.agent_type} {message.agent_id}" if message.depth else ""
        lines = self.renderer.event(event, message.depth, agent, live=True)
        self.write(lines)

    def on_delta(self, delta) -> None:
        """Delta handler: the analysis and reasoning of the reply streaming now, under the spinner (a terminal's
        only; the step's event, drawn when it is recorded, takes their place)."""
        if self.quiet or not self.spinner.enabled:
            return
        text = "\n".join(part.strip() for part in (delta.analysis, delta.reasoning) if part.strip())
        tag = f"[{delta.agent_type} {delta.agent_id}] " if delta.depth else ""
        width = (self.renderer.width or shutil.get_terminal_size().columns) - 1
        self.spinner.live(last_lines(printable(tag + text), width))

    def note(self, text: str, *styles: str) -> None:
        """A line of our own (status, hints), unless quiet."""
        if not self.quiet:
            self.write([self.style(printable(text), *styles)])

    def write(self, lines: list[str]) -> None:
        if not lines:
            return
        with self.spinner.lock:
            self.spinner.clear()
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()

    def close(self) -> None:
        self.spinner.stop()


class TextOutput:
    """The default output: the live transcript on stderr, the final answer on stdout, the stream id on stderr."""

    def __init__(self, verbose: bool = False, quiet: bool = False):
        self.out = sys.stdout
        self.verbose = verbose
        self.transcript = Transcript(sys.stderr, verbose=verbose, quiet=quiet)
        self.style = Style(wants_colour(self.out))

    def watch(self, model):
        return self.transcript.watch(model)

    def paused(self):
        """A context in which the spinner does not draw (the approval prompt asks meanwhile)."""
        return self.transcript.spinner.paused()

    def on_message(self, message) -> None:
        self.transcript.on_message(message)

    def on_delta(self, delta) -> None:
        self.transcript.on_delta(delta)

    def started(self, agent, request: str) -> None:
        self.transcript.renderer.cwd = agent.cmd_init_dir
        if self.verbose:
            stream = agent.event_stream
            model = getattr(agent.inference_func, "name", "") or "model"
            self.transcript.note(f"stream {stream.uid} · {agent.agent_type} agent · {model} · in {agent.cmd_init_dir}",
                                 "dim")

    def interrupting(self, signal_name: str) -> None:
        again = " (Ctrl-C again quits at once)" if signal_name == "SIGINT" else f" ({signal_name})"
        self.transcript.note(f"interrupting: stopping the agent and its command{again}", "bold", "yellow")

    def finished(self, outcome, exit_code: int) -> None:
        self.transcript.close()
        if outcome.answer is not None:
            self.out.write(render_markdown(printable(outcome.answer), self.style) + "\n")
            self.out.flush()
        elif self.transcript.quiet and outcome.final is not None:  # quiet, yet the user must learn why it stopped
            self.transcript.out.write(f"anges: stopped: {_stop_text(printable_event(outcome.final))}\n")
        self.transcript.note(status_line(outcome), "dim")

    def close(self) -> None:
        self.transcript.close()


def status_line(outcome) -> str:
    """`completed in 4.2s · 3 model calls · 1,234 tokens · 62% of input cached · stream ID (resume: ...)`."""
    usage = outcome.usage()
    word = SHOWN_STATUS.get(outcome.status, (outcome.status, ""))[0]
    parts = [f"{word} in {seconds(outcome.duration)}"]
    if usage["model_calls"]:
        parts.append(f"{usage['model_calls']} model call{'s' if usage['model_calls'] != 1 else ''}")
    tokens = usage["input_tokens"] + usage["output_tokens"]
    if tokens:
        parts.append(f"{tokens:,} tokens" + (" (estimated)" if usage["estimated"] else ""))
    if usage["cached_tokens"]:
        parts.append(f"{usage['cache_hit_ratio']:.0%} of input cached")
    if "cost" in usage:
        parts.append(f"${usage['cost']:.4f}")
    if outcome.final is not None and ended_jobs(outcome.final):
        parts.append(ended_jobs(outcome.final))
    uid = outcome.stream.uid
    hint = "reply with" if outcome.status == "help_needed" else "resume"
    parts.append(f"stream {uid} ({hint}: anges --resume {uid} -q ...)")
    return " · ".join(parts)


def ended_jobs(event: Event) -> str:
    """`ended with the run: pid 7 (python3 -m http.server)`, for an event after which the run ended its jobs."""
    jobs = event.data.get("ended_jobs") or []
    shown = ", ".join(f"pid {job.get('pid')} ({_one_line(str(job.get('command', '')), 80)})" for job in jobs)
    return f"ended with the run: {shown}" if shown else ""


def print_stream(stream, store, out: TextIO, verbose: bool = False) -> None:
    """The whole transcript of a stored stream, children in place, as the user saw it live."""
    style = Style(wants_colour(out))
    renderer = Renderer(style, verbose=verbose, cwd=stream.agent_settings.get("cmd_init_dir", ""))
    title, agent_type = printable(str(stream.title or stream.uid)), printable(stream.agent_type or "default")
    out.write(style(title, "bold") + style(f"  ({stream.uid}, {agent_type})", "dim") + "\n")
    for depth, owner, event in walk(stream, store.load):
        lines = renderer.event(event, depth, f"{owner.agent_type} {owner.uid}" if depth else "")
        if lines:
            out.write("\n".join(lines) + "\n")
    if stream_status(stream.events_list) == "running":
        out.write(_still_running(stream.uid, store, style) + "\n")


def _still_running(uid: str, store, style: Style) -> str:
    """The last line of a stream whose last run has not recorded its end: still at work, or dead."""
    owner = store.owner(uid)
    if owner is not None:
        return style(printable(f"… running (process {owner['pid']} on {owner['host']})"), "cyan")
    return style(f"■ stopped: the run's process ended without finishing; continue with anges --resume {uid} -q ...",
                 "yellow")


def format_list(infos, style: Style, limit: int = 0) -> list[str]:
    """Streams as a table, most recent first, each child indented under its parent; `limit` top-level rows."""
    from datetime import datetime

    now = datetime.now()
    known = {info.uid for info in infos}
    children: dict[str, list] = {}
    roots = []
    for info in infos:
        parent = info.parent_ids[-1] if info.parent_ids else None
        if parent in known:
            children.setdefault(parent, []).append(info)
        else:
            roots.append(info)
    rows: list[tuple[str, object]] = []

    def add(info, prefix: str) -> None:
        rows.append((prefix, info))
        for child in sorted(children.get(info.uid, []), key=lambda i: i.created_at):
            add(child, "  " + prefix.replace("└ ", "  ") + "└ ")

    for info in roots[:limit] if limit > 0 else roots:
        add(info, "")
    width = max([len(prefix) + len(info.uid) for prefix, info in rows] + [2])
    statuses = [LISTED_STOPS.get(info.reason, info.status) for _, info in rows]
    agents = [printable(info.agent_type or "default") for _, info in rows]
    status_width, agent_width = max([11, *map(len, statuses)]), max([len("AGENT"), *map(len, agents)])
    lines = [style(f"{'ID':<{width}}  {'STATUS':<{status_width}}  {'AGE':>4}  {'AGENT':<{agent_width}}  TITLE", "bold")]
    for (prefix, info), status, agent in zip(rows, statuses, agents):
        colour = SHOWN_STATUS.get(info.status, ("", ""))[1]
        lines.append(f"{style(prefix, 'dim')}{info.uid:<{width - len(prefix)}}  "
                     f"{style(f'{status:<{status_width}}', colour)}  {_age(now - info.updated_at):>4}  "
                     f"{agent:<{agent_width}}  {printable(_one_line(info.title or '', 80))}")
    return lines


def _age(delta) -> str:
    total = max(int(delta.total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total >= size:
            return f"{total // size}{unit}"
    return f"{total}s"


# --- small helpers --------------------------------------------------------------------------------------------


def _activity(reply) -> str:
    """What runs after a model reply: the first command it asks for, or generic work."""
    try:
        actions = json.loads(reply).get("actions") or []
        command = next(a["command"] for a in actions if a.get("action_type", "").upper() == "RUN_SHELL_CMD")
    except (TypeError, ValueError, AttributeError, KeyError, StopIteration):
        return "working"
    return f"running {_one_line(str(command))}"


LISTED_STOPS = {"timeout": "timed out", "event_limit": "out of steps", "model_call_limit": "out of calls",
                "budget": "over budget", "model_error": "model failed", "model_setup": "model failed",
                "invalid_replies": "bad replies", "reply_cut_off": "cut off", "repetition": "repeating"}
"""How `anges list` shows an interrupted stream that stopped for a reason other than an interrupt."""
STOP_REASONS = {"interrupt": "interrupted", "timeout": "out of time", "event_limit": "out of steps",
                "model_call_limit": "out of model calls", "repetition": "stuck repeating itself",
                "invalid_replies": "the model's replies were invalid", "model_error": "the model failed",
                "reply_cut_off": "the model's replies were cut off at max_output_tokens",
                "model_setup": "the model is not usable", "abandoned": "its process ended without finishing",
                "budget": "over budget"}


def _stop_text(event: Event) -> str:
    """`out of steps: the run reached 80 steps ...` from the stop reason and the recorded explanation (a model
    error's own text, when there is one)."""
    reason = event.data.get("reason", "")
    detail = event.data.get("error") or _first_line(stop_explanation(event))
    return f"{STOP_REASONS.get(reason, reason or 'stopped')}: {detail}"


def _first_line(text: str) -> str:
    return (text or "").strip().split("\n", 1)[0]


def _one_line(text: str, limit: int = 200) -> str:
    return shorten(" ⏎ ".join(part for part in text.strip().splitlines() if part.strip()), limit)


