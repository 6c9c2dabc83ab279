"""The stream commands: `anges list`, `show`, `export`, `import` and `rm` (`diff` and `undo`: cli/checkpoints.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from anges.exceptions import UsageError
from anges.util.printable import printable_json


def list_streams(args: argparse.Namespace) -> int:
    """anges list"""
    import json

    from anges.cli.runs import format_list
    from anges.cli.terminal import Display
    from anges.store.event_store import EventStore

    store = EventStore()
    infos = store.list()
    if args.batch:
        infos = _in_batch(infos, args.batch)
    if args.json:
        print(json.dumps([info.to_dict() for info in infos], indent=2))
    elif not infos:
        where = f"of batch {args.batch!r}" if args.batch else "yet"
        print(f"no streams {where} in {store.root}", file=sys.stderr)
    else:
        Display.of(sys.stdout).write(format_list(infos, limit=args.limit))
    return 0


def show_stream(args: argparse.Namespace) -> int:
    """anges show ID"""
    from anges.cli.runs import print_stream
    from anges.store.event_store import EventStore

    store = EventStore()
    if args.json:
        _write_json(store.export(args.id), sys.stdout)
    else:
        print_stream(store.load(args.id), store, sys.stdout, verbose=bool(args.verbose))
    return 0


def export_stream(args: argparse.Namespace) -> int:
    """anges export ID --format {json,md} [-o FILE]"""
    import io

    from anges.store.event_store import EventStore

    store = EventStore()
    if args.format == "md":
        from anges.store.export import to_markdown

        text = to_markdown(store.load(args.id), store)
    else:
        buffer = io.StringIO()
        _write_json(store.export(args.id), buffer)
        text = buffer.getvalue()
    if not args.file:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.file).expanduser().write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.file}: {exc.strerror or exc}") from None
    print(f"wrote {args.file}", file=sys.stderr)
    return 0


def import_stream(args: argparse.Namespace) -> int:
    """anges import FILE"""
    from anges.store.event_store import EventStore

    stream = EventStore().import_file(args.file, new_id=args.new_id)
    print(stream.uid)
    print(f"imported {stream.title!r} ({len(stream.events_list)} events); continue it with: "
          f"anges --resume {stream.uid} -q ...", file=sys.stderr)
    return 0


def remove_streams(args: argparse.Namespace) -> int:
    """anges rm ID... (their checkpoints too)"""
    from anges.checkpoints.store import remove_checkpoints
    from anges.store.event_store import EventStore

    store = EventStore()
    for uid in args.ids:
        removed = store.delete(uid)
        remove_checkpoints(removed)
        extra = f" and {len(removed) - 1} child stream{'s' if len(removed) != 2 else ''}" if len(removed) > 1 else ""
        print(f"removed {uid}{extra}", file=sys.stderr)
    return 0


def _in_batch(infos: list, batch_id: str) -> list:
    """The streams of one batch and their descendants."""
    runs = {info.uid for info in infos if info.batch_id == batch_id}
    return [info for info in infos if info.uid in runs or runs.intersection(info.parent_ids)]


def _write_json(data: dict, out) -> None:
    import json

    out.write(printable_json(json.dumps(data, indent=2, ensure_ascii=False, default=str)) + "\n")
