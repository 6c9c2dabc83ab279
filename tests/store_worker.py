"""A child process for the store's crash and concurrency tests: `python store_worker.py MODE ROOT UID ...`."""

import hashlib
import os
import sys
import time

from anges.exceptions import StreamNotFound
from anges.store.event_store import EventStore
from anges.store.events import Event, EventStream


def checked_event(content: str, **facts) -> Event:
    """An event whose data carries the checksum of its content."""
    return Event("action", content=content, data={"sha": hashlib.sha256(content.encode()).hexdigest(), **facts})


def verify(event: Event) -> bool:
    """True when the event's content matches its checksum."""
    return event.data.get("sha") == hashlib.sha256(event.content.encode()).hexdigest()


def crash_loop(store: EventStore, uid: str) -> None:
    """Append checksummed events with increasing `seq` until killed; some are ~50 KB."""
    try:
        stream = store.load(uid)
    except StreamNotFound:
        stream = EventStream(uid=uid)
    seq = stream.events_list[-1].data["seq"] if stream.events_list else 0
    ready = False
    while True:
        seq += 1
        size = 25_000 if seq % 5 == 0 else 60
        stream.add_event(checked_event(os.urandom(size).hex(), seq=seq))
        store.sync(stream)
        if not ready:
            print("ready", flush=True)
            ready = True


def write(store: EventStore, uid: str, writer: str, count: int, go: str) -> None:
    """Wait for the `go` file, then append `count` events, syncing each."""
    stream = store.load(uid)
    while not os.path.exists(go):
        time.sleep(0.001)
    for seq in range(count):
        stream.add_event(checked_event(f"{writer}-{seq}-" + "x" * (seq % 300), writer=writer, seq=seq))
        store.sync(stream)


def read(store: EventStore, uid: str, stop: str) -> None:
    """Load and tail the stream until the `stop` file appears; exit 1 on any inconsistency."""
    loads = 0
    cursor, next_index = None, 0
    while not os.path.exists(stop) or loads == 0:
        stream = store.load(uid)
        for writer in ("a", "b"):
            seqs = [e.data["seq"] for e in stream.events_list if e.data.get("writer") == writer]
            assert seqs == list(range(len(seqs))), f"writer {writer}: {seqs[:20]}"
        assert all(verify(e) for e in stream.events_list if "sha" in e.data)
        records, cursor = store.read_records(uid, cursor)
        for record in records:
            if record["kind"] == "event":
                assert record["index"] == next_index, (record["index"], next_index)
                next_index += 1
        loads += 1
    print(f"loads {loads} events {next_index}", flush=True)


def hold(store: EventStore, uid: str) -> None:
    """Take the run lock of `uid` and keep it until killed."""
    with store.run_lock(uid):
        print("locked", flush=True)
        time.sleep(60)


def main() -> None:
    mode, root, uid, *rest = sys.argv[1:]
    store = EventStore(root)
    if mode == "crash":
        crash_loop(store, uid)
    elif mode == "write":
        write(store, uid, rest[0], int(rest[1]), rest[2])
    elif mode == "read":
        read(store, uid, rest[0])
    elif mode == "hold":
        hold(store, uid)


if __name__ == "__main__":
    main()
