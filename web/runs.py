"""Agent runs started by this server: one at a time per chat, each in a background thread."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from anges.config.types import Config
from anges.exceptions import AngesError, ModelSetupError, StreamBusy, StreamNotFound
from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream, status_of
from anges.tools.mcp import manager_for
from anges.util.clipping import one_line

from .approvals import AnswerBox, WebApproval
from .logs import log

if TYPE_CHECKING:
    from anges.agents.base import BaseAgent


ModelFactory = Callable[[str | None, Config, str], Callable]


def default_model_factory(name: str | None, config: Config, agent_type: str) -> Callable:
    """The model a chat asks for (empty = the configured one), built by `anges.models.get_model`."""
    from anges.models import get_model

    return get_model(name or None, config=config, agent_type=agent_type)


def user_notes(notes) -> list[str]:
    """A chat's own notes, as a list of strings (0.1.x streams may hold one string)."""
    if not isinstance(notes, list):
        notes = [notes] if notes else []
    return [str(note) for note in notes]


def sandbox_summary(config: Config, cwd: str = "") -> dict:
    """How this server's runs (in `cwd`, the default working directory) treat commands, for the page: `label`
    (short), `detail` (a sentence), and facts."""
    from anges.safety.sandbox import SandboxSettings, availability

    safety = config.safety
    approval = safety.approval or "ask"
    places = SandboxSettings.for_run(safety, cwd or os.getcwd()).untrusted  # and every chat's run so far: noted
    found = availability(safety.bwrap, places) if safety.sandbox != "off" else None
    if found is None:
        label, detail = "No sandbox", "safety.sandbox is off: commands run with your rights"
    elif not found.ok:
        label, detail = "No sandbox", f"the sandbox is not available: {found.reason}"
    else:
        label = f"Sandbox: {safety.sandbox}, {'network' if safety.network else 'no network'}"
        detail = ("commands can write only in the working directory (and safety.writable_paths)"
                  if safety.sandbox == "workspace" else "commands can write nowhere but a private /tmp")
    sandboxed = found is not None and found.ok
    if not sandboxed:
        detail += {"ask": "; you approve each command", "auto": "; every command runs without asking",
                   "deny": "; every command is declined (approval: deny)"}.get(approval, "")
    return {"mode": safety.sandbox, "sandboxed": sandboxed, "network": safety.network, "approval": approval,
            "label": label, "detail": detail}


def unsandboxed_problem(config: Config, cwd: str = "") -> str:
    """Why only this machine may use the chat (its commands would run outside a sandbox); "" when others may."""
    if config.web.allow_unsandboxed:
        return ""
    summary = sandbox_summary(config, cwd)
    if summary["mode"] != "off" and (summary["sandboxed"] or summary["approval"] != "auto"):
        return ""
    why = ("the sandbox is off (safety.sandbox: off, --sandbox off)" if summary["mode"] == "off"
           else "the sandbox is not available and approval is auto")
    return (f"{why}, so commands would run with the full rights of this server's user; from another machine "
            "that is allowed only with web.allow_unsandboxed: true in the config")


class ChatBusy(AngesError):
    """A run is already active on this chat (here or in another process)."""


@dataclass
class Run:
    """One run in progress: its thread and, once built, its agent."""

    uid: str
    thread: threading.Thread | None = None
    agent: BaseAgent | None = None
    stop_requested: bool = False
    approvals: WebApproval | None = None
    failure: str = ""
    live: dict[str, dict] = field(default_factory=dict)
    """The reply streaming now in each agent of the run, by stream id: its call, and its analysis, reasoning and
    answer so far, then the latest output of the command it runs (until the agent records its next event)."""

    def on_delta(self, delta) -> None:
        """Delta handler: keep the reply's texts so far for the feed, and the output of the command it runs."""
        if delta.field == "fold":  # the history is being folded: its event shows what was
            return
        if delta.field == "output":
            shown = self.live.get(delta.agent_id) or {"call": delta.call, "analysis": "", "reasoning": "",
                                                      "answer": "", "answer_type": ""}
            self.live[delta.agent_id] = {**shown, "output": delta.output}
            return
        self.live[delta.agent_id] = {"call": delta.call, "analysis": delta.analysis, "reasoning": delta.reasoning,
                                     "answer": delta.answer, "answer_type": delta.answer_type}

    def on_message(self, message) -> None:
        """Message handler: the agent recorded an event, which shows the reply from now on."""
        self.live.pop(message.agent_id, None)

    def ending(self) -> str:
        """How the run ended, for the log: the status its last events set, or why it failed."""
        if self.failure or self.agent is None or self.agent.event_stream is None:
            return f"failed: {one_line(self.failure, 300)}" if self.failure else "never started"
        events = self.agent.event_stream.events_list
        return next((status for event in reversed(events) if (status := status_of(event.type))), "new")


