"""The live event feeds: Server-Sent Events carrying a chat's steps and those of the child agents it runs, until
no run is active on it.

Messages: `steps` {block, steps} (block "" is the chat, "7" the child run started at the chat's step 7,
"7/3" the one that child started at its step 3); `child` {block, uid, title, status} when a child's title
or status changes; `live` {block, call, analysis, reasoning, answer, answer_type, output} while a reply streams
in the chat or a child, and while the command it asked for runs (the texts so far: the last LIVE_CHARS of the
first two and of the command's output, LIVE_ANSWER_CHARS of the answer; the block's next `steps` replaces it);
`status` (the chat's state and totals) on change; `gone` when the chat is deleted; and `end` {reason}:
"finished" (no run is active: the page opens a new feed when one starts), "lifetime" (open a new one now) or
"login" (the session ended). A chat resumes with `from` (its next step index) and `blocks` ("7:12,7/3:4": the
next step index of each child block still open on the page).

`feed` follows one chat (`/api/chats/ID/events`); `shared_feed` follows several in one connection
(`/api/feed`, what the pages of a browser share): its messages name their `sub`scription.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from anges.exceptions import StreamNotFound
from anges.store.events import RETURN_TO_PARENT_EVENT_TYPES, Event, child_reference, status_of
from anges.store.turns import reasoning_after, turn_reasoning
from anges.util.printable import as_drawn

from .render import Totals, step_view

BLOCK_KEY = re.compile(r"\d{1,9}(?:/\d{1,9}){0,15}")
MAX_BLOCKS = 500
"""Open child blocks a page may ask to resume."""
STEPS_PER_MESSAGE = 200
"""A long history goes out in messages of this many steps, so the page can show them in a few batches."""
LIVE_CHARS = 4000
"""The end of a streaming reply's analysis and reasoning that a `live` message carries."""
LIVE_ANSWER_CHARS = 16000
"""The end of a streaming answer (TASK_COMPLETE, AGENT_TEXT_RESPONSE, HELP_NEEDED) that a `live` message carries."""
MAX_WATCHES = 64
"""Chats one shared feed may follow."""
WATCH = re.compile(r"([A-Za-z0-9]{1,32})~([A-Za-z0-9_-]{1,64})~(\d{1,9})~([0-9/:,]{0,8000})")

Message = tuple[str, dict, int | None]
"""A feed message before it is sent: event name, data, and the SSE id (the chat's last step index) or None."""


class BadCursor(ValueError):
    """A `blocks` resume cursor that is not "KEY:INDEX,..."."""


def parse_blocks(text: str) -> dict[str, int]:
    """The `blocks` query parameter as {block key: next step index}."""
    blocks: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        key, _, index = item.partition(":")
        if not BLOCK_KEY.fullmatch(key) or not index.isdigit() or len(index) > 9:
            raise BadCursor(f"blocks must look like 7:12,7/3:4, not {item[:40]!r}")
        blocks[key] = int(index)
    if len(blocks) > MAX_BLOCKS:
        raise BadCursor(f"at most {MAX_BLOCKS} blocks can be resumed")
    return blocks


@dataclass
class Reader:
    """One stream the feed reads: the chat itself (block "") or one run of a child agent."""

    uid: str
    block: str
    next_index: int
    """The first step index not sent yet."""
    cursor: Any = None
    """Where reading the stream's records got to (the store's opaque cursor)."""
    title: str = ""
    cwd: str = ""
    stored: str = "new"
    reason: str = ""
    """Why the stream stopped, while its stored status is `interrupted` (its `task_interrupted` event's reason)."""
    done: bool = False
    shown: dict = field(default_factory=dict)
    """The last `child` message sent for this block."""
    totals: Totals | None = None
    """Steps, tokens and cost so far (kept for the chat only)."""
    live: dict | None = None
    """The streaming reply last sent for this block."""
    reasoning: str = ""
    """The reasoning of the turn read so far (a view shows each turn's once)."""


