"""`anges trust`: read and trust what runs in a folder's runs outside the sandbox although commands could have written
it (the project's `.anges/` hooks, MCP servers whose program lies there), list what is trusted, forget it."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from anges.config.arguments import add_config_flag
from anges.exceptions import UsageError
from anges.util.printable import visible

if TYPE_CHECKING:
    from anges.config.trust import Subject


def add_parser(commands, parents: list) -> None:
    """The `trust` subcommand."""
    trust = commands.add_parser("trust", parents=parents,
                                help="read and trust the project hooks and MCP servers of a folder")
    trust.add_argument("folder", metavar="DIR", nargs="?", help="the working directory of the runs (default: here)")
    trust.add_argument("-y", "--yes", action="store_true", help="trust all of it without asking")
    trust.add_argument("--list", action="store_true", help="what is trusted, one per line")
    trust.add_argument("--revoke", action="store_true", help="stop trusting what was trusted for DIR")
    trust.add_argument("--mcp-config", metavar="FILE", help="also the servers of this MCP config file")
    add_config_flag(trust)


def trust_command(args: argparse.Namespace) -> int:
    """anges trust [DIR] [--yes | --list | --revoke]"""
    from anges.config.trust import TrustStore

    store = TrustStore()
    folder = os.path.realpath(os.path.expanduser(args.folder or os.getcwd()))
    if args.list:
        for entry in store.entries():
            print(visible(f"{entry.get('trusted_at', '?')}  {entry.get('title', '?')}  ({entry.get('folder', '?')})"))
        return 0
    if args.revoke:
        forgotten = store.forget(folder)
        for entry in forgotten:
            print(visible(f"no longer trusted: {entry.get('title', '?')}"), file=sys.stderr)
        if not forgotten:
            print(visible(f"nothing was trusted for {folder}"), file=sys.stderr)
        return 0
    if not os.path.isdir(folder):
        raise UsageError(f"{folder} is not a directory")
    subjects = _subjects(args, folder)
    if not subjects:
        print(visible(f"nothing in {folder} needs trust: no project hooks or commands, no MCP server whose program "
                      "lies where commands may write"), file=sys.stderr)
        return 0
    for subject in subjects:
        _trust(store, subject, args.yes)
    return 0


def _subjects(args: argparse.Namespace, folder: str) -> list[Subject]:
    """What runs in `folder` would ask about: your hooks that run a file there, the project's `.anges/` (with
    hooks or commands), each MCP server whose program lies there."""
    from anges.config.loading import load_config
    from anges.config.trust import hook_subject, load_project
    from anges.safety.run_safety import commands_may_write
    from anges.tools.mcp_config import specs_from_config, untrusted_servers

    config = load_config(args.config)
    writable = commands_may_write(config.safety, folder)
    project = load_project(folder, writable)
    found = [subject for hook in config.hooks if (subject := hook_subject(hook, folder, writable)) is not None]
    found += [project.subject] if project is not None and (project.hooks or project.commands) else []
    servers = untrusted_servers(specs_from_config(config.mcp, args.mcp_config), writable, folder)
    return found + list(servers.values())


def _trust(store, subject: Subject, yes: bool) -> None:
    from anges.safety.approval_text import READ_SECONDS
    from anges.safety.terminal_prompt import discard_typed_ahead

    if store.trusts(subject):
        print(visible(f"already trusted: {subject.title}"), file=sys.stderr)
        return
    asking = not yes and not subject.problem and sys.stdin.isatty()
    if asking:
        discard_typed_ahead(sys.stdin.fileno())
    print(visible(f"{subject.title}:\n{subject.text()}"), flush=True)
    if subject.problem:
        print(visible(f"cannot be trusted: {subject.problem}"), file=sys.stderr)
        return
    if not yes:
        if not asking:
            raise UsageError("no terminal to ask on: read the above, then pass --yes to trust it")
        time.sleep(READ_SECONDS)  # the answer is asked for once it can be read
        if discard_typed_ahead(sys.stdin.fileno()):
            print("(what was typed before it could be read does not answer it)", file=sys.stderr)
        print("Trust this exact content (it runs outside the sandbox, with your rights)? [y/N] ", end="",
              file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("not trusted", file=sys.stderr)
            return
    store.trust(subject)
    print(visible(f"trusted: {subject.title}"), file=sys.stderr)
