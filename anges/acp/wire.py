"""What passes on the connection, watched as it goes: the JSON-RPC ids of open permission requests (so a request
the run no longer waits for can be declared void with `$/cancel_request`), and, for requests read from a file, when
each has its answer (so the next is read only then, as an editor would send it)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

log = logging.getLogger("anges.acp")

PERMISSION = "session/request_permission"
CANCEL_REQUEST = "$/cancel_request"
"""The protocol's notification that a request is void: the receiver stops handling it (an editor closes its
dialog)."""


class Wire:
    """Watches the messages of one connection (an observer of the SDK's `Connection`)."""

    def __init__(self) -> None:
        self.connection: Any = None
        """The SDK's connection, which sends a notification of any name (set once connected)."""
        self._permissions: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self.from_file = False
        """The requests come from a file: nobody answers a permission request."""
        self._answered: set[Any] = set()
        self._progress = asyncio.Event()

    def __call__(self, event: Any) -> None:
        """The connection's observer: every message in or out (`event.direction`, `event.message`)."""
        message = event.message
        outgoing = str(getattr(event.direction, "value", event.direction)) == "outgoing"
        if outgoing and message.get("method") == PERMISSION:
            params = message.get("params") or {}
            key = (str(params.get("sessionId")), str((params.get("toolCall") or {}).get("toolCallId")))
            with self._lock:
                self._permissions[key] = message.get("id")
        elif outgoing and "id" in message and "method" not in message:
            self._answered.add(message["id"])
            self._progress.set()
        elif not outgoing and "id" in message and "method" not in message:  # the client answered one of ours
            with self._lock:
                for key in [key for key, value in self._permissions.items() if value == message["id"]]:
                    del self._permissions[key]

    def permission_id(self, session_id: str, tool_call_id: str) -> Any:
        """The JSON-RPC id of the permission request sent about a tool call (None if none went out)."""
        with self._lock:
            return self._permissions.pop((session_id, tool_call_id), None)

    async def void(self, request_id: Any) -> None:
        """Tell the client that request `request_id` is void (it no longer waits for an answer)."""
        # The SDK (agent-client-protocol 0.12) has no call for this protocol-level notification; its connection
        # sends a notification of any name.
        send = getattr(self.connection, "send_notification", None)
        if send is None:
            log.warning("cannot tell the client that request %s is void: the SDK's connection is unknown", request_id)
            return
        await send(CANCEL_REQUEST, {"requestId": request_id})

    # -- requests read from a file ----------------------------------------------------------------------------

    def request_id(self, line: bytes) -> Any:
        """The id of the request a line of input makes (None for a notification, an answer or no JSON)."""
        self.from_file = True
        try:
            message = json.loads(line)
        except ValueError:
            return None
        return message.get("id") if isinstance(message, dict) and "method" in message else None

    async def answered(self, request_id: Any) -> None:
        """Wait until request `request_id` has been answered."""
        while request_id not in self._answered:
            self._progress.clear()
            await self._progress.wait()
