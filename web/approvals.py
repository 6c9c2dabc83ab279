"""Approvals in the web chat: the channel a web run asks on, and the answers people give from any page.

An answer is a small file beside the streams (`<stream id>.<request id>.answer`, next to the `.stop` flag),
made with a hard link so that the first answer wins in every process serving the chat. The channel of the
run that asked watches for it: at once when the answer came to the same process (an in-process wake-up),
else within `web.poll_seconds`. The files of a run's requests are removed when the run ends.
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import suppress
from pathlib import Path

from anges.safety.approval import ApprovalRequest, Decision
from anges.store.event_store import EventStore
from anges.store.events import is_valid_id

CHANNEL_NAME = "web"
ANSWERS = ("allow", "deny", "always")
MAX_FEEDBACK = 2000


class AnswerBox:
    """The answers given to approval requests of the streams in `store`, shared by every process serving it."""

    def __init__(self, store: EventStore, poll_seconds: float):
        self.store = store
        self.poll_seconds = max(float(poll_seconds), 0.01)
        self._waiters: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def give(self, uid: str, request_id: str, answer: str, feedback: str = "") -> bool:
        """Record the answer to request `request_id` of stream `uid`; False when it already had one."""
        path = self._path(uid, request_id)
        body = json.dumps({"answer": answer, "feedback": feedback}).encode()
        temp = path.with_name(f".{uid}.{request_id}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(body)
            os.link(temp, path)  # whole or not at all, and never over an earlier answer
        except FileExistsError:
            return False
        finally:
            with suppress(FileNotFoundError):
                os.unlink(temp)
        with self._lock:
            waiter = self._waiters.get(request_id)
        if waiter is not None:
            waiter.set()
        return True

    def wait(self, request: ApprovalRequest) -> Decision:
        """The answer to `request` once one is given; `cancelled` when the run stops waiting first."""
        waiter = threading.Event()
        with self._lock:
            self._waiters[request.id] = waiter
        try:
            while not request.cancelled.is_set():
                decision = self._read(request.agent_id, request.id)
                if decision is not None:
                    return decision
                waiter.wait(self.poll_seconds)  # set by an answer given in this process
            return Decision("cancelled", by="interrupt")
        finally:
            with self._lock:
                self._waiters.pop(request.id, None)

    def forget(self, uid: str, request_id: str) -> None:
        """Remove the answer to one request (its run has ended)."""
        with suppress(FileNotFoundError):
            os.unlink(self._path(uid, request_id))

    def forget_streams(self, uids: list[str]) -> None:
        """Remove every answer left for these streams (deleted chats; runs killed before they cleaned up)."""
        prefixes = tuple(f"{uid}." for uid in uids)
        try:
            with os.scandir(self.store.root) as entries:
                doomed = [entry.path for entry in entries
                          if entry.name.startswith(prefixes) and entry.name.endswith(".answer")]
        except FileNotFoundError:
            return
        for path in doomed:
            with suppress(FileNotFoundError):
                os.unlink(path)

    def _read(self, uid: str, request_id: str) -> Decision | None:
        try:
            fd = os.open(self._path(uid, request_id), os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as file:
            raw = file.read(MAX_FEEDBACK * 8)
        try:
            data = json.loads(raw)
            answer, feedback = data["answer"], str(data.get("feedback") or "")[:MAX_FEEDBACK]
        except (ValueError, TypeError, KeyError):
            return Decision("deny", feedback="the answer from the web chat could not be read", by=CHANNEL_NAME)
        if answer not in ANSWERS:
            return Decision("deny", feedback="the answer from the web chat could not be read", by=CHANNEL_NAME)
        verdict = "deny" if answer == "deny" else "allow"
        return Decision(verdict, always=answer == "always", feedback=feedback, by=CHANNEL_NAME)

    def _path(self, uid: str, request_id: str) -> Path:
        if not (is_valid_id(uid) and is_valid_id(request_id)):
            raise ValueError(f"invalid ids {uid[:80]!r}, {request_id[:80]!r}")
        return self.store.root / f"{uid}.{request_id}.answer"


class WebApproval:
    """The approval channel of one web run and its child agents: a card in the page, answered from any tab."""

    name = CHANNEL_NAME

    def __init__(self, box: AnswerBox):
        self.box = box
        self._asked: list[tuple[str, str]] = []

    def __call__(self, request: ApprovalRequest) -> Decision:
        self._asked.append((request.agent_id, request.id))
        return self.box.wait(request)  # a request too long for the card is declined before it is asked

    def close(self) -> None:
        """Remove the answers of this run's requests (the run has ended: each has its decision recorded)."""
        for uid, request_id in self._asked:
            self.box.forget(uid, request_id)
        self._asked.clear()