class ChatWatch:
    """One chat a feed follows: its steps, those of the child agents it runs, its streaming replies and its status.

    `poll()` gives what is new as (event, data, id) messages; `over` is set once the chat is gone or no run is
    active on it any more (its last message is then `gone` or `end`)."""

    def __init__(self, web, uid: str, next_index: int, open_blocks: dict[str, int]):
        self.web = web
        self.chat = Reader(uid, "", next_index, totals=Totals())
        self.children: list[Reader] = []
        self.open_blocks = open_blocks
        self.last_status: dict | None = None
        self.over = False

    def poll(self) -> Iterator[Message]:
        web, chat = self.web, self.chat
        active = web.runs.started_here(chat.uid) or web.store.is_running(chat.uid)  # looked at before reading
        try:
            records, chat.cursor = web.store.read_records(chat.uid, chat.cursor)
        except StreamNotFound:
            self.over = True
            yield "gone", {"uid": chat.uid}, None
            return
        yield from _steps(chat, records, self.children, self.open_blocks)  # each batch leaves as soon as it is made
        for child in self.children:  # the list grows while children of children turn up
            yield from _follow_child(web.store, child, self.children, self.open_blocks)
        yield from _live(web.runs.live(chat.uid), [chat, *self.children])
        totals = chat.totals.to_dict() if chat.totals is not None else {}
        status = {"uid": chat.uid, "title": chat.title, **shown_status(web, chat.uid, chat.stored, chat.reason),
                  **totals}
        if status != self.last_status:
            self.last_status = status
            yield "status", status, None
        # No run was active before this read, so it held every event of the last run: nothing more will come.
        if not active and not status["running"]:
            self.over = True
            yield "end", {"reason": "finished"}, None

    def resume(self) -> dict:
        """Where a new feed would go on from: the chat's next step index and that of each child block still open."""
        blocks = ",".join(f"{child.block}:{child.next_index}" for child in self.children if not child.done)
        return {"from": self.chat.next_index, "blocks": blocks}


def feed(web, uid: str, next_index: int, open_blocks: dict[str, int]) -> Iterator[str]:
    """The feed of chat `uid` from step `next_index`, resuming the child blocks in `open_blocks`."""
    return _serve(web, {"": ChatWatch(web, uid, next_index, open_blocks)})


def parse_watches(values: list[str]) -> dict[str, tuple[str, int, dict[str, int]]]:
    """The `watch` parameters of a shared feed ("SUB~CHAT~FROM~BLOCKS") as {sub: (chat id, from, open blocks)}."""
    if len(values) > MAX_WATCHES:
        raise BadCursor(f"a feed follows at most {MAX_WATCHES} chats")
    watches = {}
    for value in values:
        match = WATCH.fullmatch(value)
        if match is None:
            raise BadCursor(f"watch must look like SUB~CHAT~FROM~BLOCKS, not {value[:60]!r}")
        sub, uid, start, blocks = match.groups()
        watches[sub] = (uid, int(start), parse_blocks(blocks))
    return watches


def shared_feed(web, watches: dict[str, tuple[str, int, dict[str, int]]]) -> Iterator[str]:
    """One feed for several chats (every page of a browser): each message names its `sub`, and each `steps`
    message says where that chat would `resume`. Ends with an `end` of its own once none is left to follow."""
    return _serve(web, {sub: ChatWatch(web, uid, start, blocks) for sub, (uid, start, blocks) in watches.items()},
                  shared=True)


def _serve(web, watches: dict[str, ChatWatch], shared: bool = False) -> Iterator[str]:
    settings = web.config.web
    started = last_write = time.monotonic()
    yield "retry: 2000\n\n"
    while True:
        if not web.guard.logged_in():
            yield _sse("end", {"reason": "login"})
            return
        sent = False
        for sub, watch in list(watches.items()):
            for event, data, event_id in watch.poll():
                if shared:
                    data, event_id = {"sub": sub, **data}, None
                    if event == "steps":
                        data["resume"] = watch.resume()
                yield _sse(event, data, event_id)
                sent = True
            if watch.over:
                del watches[sub]
        if not watches:
            if shared:
                yield _sse("end", {"reason": "finished"})
            return
        now = time.monotonic()
        if sent:
            last_write = now
        elif now - last_write >= settings.heartbeat_seconds:
            yield ": heartbeat\n\n"
            last_write = now
        if web.sse_lifetime and now - started >= web.sse_lifetime:
            yield _sse("end", {"reason": "lifetime"})
            return
        time.sleep(settings.poll_seconds)


