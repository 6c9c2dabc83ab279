"""One ACP session: an anges agent on one stream, its prompt turns, and the editor as its approval channel.

The agent is synchronous and runs on a worker thread; updates and permission requests cross to the connection's
event loop and wait there until they are sent (so they arrive in order, and before the turn's answer).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from acp import RequestError
from acp.schema import PermissionOption, StopReason

from anges.acp import facts
from anges.acp.updates import Speaker, UpdateMapper
from anges.acp.wire import Wire
from anges.agents.calls import calling_agent
from anges.agents.live import SHOWN_FIELDS
from anges.exceptions import ModelReplyError, StreamBusy
from anges.safety.approval import Decision
from anges.store.events import walk

if TYPE_CHECKING:
    from anges.agents.base import BaseAgent
    from anges.store.events import EventStream

log = logging.getLogger("anges.acp")

SEND_TIMEOUT = 60.0
"""Seconds one update may wait for the connection before the client counts as gone."""
POLL_SECONDS = 0.1
STOP_WAIT = 5.0
"""Seconds a cancelled permission request waits for the run to notice the stop."""
LIMIT_REASONS = ("event_limit", "model_call_limit", "timeout", "budget")
"""Stops that end a turn with `max_turn_requests`."""
PERMISSION_OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]
ANSWERS = {"allow": Decision("allow"), "always": Decision("allow", always=True), "reject": Decision("deny")}


@dataclass
class Turn:
    """One prompt turn: its updates, whether the client cancelled it, whether the provider refused to answer."""

    mapper: UpdateMapper
    cancelled: threading.Event = field(default_factory=threading.Event)
    refused: bool = False


class Session:
    """An agent on one stream, driven by one ACP client."""

    def __init__(self, uid: str, client, loop: asyncio.AbstractEventLoop, cwd: str, secrets: list[str],
                 wire: Wire | None = None):
        self.uid = uid
        self.client = client
        self.wire = wire or Wire()
        self.loop = loop
        self.cwd = cwd
        self.secrets = secrets
        self.agent: BaseAgent | None = None
        self.turn: Turn | None = None
        self.gone = False
        """The client stopped reading: nothing more is sent."""
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()

    def attach(self, agent: BaseAgent) -> None:
        """The agent this session drives (built with `watch(model)`, `on_message`, `approval` and `cancelled`)."""
        self.agent = agent

    @property
    def stream(self) -> EventStream:
        """The session's stream (its agent's)."""
        stream = self.agent.event_stream if self.agent is not None else None
        if stream is None:
            raise RuntimeError(f"session {self.uid} has no agent on a stream yet")
        return stream

    # -- hooks the agent is built with --------------------------------------------------------------------------

    def watch(self, model) -> WatchedModel:
        """The model, wrapped so each reply reaches the turn's updates as soon as it arrives."""
        return WatchedModel(model, self)

    def on_message(self, message) -> None:
        """Message handler: an event the agent (or a child) just recorded."""
        turn = self.turn
        if turn is not None:
            parent = message.parent_ids[-1] if message.parent_ids else ""
            turn.mapper.event(message.event, Speaker(message.agent_id, message.agent_type, parent, message.depth))

    def on_delta(self, delta) -> None:
        """Delta handler: a piece of a reply's analysis or reasoning, sent as a thought chunk as it streams (the
        answer goes out as the agent's message when it is recorded); a running command's output, as its call's
        content."""
        turn = self.turn
        if turn is None or turn.cancelled.is_set():
            return
        speaker = Speaker(delta.agent_id, delta.agent_type, delta.parent_ids[-1] if delta.parent_ids else "",
                          delta.depth)
        if delta.field == "output":
            turn.mapper.output(speaker, delta)
        elif delta.field in SHOWN_FIELDS:
            turn.mapper.thought(speaker, delta)

    def cancelled(self) -> bool:
        """The agent's interrupt check: the client cancelled the running turn."""
        turn = self.turn
        return turn is not None and turn.cancelled.is_set()

    def approval(self):
        """The approval channel: the editor's permission dialog."""
        return EditorApproval(self)

    # -- turns ----------------------------------------------------------------------------------------------------

    def run_turn(self, request: str) -> StopReason:
        """Run one prompt (the first is the stream's request, later ones follow-ups); returns the ACP stop reason."""
        agent = self.agent
        if agent is None:
            raise RequestError(-32603, f"session {self.uid} has no agent")
        with self._lock:
            if self.turn is not None:
                raise RequestError(-32600, "a prompt is already running in this session; cancel it first")
            turn = self.turn = Turn(UpdateMapper(self.send, self.cwd, self._ids, asks=self._asks))
            self._idle.clear()
        try:
            agent.run_with_new_request(request)
        except StreamBusy as exc:
            raise RequestError(-32600, f"{exc}; send the prompt again when that run has ended") from None
        except Exception as exc:  # noqa: BLE001  (the edge: the agent recorded the stop; the client gets one line)
            log.exception("the run failed")
            raise RequestError(-32603, f"anges failed: {type(exc).__name__}: {exc}") from None
        finally:
            turn.mapper.finish()
            with self._lock:
                self.turn = None
                self._idle.set()
        return self.stop_reason(turn)

    def _asks(self, action_type: str, args: dict) -> bool:
        """Whether the run's gate will ask the editor before this action starts."""
        safety = getattr(self.agent, "run_safety", None)
        return safety is not None and safety.gate.asks(action_type, args)

    def stop_reason(self, turn: Turn) -> StopReason:
        """How the turn ended, as ACP says it: end_turn, cancelled, max_turn_requests or refusal."""
        final = self.stream.events_list[-1] if self.stream.events_list else None
        if turn.cancelled.is_set():
            return "cancelled"
        if final is None or final.type != "task_interrupted":
            return "end_turn"
        reason = facts.stop_reason(final)
        if reason == "interrupt":  # stopped from elsewhere: the web chat's Stop, `anges` signals
            return "cancelled"
        if reason in LIMIT_REASONS:
            return "max_turn_requests"
        if reason == "invalid_replies" and turn.refused:
            return "refusal"
        if reason in ("reply_cut_off", "context_window"):
            return "max_tokens"
        return "end_turn"

    def cancel(self) -> None:
        """Stop the running turn as Ctrl-C does: the command is killed, the model call abandoned."""
        turn = self.turn
        if turn is not None:
            turn.cancelled.set()
            if self.agent is not None:
                self.agent.interrupt("cancelled")

    def replay(self, store) -> None:
        """Send the stream's history (children included) as updates."""
        items = [(event, Speaker(owner.uid, owner.agent_type or "default",
                                 owner.parent_event_stream_uids[-1] if owner.parent_event_stream_uids else "", depth))
                 for depth, owner, event in walk(self.stream, store.load)]
        UpdateMapper(self.send, self.cwd, self._ids, replay=True).history(items)

    def close(self, wait: float = 10.0) -> None:
        """Stop the running turn, wait for it to end, and end the run's kept processes and MCP servers."""
        self.cancel()
        if not self._idle.wait(wait):
            log.warning("session %s: the run did not stop within %.0f s", self.uid, wait)
        if self.agent is not None:
            self.agent.close()
            if self.agent.mcp is not None:
                self.agent.mcp.close()

    # -- talking to the client ------------------------------------------------------------------------------------

    def send(self, update) -> None:
        """Send one session update and wait until it is written; a client that is gone stops the turn."""
        if self.gone:
            return
        try:
            self.call(self.client.session_update(session_id=self.uid, update=update)).result(SEND_TIMEOUT)
        except (ConnectionError, RuntimeError, concurrent.futures.TimeoutError, concurrent.futures.CancelledError,
                RequestError) as exc:
            log.warning("session %s: the client no longer reads updates (%s); stopping", self.uid, exc)
            self.gone = True
            self.cancel()

    def call(self, coroutine) -> concurrent.futures.Future:
        """Run a coroutine on the connection's loop from the agent's threads."""
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        except RuntimeError:  # the loop is closed: the connection is over
            coroutine.close()
            raise


