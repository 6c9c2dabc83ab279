"""What a running batch shows: a live panel (rich) on a terminal, plain lines otherwise; and the closing summary."""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from anges.batch.results import check_counts, outcome, pass_rate

RUNNING_ROWS = 8
FAILED_ROWS = 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean(text: object, limit: int = 120) -> str:
    """One line of untrusted text made safe for a terminal: control characters become spaces, then a cut."""
    line = _CONTROL.sub(" ", str(text or "")).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class _Running:
    started: float
    steps: int = 0
    last: str = ""
    """The last thing its run recorded (before it says what it does)."""
    doing: str = ""
    """What its run does now: "thinking", "running `make test`", ... (empty until it says)."""

    def now(self) -> str:
        return self.doing or self.last or "starting"


@dataclass
class Progress:
    """The counts of a batch while it runs; fed from engine threads, so every change holds the lock."""

    batch_id: str
    total: int
    to_run: int
    began: float = field(default_factory=time.monotonic)
    counts: Counter = field(default_factory=Counter)
    """succeeded / failed / unfinished among the tasks this run finished."""
    running: dict[str, _Running] = field(default_factory=dict)
    tokens: int = 0
    cost: float = 0.0
    model_calls: int = 0
    stopping: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def started(self, task_id: str) -> None:
        with self.lock:
            self.running[task_id] = _Running(time.monotonic())

    def event(self, task_id: str, item: dict) -> None:
        with self.lock:
            usage = item.get("usage") or {}
            self.tokens += (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
            self.model_calls += usage.get("model_calls") or 0
            self.cost += item.get("cost") or 0.0
            task = self.running.get(task_id)
            if task is not None and item.get("depth", 0) == 0:
                task.steps += bool(item.get("step"))
                task.last = item.get("message") or item.get("event_type") or ""

    def doing(self, task_id: str, text: str) -> None:
        with self.lock:
            task = self.running.get(task_id)
            if task is not None:
                task.doing = text

    def finished(self, task_id: str, row: dict) -> None:
        with self.lock:
            self.running.pop(task_id, None)
            self.counts[outcome(row)] += 1

    def done(self) -> int:
        """Tasks of this run that ended (succeeded or failed); stopped ones are unfinished, as the summary counts."""
        return self.counts["succeeded"] + self.counts["failed"]

    def unfinished(self) -> int:
        """Tasks of this run that will not finish in it: stopped, and once stopping also those never started."""
        never = self.to_run - sum(self.counts.values()) - len(self.running) if self.stopping else 0
        return self.counts["unfinished"] + never

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def eta(self) -> float | None:
        """Seconds until the last task ends, from the pace so far; None before the first task ends."""
        done = sum(self.counts.values())
        if not done or self.stopping:
            return None
        return (self.to_run - done) * self.elapsed() / done

    def headline(self) -> str:
        with self.lock:
            eta = self.eta()
            parts = [f"batch {self.batch_id}", f"{self.done()}/{self.to_run} done", f"{self.counts['failed']} failed"]
            if self.unfinished():
                parts.append(f"{self.unfinished()} unfinished")
            parts += [f"{len(self.running)} running", f"{_duration(self.elapsed())} elapsed"]
            if eta is not None:
                parts.append(f"ETA {_duration(eta)}")
            parts.append(f"{_tokens(self.tokens)} tokens")
            if self.cost:
                parts.append(f"${self.cost:.4f}")
            if self.stopping:
                parts.append("stopping")
        return " · ".join(parts)


class PlainDisplay:
    """One line per finished task, for logs and pipes."""

    def __init__(self, progress: Progress, out: TextIO):
        self.progress = progress
        self.out = out

    def __enter__(self) -> PlainDisplay:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def note(self, text: str) -> None:
        print(f"anges batch: {text}", file=self.out, flush=True)

    def finished(self, row: dict) -> None:
        progress = self.progress
        where = "unfinished" if outcome(row) == "unfinished" else f"{progress.done()}/{progress.to_run}"
        print(f"[{where}] {row['id']} {describe(row)}", file=self.out, flush=True)


class RichDisplay(PlainDisplay):
    """A live panel on a terminal: the headline and the running tasks, redrawn four times a second."""

    def __enter__(self) -> RichDisplay:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=self.out)
        self.live = Live(console=self.console, get_renderable=self._render, refresh_per_second=4, transient=True,
                         redirect_stdout=False, redirect_stderr=False)
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.__exit__(*exc)

    def note(self, text: str) -> None:
        from rich.text import Text

        self.console.print(Text(f"anges batch: {text}"))

    def finished(self, row: dict) -> None:
        from rich.text import Text

        kind = outcome(row)
        style = {"succeeded": "green", "failed": "red"}.get(kind, "yellow")
        self.console.print(Text.assemble(("✓ " if style == "green" else "✗ ", style), row["id"], " ",
                                         (describe(row), "dim")))

    def _render(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        progress = self.progress
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        with progress.lock:
            running = sorted(progress.running.items(), key=lambda item: item[1].started)
        for task_id, task in running[:RUNNING_ROWS]:
            table.add_row(Text(task_id, style="cyan"), Text(_duration(now - task.started)),
                          Text(plural(task.steps, "step")), Text(clean(task.now(), 80), style="dim"))
        more = len(running) - RUNNING_ROWS
        rows = [Text(progress.headline(), style="bold"), table]
        if more > 0:
            rows.append(Text(f"… and {more} more running", style="dim"))
        return Group(*rows)


def make_display(progress: Progress, out: TextIO = sys.stderr) -> PlainDisplay:
    """The live panel on a terminal; plain lines otherwise."""
    return RichDisplay(progress, out) if wants_rich(out) else PlainDisplay(progress, out)


def wants_rich(out: TextIO) -> bool:
    """True on a terminal: the live panel and the summary table are drawn there."""
    return out.isatty()


def describe(row: dict) -> str:
    """How a task ended, in a few words: status, steps, model calls, tokens, cost, time."""
    status = row["status"] + (f" ({clean(row['reason'], 40)})" if row.get("reason") else "")
    if row.get("error"):
        status += f": {clean(row['error'], 160)}"
    tokens = row["tokens"]["input"] + row["tokens"]["output"]
    facts = [plural(row["steps"], "step"), plural(row["model_calls"], "call"), f"{_tokens(tokens)} tokens"]
    if row.get("cost") is not None:
        facts.append(f"${row['cost']:.4f}")
    facts.append(_duration(row.get("wall_time") or 0.0))
    return f"{status} · {', '.join(facts)}" + _check_text(row)


def _check_text(row: dict) -> str:
    """` · check passed`, ` · check failed (exit code 1)`, ` · check failed (timed out)`, ` · check not run`; "" for
    a task without a check."""
    if "check" not in row:
        return ""
    detail = row.get("check_detail") or {}
    if row["check"] is None:
        return " · check not run"
    if row["check"] == "passed":
        return " · check passed"
    why = "timed out" if detail.get("timed_out") else f"exit code {detail.get('exit_code')}"
    return f" · check failed ({why})"


# --- the closing summary --------------------------------------------------------------------------------------

SUMMARY_COLUMNS = ("outcome", "tasks", "steps", "model calls", "tokens", "cost", "wall time")


def summary_table(rows: list[dict]) -> list[tuple[str, ...]]:
    """One line per outcome (succeeded, failed, unfinished) and a total: tasks, steps, calls, tokens, cost, time."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(outcome(row), []).append(row)
    lines = [_summary_line(name, groups[name]) for name in ("succeeded", "failed", "unfinished") if name in groups]
    return lines + [_summary_line("total", rows)]


def print_summary(rows: list[dict], out: TextIO) -> None:
    """The summary table, the checks' pass rate and the tasks that did not succeed (first few), with rich on a
    terminal."""
    table = summary_table(rows)
    failed = [row for row in rows if outcome(row) == "failed"]
    checks = check_counts(rows)
    if any(checks.values()):
        print(f"checks: {pass_rate(checks)}", file=out)
    if wants_rich(out):
        _print_rich(table, failed, out)
        return
    widths = [max(len(line[i]) for line in [SUMMARY_COLUMNS, *table]) for i in range(len(SUMMARY_COLUMNS))]
    for line in [SUMMARY_COLUMNS, *table]:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths))),
              file=out)
    for row in failed[:FAILED_ROWS]:
        print(f"failed: {row['id']} {describe(row)}", file=out)
    if len(failed) > FAILED_ROWS:
        print(f"… and {len(failed) - FAILED_ROWS} more failed", file=out)


def _print_rich(table: list[tuple[str, ...]], failed: list[dict], out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out)
    shown = Table(title="batch summary")
    for i, name in enumerate(SUMMARY_COLUMNS):
        shown.add_column(name, justify="left" if i == 0 else "right")
    for line in table:
        shown.add_row(*(Text(cell) for cell in line), style="bold" if line[0] == "total" else None)
    console.print(shown)
    for row in failed[:FAILED_ROWS]:
        console.print(Text.assemble(("failed ", "red"), row["id"], " ", (describe(row), "dim")))
    if len(failed) > FAILED_ROWS:
        console.print(Text(f"… and {len(failed) - FAILED_ROWS} more failed", style="dim"))


def _summary_line(name: str, rows: list[dict]) -> tuple[str, ...]:
    costs = [row["cost"] for row in rows if row.get("cost") is not None]
    return (name, str(len(rows)), str(sum(row["steps"] for row in rows)),
            str(sum(row["model_calls"] for row in rows)),
            _tokens(sum(row["tokens"]["input"] + row["tokens"]["output"] for row in rows)),
            f"${sum(costs):.4f}" if costs else "-", _duration(sum(row.get("wall_time") or 0.0 for row in rows)))


def plural(count: int, word: str) -> str:
    """`1 step`, `2 steps`."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def _tokens(count: int) -> str:
    if count < 10_000:
        return f"{count:,}"
    return f"{count / 1000:.1f}k" if count < 10_000_000 else f"{count / 1_000_000:.1f}M"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
