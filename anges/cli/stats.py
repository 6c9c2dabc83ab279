"""`anges stats [ID ...] [--since DATE] [--batch ID] [--json]`: per run and in total, from the store alone."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from anges.exceptions import UsageError
from anges.util.clipping import shorten
from anges.util.printable import printable, printable_json

COLUMNS = ("run", "steps", "calls", "tokens in/out (cached)", "cost", "wall", "model", "commands", "approval wait",
           "ended")
MISSING = {
    "usage": "{n} run(s) recorded no token usage (streams of anges 0.1.x): their tokens, calls and cost are not "
             "counted",
    "calls": "{n} run(s) recorded steps but no model call with them: their tokens, calls and cost are not counted",
    "model_time": "{n} model call(s) recorded no time in the model: the model time leaves them out",
    "command_time": "{n} command(s) recorded no duration: the command time leaves them out",
    "approval_answer": "{n} approval request(s) were never answered (the run ended while it waited)",
}


def add_stats_parser(commands) -> None:
    """The `stats` subcommand's arguments."""
    stats = commands.add_parser("stats", help="steps, model calls, tokens, cost and where the time went, per run")
    stats.add_argument("ids", metavar="ID", nargs="*", help="the runs (stream ids; default: every top-level run)")
    stats.add_argument("--since", metavar="DATE", type=_date, help="only runs started on or after DATE (2026-11-20, "
                                                                   "or 2026-11-20T14:00)")
    stats.add_argument("--batch", metavar="ID", help="only the runs of batch ID, with its checks' pass rate")
    stats.add_argument("--json", action="store_true", help="as one JSON object")


def show_stats(args: argparse.Namespace) -> int:
    """anges stats"""
    from anges.store.event_store import EventStore
    from anges.telemetry.stats import Stats, run_stats

    store = EventStore()
    checks = _checks(args.batch) if args.batch else None
    runs = [(Run.of(stream), run_stats(stream, store.load)) for stream in _chosen(store, args)]
    total = Stats()
    for _, figures in runs:
        total.add(figures)
    if args.json:
        print(printable_json(json.dumps(_as_json(runs, total, checks), indent=2, ensure_ascii=False)))
    elif not runs:
        where = f" of batch {args.batch}" if args.batch else ""
        print(f"no runs{where}{' since ' + args.since.isoformat() if args.since else ''} in {store.root}",
              file=sys.stderr)
    else:
        print(printable("\n".join(_report(runs, total, checks))))
    return 0


@dataclass(frozen=True)
class Run:
    """What the report shows of a run's stream besides its figures."""

    uid: str
    title: str
    created_at: datetime
    task: str
    """Its batch task's id ("" outside a batch)."""

    @classmethod
    def of(cls, stream) -> Run:
        return cls(stream.uid, str(stream.title), stream.created_at, str(stream.agent_settings.get("batch_task") or ""))


def _chosen(store, args: argparse.Namespace) -> Iterator:
    """The streams asked for, one at a time: the ids given, or every top-level run (of the batch), oldest first;
    started since DATE."""
    if args.ids:
        streams = (store.load(uid) for uid in args.ids)
    else:
        def wanted(info) -> bool:  # listed without loading a stream
            return not info.parent_ids and (not args.batch or info.batch_id == args.batch) and (
                not args.since or info.created_at >= args.since)

        streams = (store.load(info.uid) for info in sorted(filter(wanted, store.list()), key=lambda i: i.created_at))
    for stream in streams:
        if args.batch and stream.agent_settings.get("batch_id") != args.batch:
            continue
        if not args.since or stream.created_at >= args.since:
            yield stream


def _checks(batch_id: str) -> dict[str, dict | None]:
    """How the check of each task of the batch that has one went (None: it did not run), from the batch's log."""
    from anges.batch.state import BatchState

    state = BatchState(batch_id)
    if not state.log_path.exists():
        raise UsageError(f"no batch {batch_id!r} in {state.root.parent}")
    return {task: record.check for task, record in state.records().items() if record.has_check}


