"""The facts of a command's and of an edit's result (typed readers of `Event.data`, shared by every view), and the
text the model reads of them, made from the facts alone.

Such a text is not stored: the store rebuilds it from the facts (`anges.store.events.derived_content`), so it must never
change for an event already recorded. Events recorded before `RESULT_FORMAT` 2 (anges 0.2) are laid out as they
were then; a change to a layout below needs a new format number, written on new events, and the old layout kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from anges.util.clipping import clip, shorten

RESULT_FORMAT = 3
"""The layout of results recorded now (`result_format` in an event's data; absent = 1). 3: a command says how long it
took, one up to `WHOLE_COMMAND_CHARS` is repeated whole, a longer one names the file that holds it; a full output is
kept as long as the history names it."""
COMMAND_CHARS, COMMAND_LINES = 1200, 16
"""How much of a long command (a heredoc, say) its result repeats: head and tail (format 2: past that size)."""
WHOLE_COMMAND_CHARS = 4000
"""A command up to this size comes back whole in its result (format 3); a longer one as its head and tail, and the
file that holds it whole."""
FIRST_LINES, FIRST_LINE_CHARS = 10, 200
"""How much of a file it just created the model reads again."""
COMMAND_DEFAULTS: dict[str, Any] = {
    "exit_code": None, "stdout": "", "stderr": "", "timed_out": False, "interrupted": False, "stdout_omitted": 0,
    "stderr_omitted": 0, "pid": None, "log_path": None, "output_path": None, "yielded": False, "output_dropped": 0,
    "escalated": False}
"""Facts every command's result has that a record leaves out at these values (reading puts them back);
`ShellRun.of` reads an absent one so too."""


class Recorded(Protocol):
    """What the readers read of an event (`anges.store.events.Event`)."""

    type: str
    content: str
    data: dict[str, Any]


@dataclass(frozen=True)
class ShellRun:
    """The facts of a RUN_SHELL_CMD event, and the text the model reads of them."""

    command: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False
    interrupted: bool = False
    pid: int | None = None
    log_path: str | None = None
    blocked: str = ""
    """How the sandbox likely caused a failure ("" when it did not)."""
    printed_bytes: int | None = None
    """What the command printed, stdout and stderr together, however much of it was kept (None: not recorded)."""
    printed_lines: int | None = None
    cut: int = 0
    """Bytes of the output left out of `stdout` and `stderr`."""
    output_path: str | None = None
    """The file with the whole output, when stdout or stderr was cut."""
    yielded: bool = False
    """Still running at its yield point, it went on in the background."""
    result_format: int = 1
    """How the result text is laid out (`anges.store.results`)."""
    can_escalate: bool = True
    """When the sandbox blocked it: whether the command could ask to run outside."""
    output_dropped: int = 0
    """Bytes the full-output file lost from its start to stay within its cap."""
    listening: tuple[int, ...] = ()
    """The TCP ports it had started listening on when it went on in the background (`yielded`)."""
    command_path: str | None = None
    """The file that holds a command too long to repeat whole (format 3)."""
    temporary: bool = False
    """Its full output is in the run's scratch directory, removed when the request ends (format 3; before, always)."""

    @classmethod
    def of(cls, event: Recorded) -> ShellRun | None:
        """The facts of `event`, or None when it is not a command's result."""
        data = event.data
        if event.type not in ("action", "user_command") or not isinstance(data.get("command"), str):
            return None
        printed = [data.get(key) for key in ("stdout_bytes", "stderr_bytes", "stdout_lines", "stderr_lines")]
        counts = [value for value in printed if isinstance(value, int)]
        known = len(counts) == len(printed)
        return cls(data["command"], data.get("exit_code"), data.get("stdout") or "", data.get("stderr") or "",
                   data.get("duration") or 0.0, bool(data.get("timed_out")), bool(data.get("interrupted")),
                   data.get("pid"), data.get("log_path"), data.get("blocked") or "",
                   counts[0] + counts[1] if known else None, counts[2] + counts[3] if known else None,
                   (data.get("stdout_omitted") or 0) + (data.get("stderr_omitted") or 0), data.get("output_path"),
                   bool(data.get("yielded")), data.get("result_format") or 1,
                   data.get("can_escalate", True) is not False, data.get("output_dropped") or 0,
                   tuple(data.get("listening") or ()), data.get("command_path"), bool(data.get("temporary")))

    @property
    def state(self) -> str:
        """How the command ended: exited, timed_out, interrupted or background (started, still running)."""
        if self.timed_out or self.interrupted:
            return "timed_out" if self.timed_out else "interrupted"
        return "background" if self.exit_code is None and self.pid is not None else "exited"

    def ending(self) -> str:
        """How the command ended, in a few words for views: `exit code 0 after 1.2 s`, `killed after the timeout
        (30 s)`, `started in the background: pid 42, output in LOG`..."""
        if self.state == "timed_out":
            return f"killed after the timeout ({self.duration:.0f} s)"
        if self.state == "interrupted":
            return "killed: the run was interrupted"
        if self.state == "background":
            how = "still running at its yield point, it went on" if self.yielded else "started"
            how = f"listening on {ports_text(self.listening)}, it went on" if self.listening else how
            return f"{how} in the background: pid {self.pid}, output in {self.log_path}"
        return f"exit code {self.exit_code} after {self.duration:.1f} s"

    def output(self) -> str:
        """stdout, then stderr under a `STDERR:` label ("" if neither)."""
        gap = "" if not self.stdout or self.stdout.endswith("\n") else "\n"
        return f"{self.stdout}{gap}STDERR:\n{self.stderr}" if self.stderr else self.stdout

    def text(self) -> str:
        """The result as the model reads it (the event's content)."""
        return shell_text(self)


@dataclass(frozen=True)
class FileEdit:
    """The facts of an EDIT_FILE event (of a 0.1.x one too: its directive and diff are read from the content)."""

    directive: str
    path: str = ""
    operation: str = ""
    diff: str = ""
    error: str | None = None
    lines_added: int = 0
    lines_removed: int = 0
    created: bool = False
    size: int = 0
    """Bytes of the file after the edit."""
    result_format: int = 1

    @classmethod
    def of(cls, event: Recorded) -> FileEdit | None:
        """The facts of `event`, or None when it is not a file edit."""
        data = event.data
        if event.type != "edit_file":
            return None
        if "directive" not in data:
            lines = event.content.splitlines()
            start = next((i for i, line in enumerate(lines) if line.startswith("--- ")), len(lines))
            return cls(lines[0] if lines else "", diff="\n".join(lines[start:]))
        return cls(data["directive"], data.get("path") or "", data.get("operation") or "", data.get("diff") or "",
                   data.get("error"), data.get("lines_added") or 0, data.get("lines_removed") or 0,
                   bool(data.get("created")), data.get("size") or 0, data.get("result_format") or 1)

    def text(self) -> str:
        """The result as the model reads it (the event's content)."""
        return edit_text(self)


@dataclass(frozen=True)
class ActionResult:
    """The result of an action that is neither a command, an MCP tool nor a web API call (a plug-in's action, say): its
    name, the text the model read of it (the event's `content`) and, when it failed, why; views show it like a
    built-in's."""

    action_type: str
    text: str
    error: str = ""

    @classmethod
    def of(cls, event: Recorded) -> ActionResult | None:
        """The result `event` records, or None when it is not such an action's."""
        data = event.data
        if event.type != "action" or "command" in data or ("server" in data and "tool" in data) \
                or data.get("action_type") == "CALL_API":
            return None
        error = data.get("error")
        return cls(str(data.get("action_type") or ""), event.content or "",
                   str(error) if error and error is not True else "")


def shell_text(run: ShellRun) -> str:
    """A command's result as the model reads it."""
    if run.result_format < 2:
        return _shell_text_v1(run)
    parts = [f"COMMAND: {_command(run)}"]
    if run.state == "background" and not run.yielded:
        return f"{parts[0]}\nStarted in the background: pid {run.pid}, output in {run.log_path}"
    if run.yielded:
        why = f"LISTENING on {ports_text(run.listening)}" if run.listening else \
            f"STILL RUNNING after {run.duration:.0f} s"
        parts.append(f"{why}, so it went on in the background: pid {run.pid}, "
                     f"its output continuing in {run.log_path} (`kill {run.pid}` stops it). What it printed so far:")
    else:
        parts.append(_status(run))
    parts += [f"STDOUT:\n{run.stdout}"] if run.stdout else []
    parts += [f"STDERR:\n{run.stderr}"] if run.stderr else []
    parts += [] if run.stdout or run.stderr else ["(no output yet)" if run.yielded else "(no output)"]
    until = "available until this request ends" if run.result_format < 3 or run.temporary else ""
    if run.output_path and not run.yielded and run.output_dropped:
        parts.append(f"FULL OUTPUT: {run.printed_lines} lines ({run.printed_bytes} bytes), too much to keep whole: "
                     f"{run.output_path} holds only the end, after its first {run.output_dropped} bytes were dropped "
                     f"(its line numbers are not the output's{'; ' + until if until else ''}).")
    elif run.output_path and not run.yielded:
        parts.append(f"FULL OUTPUT: {run.printed_lines} lines ({run.printed_bytes} bytes) in {run.output_path}, "
                     f"cut parts included{' (' + until + ')' if until else ''}.")
    return "\n".join(parts + _sandbox_note(run))


def _command(run: ShellRun) -> str:
    """The command as its result repeats it: format 3 whole up to `WHOLE_COMMAND_CHARS`, past it cut like format 2's
    (any long one), naming the file that holds it whole."""
    if run.result_format >= 3 and len(run.command) <= WHOLE_COMMAND_CHARS:
        return run.command
    cut = clip(run.command, COMMAND_CHARS, COMMAND_LINES)
    if run.result_format >= 3 and run.command_path:
        return f"{cut}\n(the command is cut here: {run.command_path} holds it whole)"
    return cut


def ports_text(numbers) -> str:
    """`port 8000`, `ports 8000, 8443`."""
    return f"port{'s' if len(numbers) != 1 else ''} {', '.join(str(number) for number in numbers)}"


def _status(run: ShellRun) -> str:
    if run.result_format >= 3 and run.state != "timed_out":
        return f"KILLED after {took(run.duration)}: the run was interrupted" if run.state == "interrupted" else \
            f"EXIT CODE: {run.exit_code} after {took(run.duration)}"
    return {"timed_out": f"KILLED after the timeout ({run.duration:.0f} s)",
            "interrupted": "KILLED: the run was interrupted"}.get(run.state, f"EXIT CODE: {run.exit_code}")


def took(seconds: float) -> str:
    """How long something took, briefly: `0.04 s`, `2.50 s`, `12.3 s`, `4 min 7 s` (under a minute, always six
    characters: how long a command took never moves where a prompt is cut or folded)."""
    if round(seconds, 2) < 10:
        return f"{max(seconds, 0.01):.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def _sandbox_note(run: ShellRun) -> list[str]:
    if not run.blocked:
        return []
    if not run.can_escalate:
        return [f"SANDBOX: {run.blocked}. Commands cannot leave the sandbox in this session: do it another way "
                "within it, or say what it needs with HELP_NEEDED; do not retry it unchanged."]
    return [f"SANDBOX: {run.blocked}. If the task needs this, run the command again with `escalate` set to a one-line "
            "reason; do not retry it unchanged."]


def _shell_text_v1(run: ShellRun) -> str:
    if run.state == "background":
        return f"COMMAND: {run.command}\nStarted in the background: pid {run.pid}, output in {run.log_path}"
    parts = [f"COMMAND: {run.command}", _status(run)]
    parts += [f"STDOUT:\n{run.stdout}"] if run.stdout else []
    parts += [f"STDERR:\n{run.stderr}"] if run.stderr else []
    parts += [] if run.stdout or run.stderr else ["(no output)"]
    return "\n".join(parts + _sandbox_note(run))


def edit_text(edit: FileEdit) -> str:
    """An edit's result as the model reads it: the diff, or for a file it created, its size and first lines."""
    if edit.error is not None:
        return f"EDIT FAILED: {edit.error}\nThe file was not changed."
    if edit.result_format < 2 or not edit.created:
        return f"{edit.directive}\n{edit.diff or '(no change)'}"
    words = edit.directive.split(None, 1)
    where = words[1] if len(words) > 1 else edit.path
    added = [line[1:] for line in edit.diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    text = f"{edit.directive}\nCreated {where}: {_count(edit.lines_added, 'line')}, {_count(edit.size, 'byte')}."
    if not added:
        return text
    shown = [shorten(line, FIRST_LINE_CHARS) for line in added[:FIRST_LINES]]
    more = f"\n(and {_count(len(added) - len(shown), 'more line')})" if len(added) > len(shown) else ""
    return f"{text} {'Its first lines' if more else 'Its lines'}:\n" + "\n".join(shown) + more


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


@dataclass(frozen=True)
class APICall:
    """The facts of a CALL_API event (a web API's operation called by anges), and the text the model reads of them."""

    api: str
    operation: str
    method: str = ""
    url: str = ""
    """Where the call went (the last redirect followed), without the credential."""
    status: int | None = None
    reason: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    """The few useful headers of the response."""
    content_type: str = ""
    body: str = ""
    """The body as the model reads it (JSON indented), its head and tail when cut; "" for a binary body."""
    body_bytes: int = 0
    body_lines: int = 0
    """Of the body as the model reads it (indented JSON, decoded text)."""
    body_cut: int = 0
    """Bytes of it left out of `body`."""
    body_path: str | None = None
    """The file with the whole body (as read: up to the cap)."""
    truncated: bool = False
    """The body was longer than anges reads (`safety.background_log_cap`): the rest was not read."""
    binary: bool = False
    duration: float = 0.0
    attempts: int = 1
    error: str = ""
    """Why it got no answer (timeout, connection, interrupted, redirect_refused) or was not sent (invalid,
    unknown_api, unknown_operation, outside)."""
    message: str = ""
    problems: tuple[str, ...] = ()
    """What the schema found wrong with the call."""
    schema: str = ""
    """The operation whole, shown with a call it refused."""

    @classmethod
    def of(cls, event: Recorded) -> APICall | None:
        """The facts of `event`, or None when it is not a CALL_API result."""
        data = event.data
        if event.type != "action" or data.get("action_type") != "CALL_API":
            return None
        headers = data["headers"] if isinstance(data.get("headers"), dict) else {}
        return cls(str(data.get("api") or ""), str(data.get("operation") or ""), str(data.get("method") or ""),
                   str(data.get("url") or ""), data.get("status"), str(data.get("reason") or ""),
                   tuple((str(k), str(v)) for k, v in headers.items()), str(data.get("content_type") or ""),
                   str(data.get("body") or ""), data.get("body_bytes") or 0, data.get("body_lines") or 0,
                   data.get("body_cut") or 0, data.get("body_path"), bool(data.get("truncated")),
                   bool(data.get("binary")), data.get("duration") or 0.0, data.get("attempts") or 1,
                   str(data.get("error") or ""), str(data.get("message") or ""),
                   tuple(str(p) for p in data.get("problems") or ()), str(data.get("schema") or ""))

    @property
    def sent(self) -> bool:
        return bool(self.method and self.url) and self.error not in NOT_SENT

    @property
    def ok(self) -> bool:
        """Answered with a 2xx status."""
        return not self.error and self.status is not None and 200 <= self.status < 300

    def outcome(self) -> str:
        """How it went, in a few words: `200 OK`, `not sent: invalid`, `no answer: timed out`..."""
        if not self.sent:
            return f"not sent ({self.error})"
        if self.error == "redirect_refused":
            return f"{self.status} {self.reason}, redirect refused".strip()
        if self.error:
            return {"timeout": "no answer (timed out)", "interrupted": "interrupted"}.get(self.error,
                                                                                        f"failed ({self.error})")
        return f"{self.status} {self.reason}".strip()

    def text(self) -> str:
        """The result as the model reads it (the event's content)."""
        name = f"{self.api}.{self.operation}" if self.api else self.operation
        if not self.sent:
            lines = [f"CALL_API {name}: NOT SENT: {self.message}", *(f"- {p}" for p in self.problems)]
            return "\n".join(lines + ([f"The operation:\n{self.schema}"] if self.schema else []))
        lines = [f"CALL_API {name}: {self.method} {self.url}"]
        tries = f"; {self.attempts} attempts" if self.attempts > 1 else ""
        if self.error and self.error != "redirect_refused":
            return "\n".join(lines + [f"FAILED after {self.duration:.1f} s{tries}: {self.message}"])
        if self.error:
            lines.append(f"REFUSED: {self.message}")
        lines.append(f"STATUS: {self.status} {self.reason} ({self.duration:.2f} s{tries})".replace("  (", " ("))
        if self.headers:
            lines.append("HEADERS: " + "; ".join(f"{key}: {value}" for key, value in self.headers))
        if not self.body_bytes:
            return "\n".join(lines + ["(no body)"])
        kind = self.content_type or "no content type"
        if self.binary:
            lines.append(f"BODY: {self.body_bytes} bytes of {kind}, not text")
        else:
            lines.append(f"BODY ({kind}, {self.body_bytes} bytes):\n{self.body}")
        more = " and more the server sent, which was not read" if self.truncated else ""
        if self.body_path and self.body_cut:
            lines.append(f"FULL BODY: {self.body_lines} lines in {self.body_path}{more}, cut parts included "
                         "(available until this request ends).")
        elif self.body_path:
            lines.append(f"BODY FILE: {self.body_path}{more} (available until this request ends).")
        return "\n".join(lines)


NOT_SENT = ("invalid", "unknown_api", "unknown_operation", "outside", "unsupported")
"""The errors of a call that was never sent."""
