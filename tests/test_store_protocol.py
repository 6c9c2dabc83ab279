"""The `Store` protocol is all an agent tree needs: a run with a child agent on a store that keeps nothing on disk."""

import threading
from contextlib import contextmanager

from test_orchestrator import RoutedModel, child, complete, orchestrator, shell

from anges.exceptions import StreamBusy, StreamNotFound
from anges.store import records
from anges.store.event_store import Store
from anges.store.events import EventStream


class MemoryStore:
    """Streams kept in this process: each one's records in a list, a reader's cursor an index into it."""

    def __init__(self):
        self.log: dict[str, list[dict]] = {}
        self.written: dict[str, tuple[EventStream, records.Written]] = {}
        self.locks: dict[str, threading.Lock] = {}
        self.stops: set[str] = set()

    def sync(self, stream):
        known = self.written.get(stream.uid)
        if known is None or known[0] is not stream or known[1].must_rewrite(stream):
            self.log[stream.uid] = [records.header(stream)]
            self.written[stream.uid] = (stream, records.Written.of(EventStream(), 0, "new"))
            self.written[stream.uid][1].title = stream.title
        before = self.written[stream.uid][1].events
        new, _ = records.new_records(stream, self.written[stream.uid][1])
        self.log[stream.uid] += new
        return stream.events_list[before:]

    def load(self, uid):
        if uid not in self.log:
            raise StreamNotFound(uid)
        stream = records.build(enumerate(self.log[uid], 1), uid, "memory").stream
        self.written[uid] = (stream, records.Written.of(stream, len(stream.events_list), "new"))
        return stream

    @contextmanager
    def run_lock(self, uid):
        lock = self.locks.setdefault(uid, threading.Lock())
        if not lock.acquire(blocking=False):
            raise StreamBusy(uid)
        try:
            yield
        finally:
            lock.release()

    def stop_requested(self, uid):
        return uid in self.stops

    def clear_stop(self, uid):
        self.stops.discard(uid)

    def read_records(self, uid, cursor=None):
        log = self.log[uid]
        return log[cursor or 0:], len(log)


def test_an_orchestrator_and_its_child_run_on_a_store_that_writes_no_file(tmp_path, anges_home):
    store: Store = MemoryStore()
    model = RoutedModel(orchestrator=[reply_delegating(), complete("all done")],
                        task_executor=[shell("echo hi > made.txt"), complete("made it")])
    agent = orchestrator(tmp_path, model, store=store)

    stream = agent.run_with_new_request("make a file")

    assert (tmp_path / "made.txt").read_text() == "hi\n"
    assert not (anges_home / "data" / "event_streams").exists(), "nothing went to the default store"
    flat = stream.get_event_list_including_children_events(load=store.load)
    assert [e.type for e in flat] == ["new_request", "new_child_agent", "child_agent_running",
                                      "new_request_from_parent", "action", "task_completion",
                                      "child_agent_task_completion", "task_completion"]
    assert "COMMAND: echo hi > made.txt" in flat[4].content  # rebuilt from the facts, as from a file
    records_read, cursor = store.read_records(stream.uid)
    assert [r["kind"] for r in records_read][0] == "header"
    assert store.read_records(stream.uid, cursor) == ([], cursor)
    assert store.load(stream.uid).to_dict() == stream.to_dict()


def reply_delegating():
    return {"analysis": "", "reasoning": "delegate", "actions": [child("NEW_CHILD_AGENT TASK_EXECUTOR", "make it")]}