class WatchedModel:
    """A model whose replies are shown as they arrive, and whose refusals are noted for the stop reason."""

    def __init__(self, model, session: Session):
        self.model = model
        self.session = session
        self.name = getattr(model, "name", "")

    def __call__(self, prompt: str, temperature: float = 0.0):
        turn = self.session.turn
        try:
            reply = self.model(prompt, temperature=temperature)
        except ModelReplyError as exc:
            if turn is not None:
                turn.refused = exc.kind == "blocked"
            raise
        if turn is not None and turn is self.session.turn and not turn.cancelled.is_set():
            from anges.util.masking import mask_secrets

            turn.refused = False
            turn.mapper.reply(mask_secrets(str(reply), self.session.secrets), calling_agent())
        return reply

    def __getattr__(self, name: str):
        return getattr(self.model, name)


class EditorApproval:
    """Asks the editor with `session/request_permission`: allow once, always allow, or reject. A cancelled request
    (by the client, or because the turn stopped) counts as rejected."""

    name = "editor"

    def __init__(self, session: Session):
        self.session = session

    def __call__(self, request) -> Decision:
        session = self.session
        turn = session.turn
        if turn is None or session.gone:
            return Decision("deny", feedback="no one can answer: the editor is not connected")
        if session.wire.from_file:
            return Decision("deny", feedback="no one can answer: anges acp reads its requests from a file",
                            by="no_one")
        tool_call = turn.mapper.permission_call(request)
        try:
            pending = session.call(session.client.request_permission(
                session_id=session.uid, tool_call=tool_call, options=PERMISSION_OPTIONS))
        except RuntimeError:
            return Decision("deny", feedback="no one can answer: the editor is not connected")
        while True:
            try:
                response = pending.result(POLL_SECONDS)
                break
            except concurrent.futures.TimeoutError:
                if request.cancelled.is_set() or turn.cancelled.is_set():
                    pending.cancel()
                    self._void(tool_call.tool_call_id)
                    return self._stopped(request)
            except (ConnectionError, RequestError, concurrent.futures.CancelledError) as exc:
                log.warning("permission request %s failed: %s", request.id, exc)
                return Decision("deny", feedback=f"the editor did not answer ({exc})", by=self.name)
        outcome = response.outcome
        if outcome.outcome != "selected":  # cancelled
            return self._stopped(request) if turn.cancelled.is_set() else Decision("deny", by=self.name)
        answer = ANSWERS.get(outcome.option_id)
        if answer is None:
            return Decision("deny", feedback=f"the editor answered with an unknown option {outcome.option_id!r}",
                            by=self.name)
        return Decision(answer.verdict, always=answer.always, by=self.name)

    def _void(self, tool_call_id: str) -> None:
        """Tell the editor that the permission request about this call is void, so it closes its dialog."""
        session = self.session
        request_id = session.wire.permission_id(session.uid, tool_call_id)
        if request_id is None or session.gone:
            return
        try:
            session.call(session.wire.void(request_id)).result(SEND_TIMEOUT)
        except (ConnectionError, RuntimeError, concurrent.futures.TimeoutError) as exc:
            log.warning("could not tell the editor that permission request %s is void: %s", request_id, exc)

    def _stopped(self, request) -> Decision:
        """The turn was cancelled: let the run record the request as cancelled (it stops waiting within a poll)."""
        request.cancelled.wait(STOP_WAIT)
        return Decision("deny", by=self.name)
