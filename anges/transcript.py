"""What a person sees of a run: the live transcript on stderr, the final answer as Markdown-ish text on stdout.

Everything is drawn from `Event.type` and `Event.data`; colour and the spinner appear only on a terminal.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from anges.events import REQUEST_EVENT_TYPES as REQUEST_TYPES
from anges.events import walk
from anges.export import command_output, edit_diff
from anges.printable import printable, printable_event
from anges.store import status_of, stream_status

if TYPE_CHECKING:
    from anges.events import Event

ANSWER_TYPES = ("task_completion", "agent_text_response", "agent_requested_help")
SHOWN_STATUS = {"completed": ("completed", "green"), "answered": ("answered", "green"),
                "help_needed": ("help needed", "yellow"), "interrupted": ("stopped", "yellow"),
                "running": ("running", "cyan")}
"""How each stream status (anges.store.status_of) reads and is coloured."""
APPROVERS = {"auto": "automatically (--approval auto)", "approval=deny": "(--approval deny)",
             "no_one": "(no one can approve here)", "always": "(approved earlier for the whole run)",
             "terminal": "by you", "interrupt": ""}
"""How `approval_decided` says who decided (the `by` fact); a channel's own name reads "by NAME"."""
SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_CODES = {"bold": "1", "dim": "2", "italic": "3", "underline": "4", "red": "31", "green": "32", "yellow": "33",
          "blue": "34", "magenta": "35", "cyan": "36"}


def is_terminal(stream: TextIO) -> bool:
    """True when `stream` is an interactive terminal that understands escape sequences."""
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def wants_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return is_terminal(stream) and not os.environ.get("NO_COLOR")