def _check_counts(runs: list, checks: dict) -> dict[str, int]:
    """passed, failed and not_run among the runs whose task has a check."""
    counts = {"passed": 0, "failed": 0, "not_run": 0}
    for run, _ in runs:
        if run.task in checks:
            counts[checks[run.task]["status"] if checks[run.task] else "not_run"] += 1
    return counts


def _report(runs: list, total, checks: dict | None) -> list[str]:
    rows = [COLUMNS] + [_row(f"{run.uid} {shorten(run.task or run.title, 30)}", figures, _check_of(run, checks))
                        for run, figures in runs]
    rows.append(_row(f"total ({total.runs} run{'s' if total.runs != 1 else ''})", total))
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) if i in (0, len(COLUMNS) - 1) else cell.rjust(width)
                       for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]
    if total.ends:
        lines.append("ended: " + ", ".join(f"{name} {count}" for name, count in total.ends.most_common()))
    if total.api_calls:
        lines.append(f"web API calls: {total.api_calls} ({_seconds(total.api_time)})")
    if checks:
        from anges.batch.results import pass_rate

        lines.append("checks: " + pass_rate(_check_counts(runs, checks)))
    if total.slowest:
        lines.append("slowest steps:")
        lines += [f"  {_seconds(step.seconds):>7}  {step.stream_id} #{step.number}  {step.what}{_parts(step)}"
                  for step in total.slowest]
    lines += [f"not recorded: {MISSING[name].format(n=count)}" for name, count in sorted(total.missing.items())
              if count]
    if total.estimated:
        lines.append("some token counts are estimates: the model did not report its usage")
    return lines


def _row(label: str, figures, check: str = "") -> tuple[str, ...]:
    cached = f" ({figures.cached_share:.0%})" if figures.cached_share else ""
    ended = ", ".join(f"{name}" + (f" x{count}" if count > 1 else "") for name, count in figures.ends.items())
    ended += f"; check {check}" if check else ""
    return (label, str(figures.steps), str(figures.model_calls),
            f"{_tokens(figures.input_tokens)}/{_tokens(figures.output_tokens)}{cached}",
            "-" if figures.cost is None else f"${figures.cost:.4f}", _seconds(figures.wall),
            _seconds(figures.model_time), _seconds(figures.command_time), _seconds(figures.approval_wait),
            shorten(ended, 60) if figures.runs == 1 else "")


def _check_of(run: Run, checks: dict | None) -> str:
    """passed, failed (timed out), not run; "" when the run's task has no check."""
    if not checks or run.task not in checks:
        return ""
    check = checks[run.task]
    if check is None:
        return "not run"
    return check["status"] + (" (timed out)" if check.get("timed_out") else "")


def _parts(step) -> str:
    waited = "API call" if step.what.startswith("CALL_API") else "command"
    parts = [f"model {_seconds(step.model)}" if step.model is not None else "",
             f"{waited} {_seconds(step.command)}" if step.command is not None else ""]
    shown = ", ".join(part for part in parts if part)
    return f"  ({shown})" if shown else ""


def _as_json(runs: list, total, checks: dict | None) -> dict:
    data = {"runs": [], "total": total.to_dict()}
    for run, figures in runs:
        row = {"id": run.uid, "title": run.title, "created_at": run.created_at.isoformat(), **figures.to_dict()}
        if run.task:
            row["batch_task"] = run.task
        if checks is not None and run.task in checks:
            row["check"] = checks[run.task]
        data["runs"].append(row)
    if checks:
        data["checks"] = _check_counts(runs, checks)
    return data


def _date(text: str) -> datetime:
    """A date or time as the store keeps them: local, without a time zone (one given is converted)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (use 2026-11-20 or 2026-11-20T14:00)") from None
    return value.astimezone().replace(tzinfo=None) if value.tzinfo else value


def _seconds(value: float) -> str:
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _tokens(count: int) -> str:
    return f"{count:,}" if count < 10_000 else f"{count / 1000:.1f}k" if count < 10_000_000 else f"{count / 1e6:.1f}M"