def shown_status(web, uid: str, stored: str, reason: str = "") -> dict:
    """The status shown for a chat, and why it stopped when it did: a stored "running" with no live run anywhere
    means the run died."""
    running = web.runs.started_here(uid) or (stored == "running" and web.store.is_running(uid))
    status = "running" if running else "interrupted" if stored == "running" else stored
    return {"status": status, "running": running, "reason": reason if status == stored == "interrupted" else ""}


def _live(replies: dict[str, dict], readers: list[Reader]) -> Iterator[Message]:
    """A `live` message for each block whose streaming reply grew since the last one."""
    for reader in readers:
        reply = replies.get(reader.uid)
        if reply is None or reply == reader.live or reader.done:
            continue
        reader.live = reply
        texts = {name: reply[name][-LIVE_CHARS:] for name in ("analysis", "reasoning")}
        yield "live", {"block": reader.block, "call": reply["call"], **texts,
                       "answer": reply["answer"][-LIVE_ANSWER_CHARS:], "answer_type": reply["answer_type"],
                       "output": as_drawn(reply.get("output", ""))[-LIVE_CHARS:]}, None


def _follow_child(store, reader: Reader, children: list[Reader], open_blocks: dict[str, int]) -> Iterator[Message]:
    if reader.done:
        return
    try:
        records, reader.cursor = store.read_records(reader.uid, reader.cursor)
    except StreamNotFound:
        reader.done = True
        yield "child", {"block": reader.block, "uid": reader.uid, "title": reader.title, "status": "deleted"}, None
        return
    yield from _steps(reader, records, children, open_blocks)
    shown = {"block": reader.block, "uid": reader.uid, "title": reader.title or reader.uid, "status": reader.stored}
    if shown != reader.shown:
        yield "child", shown, None
        reader.shown = shown


def _steps(reader: Reader, records: list[dict], children: list[Reader],
           open_blocks: dict[str, int]) -> Iterator[Message]:
    """The `steps` messages of new records of one stream; starts a reader for each child run they start."""
    steps: list[dict] = []
    for record in records:
        kind = record.get("kind")
        if kind == "header":  # the file starts (again, if it was rewritten): count from scratch
            reader.title, reader.stored = record.get("title") or reader.uid, "new"
            if reader.totals is not None:
                reader.totals = Totals()
        elif kind == "title":
            reader.title = record.get("title") or reader.title
        elif kind == "settings":
            reader.cwd = (record.get("agent_settings") or {}).get("cmd_init_dir") or reader.cwd
        elif kind == "event" and not reader.done:
            event = Event.from_record(record)
            index = record.get("index", 0)
            if status := status_of(event.type):
                reader.stored = status
                reader.reason = str(event.data.get("reason") or "") if event.type == "task_interrupted" else ""
            if reader.totals is not None:
                reader.totals.add(event)
            fresh = index >= reader.next_index
            reasoning = turn_reasoning(event, reader.reasoning)
            reader.reasoning = reasoning_after(event, reader.reasoning)
            if event.type == "child_agent_running":
                _start_child(reader, event, index, fresh, children, open_blocks)
            if not fresh:
                continue
            if event.type != "results_shrunk":  # the prompt's bookkeeping: nothing happened to show
                steps.append(step_view(event, index, reader.cwd, reasoning))
            reader.next_index = index + 1
            if reader.block and event.type in RETURN_TO_PARENT_EVENT_TYPES:
                reader.done = True  # a child block shows one run of the child: up to its answer
            if len(steps) == STEPS_PER_MESSAGE:
                yield _steps_message(reader, steps)
                steps = []
    if steps:
        yield _steps_message(reader, steps)


def _steps_message(reader: Reader, steps: list[dict]) -> Message:
    last = steps[-1]["index"] if not reader.block else None  # lets a plain EventSource resume (Last-Event-ID)
    return "steps", {"block": reader.block, "steps": steps}, last


def _start_child(parent: Reader, event: Event, index: int, fresh: bool, children: list[Reader],
                 open_blocks: dict[str, int]) -> None:
    """Follow the child run a `child_agent_running` step starts: from its start if the page has not seen the
    step yet, from where the page is if it still shows the block open, else not at all (it ended)."""
    child_uid, start = child_reference(event)
    block = f"{parent.block}/{index}" if parent.block else str(index)
    if child_uid is None or not (fresh or block in open_blocks):
        return
    children.append(Reader(child_uid, block, start if fresh else max(open_blocks[block], start)))


def _sse(event: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
