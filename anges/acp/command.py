"""`anges acp`: its options, and serving an editor with them (the protocol itself is in this package)."""

from __future__ import annotations

import argparse

from anges.config.arguments import (
    add_agents_md_flag,
    add_config_flag,
    add_safety_flags,
    agent_type,
    config_overrides,
    positive,
)
from anges.exceptions import UsageError

ACP_EPILOG = """\
anges acp speaks the Agent Client Protocol on stdin/stdout: an editor starts it and talks to it. Each editor
session is an anges stream (anges list shows it); actions that need approval are asked in the editor.
Zed, in settings.json:

  "agent_servers": {"anges": {"type": "custom", "command": "anges", "args": ["acp"]}}

More in docs/acp.md. Logs go to stderr (or --log-file); stdout carries the protocol only.
"""


def build_acp_parser() -> argparse.ArgumentParser:
    """The options of `anges acp`."""
    parser = argparse.ArgumentParser(
        prog="anges acp", description="Serve editors over the Agent Client Protocol (ACP) on stdin/stdout.",
        epilog=ACP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--agent", type=agent_type, metavar="TYPE", default="default",
                        help="agent type of new sessions (default, task_executor, task_analyzer, orchestrator, or a "
                             "plug-in's)")
    parser.add_argument("--model", metavar="NAME", help="the model, as for anges --model (default: from the config)")
    add_config_flag(parser)
    parser.add_argument("--max-steps", metavar="N", type=positive(int), help="stop a prompt after N steps")
    parser.add_argument("--timeout", metavar="SECONDS", type=positive(float), help="stop a prompt after SECONDS")
    add_safety_flags(parser, "as for anges --sandbox",
                     "what an action that needs approval gets: ask in the editor (default), approved, declined")
    add_agents_md_flag(parser)
    parser.add_argument("--log-file", metavar="FILE", help="write the log to FILE instead of stderr")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    return parser


def run_acp(argv: list[str]) -> int:
    """anges acp ..."""
    args = build_acp_parser().parse_args(argv)
    try:
        import acp  # noqa: F401
    except ImportError:
        raise UsageError('anges acp needs the Agent Client Protocol SDK: pip install "anges[acp]"') from None
    from anges.acp import run
    from anges.config.loading import load_config

    config = load_config(args.config, config_overrides(args))
    return run(config, model=args.model, agent_type=args.agent, verbose=args.verbose, log_file=args.log_file)
