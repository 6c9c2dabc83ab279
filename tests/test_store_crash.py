"""kill -9 and concurrent writers: every stream stays loadable, appendable and intact."""

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from store_worker import checked_event, verify

from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream

WORKER = Path(__file__).with_name("store_worker.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WORKER.parents[1]), str(WORKER.parent)])}
KILLS = 24

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and flock")


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, text=True, env=ENV)


def event_indices(store: EventStore, uid: str) -> list[int]:
    return [r["index"] for r in store.read_records(uid)[0] if r["kind"] == "event"]


def test_kill_9_at_random_moments_never_loses_more_than_the_event_being_written(store_root):
    """A child appends checksummed events (some ~50 KB) to one stream and is SIGKILLed, again and again."""
    store = EventStore(store_root)
    rng = random.Random(os.getpid())
    torn_tails = 0
    for _ in range(KILLS):
        child = start("crash", str(store.root), "crashy")
        assert child.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0, 0.03))
        child.kill()
        child.wait()
        torn_tails += not (store.root / "crashy.jsonl").read_bytes().endswith(b"\n")

        stream = store.load("crashy")
        seqs = [e.data["seq"] for e in stream.events_list]
        assert seqs == list(range(1, len(seqs) + 1))
        assert all(verify(e) for e in stream.events_list)
        stream.add_event(checked_event("appended by the test", seq=len(seqs) + 1))
        assert len(store.sync(stream)) == 1
        assert store.load("crashy").events_list[-1].content == "appended by the test"
        assert event_indices(store, "crashy") == list(range(len(seqs) + 1))
    print(f"{KILLS} kills, {torn_tails} left a torn last line, {len(seqs) + 1} events")


def test_two_writers_and_a_reader_at_once(store_root):
    """Two processes append 500 events each to one stream while a third loads and tails it."""
    store = EventStore(store_root)
    first = EventStream(uid="busy")
    first.add_event(Event("new_request", content="start"))
    store.sync(first)
    go, stop = store_root / "go", store_root / "stop"
    writers = [start("write", str(store.root), "busy", name, "500", str(go)) for name in ("a", "b")]
    reader = start("read", str(store.root), "busy", str(stop))
    go.touch()
    try:
        assert [w.wait(timeout=60) for w in writers] == [0, 0]
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0, out
    print(out.strip())

    events = store.load("busy").events_list[1:]
    assert len(events) == 1000 and all(verify(e) for e in events)
    for name in ("a", "b"):
        assert [e.data["seq"] for e in events if e.data["writer"] == name] == list(range(500))
    assert event_indices(store, "busy") == list(range(1001))


@pytest.fixture
def store_root(tmp_path):
    return tmp_path / "streams"
