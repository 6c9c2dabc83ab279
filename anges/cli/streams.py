"""The stream commands: `anges list`, `show`, `export`, `import` and `rm` (`diff` and `undo`: cli/checkpoints.py)."""

from __future__ import annotations

import argparse
import os
import sys

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
    from anges.config.loading import load_config
    from anges.util.paths import links_on_the_way, links_text

    links = links_on_the_way(args.file, writable_roots(store.load(args.id).agent_settings, load_config().safety))
    if links:
        raise UsageError(f"not written: {links_text(links)}, and anges never writes through a link (a command may "
                         "have made it): remove it, or name another file")
    write_report(args.file, text)
    print(f"wrote {args.file}", file=sys.stderr)
    return 0


def writable_roots(settings: dict, safety) -> list[str]:
    """The folders a stream's commands could write (its working directory and `safety.writable_paths`), resolved:
    a link found in one of them may have been planted by the model."""
    from anges.util.paths import resolve

    cwd = str(settings.get("cmd_init_dir") or os.getcwd())
    return [resolve(path) for path in [cwd, *(os.path.join(cwd, os.path.expanduser(p)) for p in
                                              safety.writable_paths)]]


def write_report(path: str, text: str) -> None:
    """Write an export whole, replacing a link at `path` rather than writing through it (UsageError when it
    cannot)."""
    from anges.util.paths import write_file

    try:
        write_file(os.path.expanduser(path), text.encode("utf-8", errors="surrogateescape"), 0o666)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


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
