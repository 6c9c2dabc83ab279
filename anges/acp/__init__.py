"""`anges acp`: anges as an Agent Client Protocol agent on stdin/stdout, for editors (Zed, JetBrains IDEs, Neovim
plug-ins, any ACP client). Needs the `agent-client-protocol` SDK: pip install "anges[acp]". See docs/acp.md.

| module | what |
|---|---|
| `server.py` | the ACP methods; sessions are anges streams; serving over stdio |
| `session.py` | one session: its agent, its prompt turns, the editor as approval channel |
| `updates.py` | replies and events as session updates (thoughts, tool calls, answers, plan); replay |
| `facts.py` | every `Event.data` key the mapping reads |
| `diffs.py`, `plan.py` | an edit's diff as old/new text; the plan as entries (a child's: its progress) |
| `stdio.py` | stdout kept for the protocol; stdin and stdout as pipes or files |
| `wire.py` | what passes on the connection: open permission requests (voided on cancel), answers to file requests |
"""

from __future__ import annotations

import logging
import sys


def run(config, model: str | None = None, agent_type: str = "default", verbose: int = 0,
        log_file: str | None = None) -> int:
    """Serve ACP on stdin/stdout until the client closes the connection; returns the exit code."""
    import asyncio

    from anges.acp.server import Options, serve
    from anges.acp.stdio import take_stdio, unusable

    problem = unusable()
    if problem:
        from anges.exceptions import AngesError

        raise AngesError(problem)
    protocol_in, protocol_out = take_stdio()
    _setup_logging(verbose, log_file)
    if protocol_in.isatty():
        print("anges acp: speaking the Agent Client Protocol on stdin/stdout; start it from your editor "
              "(see docs/acp.md). Ctrl-D ends it.", file=sys.stderr)
    asyncio.run(serve(Options(config, model, agent_type), protocol_in, protocol_out))
    return 0


def _setup_logging(verbose: int, log_file: str | None) -> None:
    from anges.util.printable import printable

    class PrintableFormatter(logging.Formatter):  # log lines quote model replies and client input
        def format(self, record: logging.LogRecord) -> str:
            return printable(super().format(record))

    handler = logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, handlers=[handler], force=True)
