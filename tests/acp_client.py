"""An ACP client for tests: spawns `anges acp` and drives it with the SDK's client side, keeping every raw line
the agent wrote on stdout and everything it sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from acp import PROTOCOL_VERSION, Client
from acp.core import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    DeniedOutcome,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)

ANGES_ACP = [sys.executable, "-m", "anges", "acp"]


class Editor(Client):
    """The editor's side: records every update; answers permission requests from `answers` (an option id, or
    "cancelled"; a callable gets the request and returns one)."""

    def __init__(self, answers=()):
        self.updates: list = []
        self.permissions: list = []
        self.answers = list(answers)
        self.changed = asyncio.Event()

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update)
        self.changed.set()

    async def request_permission(self, options, session_id, tool_call, **kwargs):
        self.permissions.append({"tool_call": tool_call, "options": options, "updates_before": len(self.updates)})
        self.changed.set()
        answer = self.answers.pop(0) if self.answers else "reject"
        if callable(answer):
            answer = await answer(session_id, tool_call)
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=answer))

    async def wait_until(self, condition, timeout: float = 20):
        """Wait until `condition()` is true (checked after each update), or fail."""
        deadline = time.monotonic() + timeout
        while not condition():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out; updates so far: {[describe(u) for u in self.updates]}"
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 0.2))

    # -- reading what came -----------------------------------------------------------------------------------

    def calls(self) -> dict[str, dict]:
        """Each tool call's merged state (title, kind, status, content, locations), by id, in the order started;
        `statuses` lists every status it went through."""
        calls: dict[str, dict] = {}
        for update in self.updates:
            if isinstance(update, ToolCallStart):
                calls[update.tool_call_id] = {"title": update.title, "kind": update.kind, "statuses": [update.status],
                                              "status": update.status, "content": update.content or [],
                                              "locations": update.locations}
            elif isinstance(update, ToolCallProgress):
                call = calls[update.tool_call_id]
                for key in ("title", "kind", "status", "content", "locations"):
                    value = getattr(update, key)
                    if value is not None:
                        call[key] = value
                if update.status is not None:
                    call["statuses"].append(update.status)
        return calls

    def kinds(self) -> list[str]:
        return [update.session_update for update in self.updates]

    def texts(self, kind) -> list[str]:
        return [u.content.text for u in self.updates if isinstance(u, kind)]

    def thoughts(self) -> list[str]:
        """The thoughts shown, chunks in a row joined (a streamed reply's thoughts come in pieces)."""
        thoughts: list[str] = []
        joined = False
        for update in self.updates:
            if isinstance(update, AgentThoughtChunk):
                if joined:
                    thoughts[-1] += update.content.text
                else:
                    thoughts.append(update.content.text)
            joined = isinstance(update, AgentThoughtChunk)
        return thoughts

    def messages(self) -> list[str]:
        return self.texts(AgentMessageChunk)

    def user_messages(self) -> list[str]:
        return self.texts(UserMessageChunk)

    def plans(self) -> list[list[tuple[str, str]]]:
        return [[(e.content, e.status) for e in u.entries] for u in self.updates if isinstance(u, AgentPlanUpdate)]


def story(updates: list) -> list[tuple]:
    """What a person reads of a session, in order, for comparing a live turn with its replay: thoughts (chunks in a
    row joined), messages, plans, each tool call when it starts (title, kind, raw input) and when it ends (status,
    text and diffs). The steps between (pending, in progress, waiting for approval) and the user's own prompts,
    which the live editor does not get back, are left out."""
    told: list[tuple] = []
    calls: dict[str, dict] = {}
    last_was_thought = False
    for update in updates:
        if isinstance(update, AgentThoughtChunk):
            if last_was_thought:
                told[-1] = ("thought", told[-1][1] + update.content.text)
            else:
                told.append(("thought", update.content.text))
        elif isinstance(update, AgentMessageChunk):
            told.append(("message", update.content.text))
        elif isinstance(update, AgentPlanUpdate):
            told.append(("plan", [(e.content, e.status) for e in update.entries]))
        elif isinstance(update, ToolCallStart):
            calls[update.tool_call_id] = {"title": update.title}
            told.append(("call", update.title, update.kind, update.raw_input))
            if update.status in ("completed", "failed"):
                told.append(("done", update.title, update.status, _shown(update.content or [])))
        elif isinstance(update, ToolCallProgress) and update.status in ("completed", "failed"):
            told.append(("done", calls[update.tool_call_id]["title"], update.status, _shown(update.content or [])))
        last_was_thought = isinstance(update, AgentThoughtChunk)
    return told


def _shown(content: list) -> list:
    return [(item.content.text,) if item.type == "content" else (item.path, item.old_text, item.new_text)
            for item in content]


def describe(update) -> str:
    if isinstance(update, (ToolCallStart, ToolCallProgress)):
        return f"{update.session_update}({update.tool_call_id}, {update.title!r}, {update.status})"
    text = getattr(getattr(update, "content", None), "text", "")
    return f"{update.session_update}({text[:60]!r})"


def content_text(call: dict) -> str:
    """The text content of a merged tool call."""
    return "\n".join(item.content.text for item in call["content"] if item.type == "content")


def diffs(call: dict) -> list:
    return [item for item in call["content"] if item.type == "diff"]


class Agent:
    """A running `anges acp`: its connection, its process, the raw lines of its stdout, its stderr file."""

    def __init__(self, conn, process, lines, stderr: Path):
        self.conn = conn
        self.process = process
        self.lines = lines
        self.stderr = stderr

    async def start(self) -> dict:
        """initialize; returns the response as JSON."""
        response = await self.conn.initialize(protocol_version=PROTOCOL_VERSION)
        return response.model_dump(by_alias=True, exclude_none=True)

    def stdout_messages(self) -> list[dict]:
        """Every line of stdout as JSON; fails on a line that is not a JSON-RPC message."""
        messages = []
        for line in self.lines:
            message = json.loads(line)
            assert message.get("jsonrpc") == "2.0", line
            messages.append(message)
        return messages


@contextlib.asynccontextmanager
async def anges_acp(editor: Editor, *args: str, cwd: Path, env: dict | None = None):
    """`anges acp ARGS` in `cwd`, connected to `editor`; on exit stdin is closed and the process must end."""
    stderr = cwd.parent / f"{cwd.name}-acp-stderr.log"
    with open(stderr, "ab") as err:
        process = await asyncio.create_subprocess_exec(
            *ANGES_ACP, *args, cwd=cwd, env=env or os.environ.copy(), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=err, limit=50 * 1024 * 1024)
    lines: list[bytes] = []
    reader = asyncio.StreamReader(limit=50 * 1024 * 1024)

    async def tee():
        while line := await process.stdout.readline():
            lines.append(line)
            reader.feed_data(line)
        reader.feed_eof()

    copying = asyncio.create_task(tee())
    conn = ClientSideConnection(editor, process.stdin, reader)
    try:
        yield Agent(conn, process, lines, stderr)
    finally:
        await conn.close()
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 20)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"anges acp did not exit when stdin closed; stderr: {stderr.read_text()[-2000:]}") from None
        await copying


def run(coroutine):
    """Run a test's coroutine."""
    return asyncio.run(coroutine)
