"""Earlier runs: the list of streams (`anges list`, `/list`, the `/resume` picker) and a stored stream's
transcript (`anges show`, a resumed session's earlier steps)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from rich.text import Text

from anges.cli.render import OUTPUT, SHOWN_STATUS, Renderer, one_line
from anges.cli.terminal import Display
from anges.store.events import stream_status, walk
from anges.util.printable import printable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import RenderableType

    from anges.store.records import StreamInfo

LISTED_STOPS = {"timeout": "timed out", "event_limit": "out of steps", "model_call_limit": "out of calls",
                "budget": "over budget", "model_error": "model failed", "model_setup": "model failed",
                "invalid_replies": "bad replies", "reply_cut_off": "cut off", "repetition": "repeating",
                "context_window": "over the window"}
"""How `anges list` shows an interrupted stream that stopped for a reason other than an interrupt."""


def print_stream(stream, store, out: TextIO, verbose: bool = False) -> None:
    """Write the transcript of a stored stream to `out` (styled when it is a terminal)."""
    display = Display.of(out)
    display.write(stream_transcript(stream, store, display.styled, verbose))


def stream_transcript(stream, store, styled: bool, verbose: bool = False) -> list[RenderableType]:
    """The whole transcript of a stored stream, children in place, as the user saw it live."""
    renderer = Renderer(styled, verbose=verbose, cwd=stream.agent_settings.get("cmd_init_dir", ""))
    title, agent_type = printable(str(stream.title or stream.uid)), printable(stream.agent_type or "default")
    shown: list[RenderableType] = [Text.assemble((title, "bold"), (f"  ({stream.uid}, {agent_type})", "dim"))]
    for depth, owner, event in walk(stream, store.load):
        shown += renderer.event(event, depth, f"{owner.agent_type} {owner.uid}" if depth else "")
    if stream_status(stream.events_list) == "running":
        shown.append(_still_running(stream.uid, store))
    return shown


def _still_running(uid: str, store) -> Text:
    """The last line of a stream whose last run has not recorded its end: still at work, or dead."""
    owner = store.owner(uid)
    if owner is not None:
        return Text(printable(f"… running (process {owner['pid']} on {owner['host']})"), "cyan")
    return Text(f"■ stopped: the run's process ended without finishing; continue with anges --resume {uid} -q ...",
                "yellow")


def format_list(infos: Sequence[StreamInfo], limit: int = 0) -> list[Text]:
    """Streams as a table, most recent first, each child indented under its parent; `limit` top-level rows."""
    now = datetime.now()
    rows = _tree(infos, limit)
    width = max([len(prefix) + len(info.uid) for prefix, info in rows] + [2])
    statuses = [LISTED_STOPS.get(info.reason, info.status) for _, info in rows]
    agents = [printable(info.agent_type or "default") for _, info in rows]
    status_width, agent_width = max([11, *map(len, statuses)]), max([len("AGENT"), *map(len, agents)])
    lines = [Text(f"{'ID':<{width}}  {'STATUS':<{status_width}}  {'AGE':>4}  {'AGENT':<{agent_width}}  TITLE", "bold",
                  **OUTPUT)]
    for (prefix, info), status, agent in zip(rows, statuses, agents):
        colour = SHOWN_STATUS.get(info.status, ("", ""))[1]
        lines.append(Text.assemble(
            (prefix, "dim"), f"{info.uid:<{width - len(prefix)}}  ", (f"{status:<{status_width}}", colour),
            f"  {age(now - info.updated_at):>4}  {agent:<{agent_width}}  {printable(one_line(info.title or '', 80))}",
            **OUTPUT))
    return lines


def _tree(infos: Sequence[StreamInfo], limit: int) -> list[tuple[str, StreamInfo]]:
    """(prefix, info) rows: top-level streams in the given order, each child under its parent."""
    known = {info.uid for info in infos}
    children: dict[str, list[StreamInfo]] = {}
    roots = []
    for info in infos:
        parent = info.parent_ids[-1] if info.parent_ids else ""
        if parent in known:
            children.setdefault(parent, []).append(info)
        else:
            roots.append(info)
    rows: list[tuple[str, StreamInfo]] = []

    def add(info: StreamInfo, prefix: str) -> None:
        rows.append((prefix, info))
        for child in sorted(children.get(info.uid, []), key=lambda i: i.created_at):
            add(child, "  " + prefix.replace("└ ", "  ") + "└ ")

    for info in roots[:limit] if limit > 0 else roots:
        add(info, "")
    return rows


def age(delta) -> str:
    """`42s`, `5m`, `3h`, `2d`."""
    total = max(int(delta.total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total >= size:
            return f"{total // size}{unit}"
    return f"{total}s"
