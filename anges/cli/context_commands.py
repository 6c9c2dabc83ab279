"""The session's commands about the agent's context: `/status` (what it runs with), `/compact` (fold the history
now) and `/init` (ask for the project's AGENTS.md)."""

from __future__ import annotations

import os
import threading

from rich.text import Text

from anges.cli.commands import Interactive, command
from anges.cli.status import FOLDING
from anges.exceptions import RunStopped, StreamBusy


@command("/status", "model, window and how full it is, sandbox, approvals, folder, stream, AGENTS.md, MCP, hooks")
def status(session: Interactive, argument: str) -> None:
    from anges.cli.status_report import status_lines

    lines = status_lines(session)
    width = max(len(what) for what, _ in lines)
    session.transcript.print([Text.assemble((f"  {what.ljust(width)}", "cyan"), f"  {value}")
                              for what, value in lines])


@command("/compact [WHAT TO KEEP]", "fold the history into its summary now (Esc stops), keeping what you name",
         idle_only=True)
def compact(session: Interactive, argument: str) -> None:
    from anges.agents.compacting import compact as fold

    agent, setup = session.session.agent, session.setup
    stream = session.stream
    keeping = f" (keeping {argument})" if argument else ""
    session.screen.show_live(f"⇊ {FOLDING}: the history is being folded into the summary{keeping} · Esc stops")
    session.cancel = cancel = threading.Event()
    try:
        done = fold(stream, setup.store, setup.config, agent.inference_func, argument, cancel.is_set)
    except RunStopped:
        session.say("not compacted: stopped; the history is as it was", "yellow")
        return
    except StreamBusy as exc:
        session.say(f"not compacted: {exc}", "yellow")
        return
    finally:
        session.cancel = None
        session.screen.show_live("")
    if done is None:
        session.say("nothing to compact: every event is in the summary already", "dim")
        return
    summary = done.summary
    session.status.charged(summary.data.get("usage"), summary.data.get("cost"))
    session.status.prompted(0)  # the gauge showed the fold's prompt: the next prompt is what it measures
    session.transcript.print(session.transcript.renderer.event(done.event))


@command("/init [NOTES]", "ask the agent to write (or improve) this project's AGENTS.md")
def init(session: Interactive, argument: str) -> None:
    from anges.prompt.templates import render_template

    cwd = session.cwd()
    path = os.path.join(cwd, "AGENTS.md")
    existing = path if os.path.isfile(path) else ""
    text = render_template("init.j2", session.setup.config.prompt.template_dir, cwd=cwd, existing=existing,
                           extra=argument).strip()
    session.say(f"/init: asking the agent to {'improve' if existing else 'write'} {path}", "dim")
    session.screen.in_loop(lambda: session.request(text, echo=False))
