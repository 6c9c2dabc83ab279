"""Login sessions kept on the server, so that logging out, or a new password, ends a session for good.

The session cookie only names a session; a session is live while this registry holds it. With a file (the
password mode), every process serving the chat shares the registry and sessions outlive restarts, like the
cookie; without one (the token mode, whose token is made per launch) it lives in memory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import threading
import time
from pathlib import Path

from anges.util.paths import open_file, write_file

MAX_SESSIONS = 1000
"""Live sessions kept at most; beyond that the ones that expire soonest are dropped."""


class SessionRegistry:
    """The live sessions of one login secret (identified by its `fingerprint`), each valid for `lifetime` s."""

    def __init__(self, fingerprint: str, lifetime: float, path: Path | None = None):
        self.fingerprint = fingerprint
        self.lifetime = lifetime
        self.path = path
        self._sessions: dict[str, dict] = {}  # sha256 of the session id -> {"fingerprint", "expires"}
        self._lock = threading.Lock()
        if path is not None:
            # Sessions made under another secret end here: a new password logs everybody out.
            self._update(lambda sessions: {key: entry for key, entry in sessions.items()
                                           if entry.get("fingerprint") == fingerprint})

    def create(self) -> str:
        """A new live session; its id goes in the cookie (the registry keeps only a hash of it)."""
        sid = secrets.token_urlsafe(32)
        entry = {"fingerprint": self.fingerprint, "expires": time.time() + self.lifetime}
        self._update(lambda sessions: {**sessions, _key(sid): entry})
        return sid

    def valid(self, sid: object) -> bool:
        """True while the session `sid` is live: created here, not ended, not expired."""
        if not isinstance(sid, str) or not sid:
            return False
        with self._lock:
            self._read()  # another process may have ended it: the file is small, read it every time
            entry = self._sessions.get(_key(sid))
        return (entry is not None and entry.get("fingerprint") == self.fingerprint
                and entry.get("expires", 0) > time.time())

    def end(self, sid: object) -> None:
        """End the session `sid` (logging out); the same cookie no longer works anywhere."""
        if isinstance(sid, str) and sid:
            self._update(lambda sessions: {key: entry for key, entry in sessions.items() if key != _key(sid)})

    # -- storage --------------------------------------------------------------------------------------------

    def _update(self, change) -> None:
        with self._lock:
            if self.path is None:
                self._sessions = _bounded(change(self._sessions))
                return
            lock = open_file(str(self.path.with_name(self.path.name + ".lock")), os.O_RDWR | os.O_CREAT, parents=True)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)  # other processes serving the chat update the same file
                self._read()
                self._sessions = _bounded(change(self._sessions))
                write_file(str(self.path), json.dumps({"version": 1, "sessions": self._sessions}).encode())
            finally:
                os.close(lock)

    def _read(self) -> None:
        """The sessions as the file holds them now (other processes serving the chat change it too)."""
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}  # missing or damaged: no session is live, everybody logs in again
        sessions = data.get("sessions") if isinstance(data, dict) else None
        self._sessions = {key: entry for key, entry in (sessions if isinstance(sessions, dict) else {}).items()
                          if isinstance(entry, dict) and isinstance(entry.get("expires"), (int, float))}


def _key(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


def _bounded(sessions: dict[str, dict]) -> dict[str, dict]:
    now = time.time()
    live = {key: entry for key, entry in sessions.items() if entry.get("expires", 0) > now}
    if len(live) > MAX_SESSIONS:
        keep = sorted(live, key=lambda key: live[key]["expires"])[-MAX_SESSIONS:]
        live = {key: live[key] for key in keep}
    return live