class Runs:
    """Starts, tracks and stops the runs of this process; the store's run lock covers other processes."""

    def __init__(self, store: EventStore, config: Config, model_factory: ModelFactory, default_dir: str):
        self.store = store
        self.config = config
        self.model_factory = model_factory
        self.default_dir = default_dir
        self.answers = AnswerBox(store, config.web.poll_seconds)
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()

    def busy(self, uid: str) -> bool:
        """True while a run is active on `uid`, started here or anywhere else."""
        return uid in self._runs or self.store.is_running(uid)

    def started_here(self, uid: str) -> bool:
        """True while a run this process started on `uid` is active."""
        return uid in self._runs

    def live(self, uid: str) -> dict[str, dict]:
        """The replies streaming now in the run of chat `uid` (this process's), by stream id of the agent."""
        run = self._runs.get(uid)
        return dict(run.live) if run is not None else {}

    def start(self, uid: str, text: str) -> None:
        """Start working on `text` in chat `uid` in the background; ChatBusy if a run is already active."""
        with self._lock:
            if self.busy(uid):
                raise ChatBusy("this chat is already running: wait for it to finish or stop it first")
            run = self._runs[uid] = Run(uid)
            run.thread = threading.Thread(target=self._work, args=(run, text), name=f"anges-run-{uid}", daemon=True)
        log.info("chat %s: run started", uid)
        run.thread.start()

    def stop(self, uid: str) -> bool:
        """Ask the active run of `uid` to stop, in this process or another (its command is killed).

        False when nothing runs there.
        """
        run = self._runs.get(uid)
        if run is None and not self.store.is_running(uid):
            return False
        self.store.request_stop(uid)
        if run is not None:
            run.stop_requested = True  # also covers a run whose agent has not started yet
            if run.agent is not None:
                run.agent.interrupt()
        return True

    def stop_all(self, timeout: float) -> int:
        """Stop every run this process started, and give them up to `timeout` seconds in all to record how they
        ended and end their commands; returns how many there were."""
        uids = list(self._runs)
        for uid in uids:
            self.stop(uid)
        deadline = time.monotonic() + timeout
        for uid in uids:
            self.wait(uid, max(deadline - time.monotonic(), 0.0))
        return len(uids)

    def wait(self, uid: str, timeout: float | None = None) -> bool:
        """Wait for this process's run of `uid` to end; True when none is left."""
        run = self._runs.get(uid)
        if run is not None and run.thread is not None:
            run.thread.join(timeout)
        return uid not in self._runs

    # -- the background thread --------------------------------------------------------------------------------

    def _work(self, run: Run, text: str) -> None:
        known = None  # events in the chat before this run
        try:
            stream = self.store.load(run.uid)
            known = len(stream.events_list)
            run.approvals = WebApproval(self.answers)
            run.agent = self._build_agent(stream, lambda: run.stop_requested, run.approvals)
            run.agent.delta_handlers.append(run.on_delta)
            run.agent.message_handlers.append(run.on_message)
            with run.agent.mcp or nullcontext():
                run.agent.run_with_new_request(text)
        except StreamBusy:
            pass  # another process started a run on this chat at the same instant; its events show instead
        except StreamNotFound:
            pass  # the chat was deleted before the run began
        except ModelSetupError as exc:
            self._record_failure(run, known, text, "model_setup", f"No model is available: {exc}")
        except AngesError as exc:
            self._record_failure(run, known, text, "error", f"The run could not start: {exc}")
        except Exception as exc:  # the edge of a background thread: show the failure in the chat, never hang
            log.exception("run of chat %s failed", run.uid)
            self._record_failure(run, known, text, "error", f"The run failed: {type(exc).__name__}: {exc}")
        finally:
            if run.approvals is not None:
                run.approvals.close()
            log.info("chat %s: run ended, %s", run.uid, run.ending())
            with self._lock:
                self._runs.pop(run.uid, None)

    def _build_agent(self, stream: EventStream, interrupt_check: Callable[[], bool],
                     approvals: WebApproval) -> BaseAgent:
        from anges.agents import agent_class
        from anges.safety.run_safety import commands_may_write

        settings = stream.get_settings()
        agent_type = settings.get("agent_type") or stream.agent_type or "default"
        cwd = settings.get("cmd_init_dir") or self.default_dir
        if not os.path.isdir(cwd):
            raise AngesError(f"the working directory {cwd!r} does not exist; change it in the chat settings")
        model = self.model_factory(settings.get("model") or None, self.config, agent_type)
        mcp = manager_for(self.config, settings.get("mcp_config") or None, commands_may_write(self.config.safety, cwd))
        return agent_class(agent_type)(
            inference_func=model,
            event_stream=stream,
            cmd_init_dir=cwd,
            prefix_cmd=settings.get("prefix_cmd") or "",
            notes=user_notes(settings.get("notes")),
            interrupt_check=interrupt_check,
            config=self.config,
            store=self.store,
            mcp=mcp,
            approval=approvals,
        )

    def _record_failure(self, run: Run, known: int | None, text: str, reason: str, message: str) -> None:
        """Record the request (unless the agent did) and a `task_interrupted` event that says what went wrong."""
        run.failure = message
        try:
            stream = self.store.load(run.uid)
        except AngesError:
            return  # deleted meanwhile: nobody is left to tell
        if known is None or len(stream.events_list) <= known:
            kind = "follow_up_request" if stream.events_list else "new_request"
            stream.add_event(Event(kind, content=text, message=text))
        stream.add_event(Event("task_interrupted", content=message, message=message, data={"reason": reason}))
        self.store.sync(stream)