class Style:
    """ANSI styling that does nothing when disabled."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, *names: str) -> str:
        if not self.enabled or not names or not text:
            return text
        return f"\x1b[{';'.join(_CODES[n] for n in names)}m{text}\x1b[0m"


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

    def event(self, event: Event, depth: int = 0, agent: str = "", live: bool = False) -> list[str]:
        """The lines of one event; `live` leaves out the top-level request and answer (the user has or gets those)."""
        event, agent = printable_event(event), printable(agent)
        kind = event.type
        if kind in ("child_agent_running", "summary_failed") or (live and depth == 0 and kind in REQUEST_TYPES):
            return []
        # a child's return carries the reasoning of the step that delegated, already shown when it started
        quiet = kind in REQUEST_TYPES or kind == "task_interrupted" or kind.startswith("child_agent_")
        reasoning = [] if quiet else self._reasoning(event)
        body = [] if live and depth == 0 and kind in ANSWER_TYPES else self._body(event, depth)
        if self.verbose and event.data.get("usage"):
            body.append(self.style(_usage_line(event.data), "dim"))
        if depth and body:
            pad = "  " * depth
            tag = self.style(f"[{agent}] ", "dim", "magenta") if agent else ""
            reasoning = [pad + line for line in reasoning]
            body = [pad + tag + body[0]] + [pad + line for line in body[1:]]
        lines = reasoning + body
        return [_cut(line, self.width) for line in lines] if self.width else lines

    def _body(self, event: Event, depth: int) -> list[str]:
        s, data, kind = self.style, event.data, event.type
        if kind in REQUEST_TYPES:
            label = "request" if kind.startswith("new") else "follow-up"
            return self._block(f"{s('▶', 'bold', 'blue')} {s(label + ':', 'bold')}", event.content, 6)
        if kind in ANSWER_TYPES:
            word, colour = SHOWN_STATUS[status_of(kind)]
            head = f"{s('✓' if colour == 'green' else '?', 'bold', colour)} {s(word, 'bold', colour)}"
            limit = 12 if depth and not self.verbose else 100_000
            return [head] + _clip_lines(render_markdown(event.content, s).splitlines(), limit, s)
        if kind == "task_interrupted":
            return [f"{s('■', 'bold', 'yellow')} {s(_stop_text(event), 'yellow')}"]
        if kind == "action" and "command" in data:
            return self._command(event)
        if kind == "action" and "server" in data and "tool" in data:
            return self._tool_call(event)
        if kind == "edit_file":
            return self._edit(event)
        if kind in ("approval_requested", "approval_decided"):
            return self._approval(event)
        if kind in ("new_child_agent", "resume_child_agent"):
            verb = "starts" if kind == "new_child_agent" else "resumes"
            who = f"{s(data.get('agent_type', 'child'), 'bold')} {data.get('agent_id', '')}"
            head = f"{s('⇢', 'bold', 'magenta')} {verb} {who}"
            return self._block(head, event.content, 3)
        if kind.startswith("child_agent_"):
            exit_type = data.get("exit_type", kind[len("child_agent_"):])
            status, colour = SHOWN_STATUS.get(status_of(exit_type) or "", (exit_type, "yellow"))
            who = f"{data.get('agent_type', 'child')} {data.get('agent_id', '')}"
            return [f"{s('⇠', 'bold', 'magenta')} {who} returned: {s(status, colour)}"]
        if data.get("error"):
            return [f"{s('✗', 'bold', 'red')} {data['error']}"]
        return [f"{s('•', 'bold')} {kind}: {event.message or _first_line(event.content)}"]

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
        s, data = self.style, event.data
        lines = [f"{s('$', 'bold', 'cyan')} {s(_one_line(data['command']), 'bold')}"]
        output = command_output(event).splitlines()
        lines += [s("  │ ", "dim") + line for line in _clip_lines(output, self.output_lines, s)]
        if data.get("timed_out"):
            status = s(f"killed after the timeout ({data.get('duration', 0):.0f} s)", "red")
        elif data.get("interrupted"):
            status = s("killed: interrupted", "yellow")
        elif data.get("exit_code") is None and data.get("pid"):
            status = s(f"started in the background: pid {data['pid']}, output in {data.get('log_path')}", "cyan")
        else:
            code = data.get("exit_code")
            status = s(f"exit {code}", "green" if code == 0 else "red")
            status += s(f" · {_seconds(data.get('duration', 0))}", "dim")
        if data.get("sandbox") == "none":
            status += s(" · outside the sandbox" if data.get("escalated") else " · no sandbox", "yellow")
        return lines + [s("  └ ", "dim") + status]

    def _tool_call(self, event: Event) -> list[str]:
        s, data = self.style, event.data
        args = json.dumps(data.get("args") or {}, ensure_ascii=False)
        lines = [f"{s('⚙', 'bold', 'cyan')} {s(data['server'] + '.' + data['tool'], 'bold')} {_one_line(args)}"]
        lines += [s("  │ ", "dim") + line for line in _clip_lines(event.content.splitlines(), self.output_lines, s)]
        if data.get("error"):
            status = s(f"not done: {data['error']}", "red")
        else:
            status = s("tool error" if data.get("is_error") else "ok", "red" if data.get("is_error") else "green")
            status += s(f" · {_seconds(data.get('duration', 0))}", "dim")
        return lines + [s("  └ ", "dim") + status]

    def _edit(self, event: Event) -> list[str]:
        s, data = self.style, event.data
        if data.get("error"):
            return [f"{s('✗', 'bold', 'red')} edit failed: {data.get('directive', '')}",
                    s("  │ ", "dim") + _first_line(data["error"])]
        counts = s(f"(+{data.get('lines_added', 0)} −{data.get('lines_removed', 0)})", "dim")
        path = _relative(str(data.get("path", "")), self.cwd)
        lines = [f"{s('✎', 'bold', 'cyan')} {s('edited ' + path, 'bold')} {counts}"]
        for line in _clip_lines(edit_diff(event).splitlines(), self.diff_lines, s):
            colour = ("dim" if line.startswith(("---", "+++")) else "green" if line.startswith("+")
                      else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else "")
            lines.append("  " + (s(line, colour) if colour else line))
        return lines

    def _approval(self, event: Event) -> list[str]:
        s, data = self.style, event.data
        what = f"{data.get('action_type', '')} {_one_line(str(data.get('subject', '')), 120)}"
        outside = " outside the sandbox" if data.get("escalate") else ""
        if event.type == "approval_requested":
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
        return [head] + ["  " + line for line in _clip_lines(body, limit if not self.verbose else 1000, self.style)]


class Spinner:
    """A one-line activity indicator with elapsed time, redrawn by a daemon thread; only on a terminal."""

    def __init__(self, out: TextIO, style: Style, enabled: bool):
        self.out = out
        self.style = style
        self.enabled = enabled
        self.lock = threading.RLock()
        self._label = ""
        self._since = time.monotonic()
        self._shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, label: str) -> None:
        """Show `label` from now on, with the time since this call (child agents may call this concurrently)."""
        with self.lock:
            self._label, self._since = label, time.monotonic()
            if self.enabled and self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._spin, name="anges-spinner", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Stop and erase the spinner."""
        with self.lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join()
        self.clear()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop and erase the spinner while something else uses the terminal (a question); it resumes after."""
        with self.lock:
            label, since, running = self._label, self._since, self._thread is not None
        self.stop()
        try:
            yield
        finally:
            if running:
                self.start(label)
                self._since = since

    def clear(self) -> None:
        """Erase the spinner line so other output can take its place (it comes back on the next tick)."""
        with self.lock:
            if self._shown:
                self.out.write("\r\x1b[K")
                self.out.flush()
                self._shown = False

    def _spin(self) -> None:
        frame = 0
        while not self._stop.wait(0.1):
            with self.lock:
                if not self._label:
                    continue
                elapsed = time.monotonic() - self._since
                glyph = SPINNER_FRAMES[frame % len(SPINNER_FRAMES)]
                text = _cut(f"{glyph} {self._label} {_seconds(elapsed)}", shutil.get_terminal_size().columns - 1)
                self.out.write("\r\x1b[K" + self.style(text, "cyan"))
                self.out.flush()
                self._shown = True
            frame += 1


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

    def started(self, agent, request: str) -> None:
        self.transcript.renderer.cwd = agent.cmd_init_dir
        if self.verbose:
            stream = agent.event_stream
            model = getattr(agent.inference_func, "name", "") or "model"
            self.transcript.note(f"stream {stream.uid} · {agent.agent_type} agent · {model} · in {agent.cmd_init_dir}",
                                 "dim")

    def interrupting(self) -> None:
        self.transcript.note("interrupting: stopping the agent and its command (Ctrl-C again quits at once)",
                             "bold", "yellow")

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
    """`completed in 4.2s · 3 model calls · 1,234 tokens · stream ID (resume: anges --resume ID)`."""
    usage = outcome.usage()
    word = SHOWN_STATUS.get(outcome.status, (outcome.status, ""))[0]
    parts = [f"{word} in {_seconds(outcome.duration)}"]
    if usage["model_calls"]:
        parts.append(f"{usage['model_calls']} model call{'s' if usage['model_calls'] != 1 else ''}")
    tokens = usage["input_tokens"] + usage["output_tokens"]
    if tokens:
        parts.append(f"{tokens:,} tokens" + (" (estimated)" if usage["estimated"] else ""))
    if "cost" in usage:
        parts.append(f"${usage['cost']:.4f}")
    uid = outcome.stream.uid
    hint = "reply with" if outcome.status == "help_needed" else "resume"
    parts.append(f"stream {uid} ({hint}: anges --resume {uid} -q ...)")
    return " · ".join(parts)


def print_stream(stream, store, out: TextIO, verbose: bool = False) -> None:
    """The whole transcript of a stored stream, children in place, as the user saw it live."""
    style = Style(wants_colour(out))
    renderer = Renderer(style, verbose=verbose, cwd=stream.agent_settings.get("cmd_init_dir", ""))
    title, agent_type = printable(str(stream.title or stream.uid)), printable(stream.agent_type or "default")
    out.write(style(title, "bold") + style(f"  ({stream.uid}, {agent_type})", "dim") + "\n")
    for depth, owner, event in walk(stream, store=store):
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
    lines = [style(f"{'ID':<{width}}  {'STATUS':<11}  {'AGE':>4}  {'AGENT':<13}  TITLE", "bold")]
    for prefix, info in rows:
        status = f"{info.status:<11}"
        lines.append(f"{style(prefix, 'dim')}{info.uid:<{width - len(prefix)}}  "
                     f"{style(status, SHOWN_STATUS.get(info.status, ('', ''))[1])}  {_age(now - info.updated_at):>4}  "
                     f"{printable(info.agent_type or 'default'):<13}  {printable(_one_line(info.title or '', 80))}")
    return lines


def _age(delta) -> str:
    seconds = max(int(delta.total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


# --- Markdown for a terminal ---------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^(\s*)(\d+[.)])\s+(.*)$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_INLINE = re.compile(  # `code`, **strong**, __strong__, *emphasis*, [link](url)
    r"`([^`]+)`|\*\*(.+?)\*\*|__(.+?)__|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?!\w)|\[([^\]]+)\]\(([^)\s]+)\)")


def render_markdown(text: str, style: Style) -> str:
    """Markdown made readable on a terminal (headings, lists, code, emphasis); unchanged without colour."""
    if not style.enabled:
        return text.rstrip("\n")
    out: list[str] = []
    fence = ""
    for line in text.rstrip("\n").splitlines():
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
            else:
                out.append("    " + style(line, "cyan"))
            continue
        if match:
            fence = match.group(1)
            continue
        if heading := _HEADING.match(line):
            level_one = ("underline",) if len(heading.group(1)) == 1 else ()
            out.append(style(_inline(heading.group(2), style), "bold", *level_one))
        elif bullet := _BULLET.match(line):
            out.append(f"{bullet.group(1)}  • {_inline(bullet.group(2), style)}")
        elif numbered := _NUMBERED.match(line):
            out.append(f"{numbered.group(1)}  {numbered.group(2)} {_inline(numbered.group(3), style)}")
        elif line.startswith(">"):
            out.append(style("  │ ", "dim") + style(_inline(line[1:].strip(), style), "italic"))
        elif re.fullmatch(r"\s*([-*_])(\s*\1){2,}\s*", line):
            out.append(style("─" * 40, "dim"))
        else:
            out.append(_inline(line, style))
    return "\n".join(out)


def _inline(text: str, style: Style) -> str:
    def replace(match: re.Match) -> str:
        code, strong, strong2, emphasis, link, url = match.groups()
        if code is not None:
            return style(code, "cyan")
        if strong is not None or strong2 is not None:
            return style(strong or strong2, "bold")
        if emphasis is not None:
            return style(emphasis, "italic")
        return f"{style(link, 'underline')} {style(f'({url})', 'dim')}"

    return _INLINE.sub(replace, text)


# --- small helpers --------------------------------------------------------------------------------------------


def _activity(reply) -> str:
    """What runs after a model reply: the first command it asks for, or generic work."""
    try:
        actions = json.loads(reply).get("actions") or []
        command = next(a["command"] for a in actions if a.get("action_type", "").upper() == "RUN_SHELL_CMD")
    except (TypeError, ValueError, AttributeError, KeyError, StopIteration):
        return "working"
    return f"running {_one_line(str(command))}"


STOP_REASONS = {"interrupt": "interrupted", "timeout": "out of time", "event_limit": "out of steps",
                "model_call_limit": "out of model calls", "repetition": "stuck repeating itself",
                "invalid_replies": "the model's replies were invalid", "model_error": "the model failed",
                "model_setup": "the model is not usable", "abandoned": "its process ended without finishing",
                "budget": "over budget"}


def _stop_text(event: Event) -> str:
    """`out of steps: The run stopped: ...` from the stop reason and the recorded explanation."""
    reason = event.data.get("reason", "")
    return f"{STOP_REASONS.get(reason, reason or 'stopped')}: {_first_line(event.content)}"


def _relative(path: str, base: str) -> str:
    if base and path.startswith(base.rstrip("/") + "/"):
        return path[len(base.rstrip("/")) + 1:]
    return path


def _usage_line(data: dict) -> str:
    usage = data["usage"]
    parts = [f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens"]
    if usage.get("estimated"):
        parts[0] += " (estimated)"
    if data.get("model"):
        parts.append(str(data["model"]))
    if data.get("cost") is not None:
        parts.append(f"${data['cost']:.4f}")
    return "  " + " · ".join(parts)


def _clip_lines(lines: list[str], limit: int, style: Style) -> list[str]:
    """The first and last lines when there are more than `limit` (+1, since the mark takes a line anyway)."""
    if len(lines) <= limit + 1:
        return lines
    head = max(limit // 2, 1)
    tail = max(limit - head, 1)
    cut = len(lines) - head - tail
    return lines[:head] + [style(f"… {cut} more line{'s' if cut != 1 else ''} …", "dim")] + lines[-tail:]


def _first_line(text: str) -> str:
    return (text or "").strip().split("\n", 1)[0]


def _one_line(text: str, limit: int = 200) -> str:
    line = " ⏎ ".join(part for part in text.strip().splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _seconds(value: float) -> str:
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    return f"{minutes}m{seconds:02d}s"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _cut(line: str, width: int) -> str:
    """Cut a (possibly styled) line to `width` visible characters."""
    if width <= 0 or len(_ANSI.sub("", line)) <= width:
        return line
    visible, out, pos = 0, [], 0
    for match in _ANSI.finditer(line):
        chunk = line[pos:match.start()]
        room = width - 1 - visible
        out.append(chunk[:room])
        visible += min(len(chunk), room)
        out.append(match.group())
        pos = match.end()
        if visible >= width - 1:
            break
    else:
        chunk = line[pos:]
        out.append(chunk[: width - 1 - visible])
    return "".join(out) + "…" + ("\x1b[0m" if "\x1b[" in line else "")
