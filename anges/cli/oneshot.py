"""A task run once on a terminal (`anges -q ...`): the live screen while it works, then the answer.

The agent works on a thread of its own; the main thread keeps the terminal (keys, resizes, signals). Esc or Ctrl-C
stops the run; Ctrl-C again while it stops quits at once.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from prompt_toolkit.key_binding import KeyBindings

from anges.cli.approvals import ApprovalPane
from anges.cli.screen import Screen
from anges.cli.session import Session, interrupt_on_signals

if TYPE_CHECKING:
    from anges.agents.base import BaseAgent
    from anges.agents.outcome import Outcome
    from anges.cli.build import Setup
    from anges.cli.transcript import TextOutput

QUIT = "quit"


def run_once(setup: Setup, output: TextOutput, request: str) -> tuple[Outcome, BaseAgent]:
    """Run `request` on the stream the arguments name, drawn live; returns the outcome and the agent."""
    approvals = ApprovalPane()
    agent = setup.agent(setup.stream(setup.args.resume), output, channel=approvals)
    session = Session(agent, output)
    approvals.root = agent.uid
    output.transcript.status.describe(agent, setup.config.safety)
    screen = Screen(output.transcript.display, output.transcript.status, above=[approvals],
                    bindings=stop_keys(session))
    approvals.attach(screen)
    output.transcript.screen = screen
    try:
        with interrupt_on_signals(session.interrupt):
            return run_beside(screen, lambda: session.run(request), agent), agent
    finally:
        output.transcript.screen = None


def stop_keys(session: Session) -> KeyBindings:
    """Esc and Ctrl-C stop the running request; Ctrl-C while it stops quits at once."""
    keys = KeyBindings()

    @keys.add("escape")
    def _(event) -> None:
        if not session.stopping:
            session.interrupt("Esc")

    @keys.add("c-c")
    @keys.add("<sigint>")
    def _(event) -> None:
        if session.stopping:
            event.app.exit(result=QUIT)
        else:
            session.interrupt("Ctrl-C" if event.key_sequence[0].key == "c-c" else "SIGINT")

    return keys


def run_beside(screen: Screen, work, agent=None):
    """Run `work` on a thread while `screen` is up, which closes when `work` returns; its result, or what it raised.
    A quit key raises KeyboardInterrupt at once, after ending the processes of `agent`'s run."""
    done: dict = {}

    def target() -> None:
        try:
            done["result"] = work()
        except BaseException as exc:  # noqa: BLE001  (handed to the main thread)
            done["error"] = exc
        finally:
            screen.close()

    thread = threading.Thread(target=target, name="anges-run", daemon=True)
    if screen.run(started=thread.start) == QUIT and thread.is_alive():
        safety = getattr(agent, "run_safety", None)
        if safety is not None:
            safety.runners.close()
        raise KeyboardInterrupt
    thread.join()
    if "error" in done:
        raise done["error"]
    return done["result"]
