"""EventStore: format, append-only writes, meta files, ids, permissions, import/export, tailing, run locks."""

import json
import logging
import os
import signal
import stat
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import anges.store.records
from anges.exceptions import AngesError, InvalidStreamId, StreamBusy, StreamExists, StreamNotFound
from anges.store.event_store import FORMAT, EventStore, StreamInfo
from anges.store.events import Event, EventStream, EventSummary
from anges.store.results import ShellRun

WORKER = Path(__file__).with_name("store_worker.py")

# A stream as anges 0.1.x wrote it: events without `data`, a summary, settings, an ancestor chain.
LEGACY = {
    "events_list": [
        {
            "type": "new_request",
            "reasoning": "",
            "content": "Count the Python files under src/ and tell me the total.",
            "title": None,
            "message": "Count the Python files under src/ and tell me the total.",
            "analysis": "",
            "est_input_token": 0,
            "est_output_token": 0,
            "created_at": "2025-05-03T10:15:02.123456",
        },
        {
            "type": "action",
            "reasoning": "I will use find and wc to count the files.",
            "content": "find src -name '*.py' | wc -l\n\n######### STDOUT #########\n42\n",
            "title": None,
            "message": "",
            "analysis": "The user wants a number; one command is enough.",
            "est_input_token": 1834,
            "est_output_token": 96,
            "created_at": "2025-05-03T10:15:05.000017",
        },
        {
            "type": "child_agent_running",
            "reasoning": '{"agent_id": "Chld0001", "starting_from": 0}',
            "content": "",
            "title": None,
            "message": "",
            "analysis": "",
            "est_input_token": 0,
            "est_output_token": 0,
            "created_at": "2025-05-03T10:15:07.500000",
        },
        {
            "type": "task_completion",
            "reasoning": "The count is known.",
            "content": "There are 42 Python files under src/.",
            "title": "Done",
            "message": "There are 42 Python files under src/.",
            "analysis": "",
            "est_input_token": 2011,
            "est_output_token": 40,
            "created_at": "2025-05-03T10:15:09.999999",
        },
    ],
    "event_summaries_list": [
        {
            "type": "summary",
            "start_event_idx": 1,
            "end_event_idx": 2,
            "summary": "Counted the files with find | wc -l: 42.",
            "created_at": "2025-05-03T10:15:08.250000",
        }
    ],
    "title": "Count Python files",
    "created_at": "2025-05-03T10:15:01.987654",
    "uid": "Xk3pQ9aZ",
    "parent_event_stream_uids": ["Root0001", "Orch0002"],
    "agent_type": "task_executor",
    "agent_settings": {
        "cmd_init_dir": "/home/user/project",
        "model": "agent_default",
        "prefix_cmd": "",
        "agent_type": "task_executor",
        "notes": ["Prefer ripgrep."],
    },
}
# What anges 0.1.x's EventStream.from_dict reads with data[...] (a missing key fails there).
LEGACY_REQUIRED = {
    "stream": {"title", "uid", "created_at", "events_list", "event_summaries_list"},
    "event": {"type", "reasoning", "content", "title", "created_at"},
    "summary": {"type", "start_event_idx", "end_event_idx", "summary", "created_at"},
}
BAD_IDS = ["../x", "a/b", "..", "/etc/passwd", "", "a\x00b", "a" * 65, "x.y", 42, None]


@pytest.fixture
def store():
    return EventStore()


def new_stream(events=3, **kwargs) -> EventStream:
    stream = EventStream(**kwargs)
    for i in range(events):
        stream.add_event(Event("action", reasoning=f"step {i}", content=f"echo {i}", data={"exit_code": 0}))
    return stream


def lines(store: EventStore, uid: str) -> list[dict]:
    return [json.loads(line) for line in (store.root / f"{uid}.jsonl").read_bytes().splitlines()]


def file_id(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


# --- format and appending -----------------------------------------------------------------------------


def test_default_root_is_under_anges_home_and_created_only_on_write(anges_home, store):
    assert store.root == anges_home / "data" / "event_streams"
    assert store.list() == [] and not store.exists("abc")
    assert not (anges_home / "data").exists()


def test_sync_writes_a_versioned_header_then_one_record_per_line(store):
    stream = new_stream(2, title="Hello", parent_event_stream_uids=["P1"], agent_type="default")
    stream.update_settings({"model": "openai", "cmd_init_dir": "/tmp"})
    assert store.sync(stream) == stream.events_list
    header, settings, first, second = lines(store, stream.uid)
    assert header == {
        "kind": "header",
        "format": FORMAT,
        "uid": stream.uid,
        "created_at": stream.created_at.isoformat(),
        "parent_event_stream_uids": ["P1"],
        "agent_type": "default",
        "title": "Hello",
    }
    assert settings == {
        "kind": "settings",
        "agent_settings": {"model": "openai", "cmd_init_dir": "/tmp"},
        "agent_type": "default",
    }
    # Fields at their defaults (empty analysis and message, no title, no token estimates) are left out.
    assert first == {"kind": "event", "index": 0, "type": "action", "reasoning": "step 0", "content": "echo 0",
                     "created_at": stream.events_list[0].created_at.isoformat(), "data": {"exit_code": 0}}
    assert second["index"] == 1


def test_sync_persists_only_what_is_new(store):
    stream = new_stream(2)
    store.sync(stream)
    assert store.sync(stream) == []
    stream.add_event(Event("action", content="ls"))
    stream.event_summaries_list.append(EventSummary("summary", 1, 2, "did things"))
    stream.title = "Renamed"
    stream.update_settings({"notes": ["be brief"]})
    assert store.sync(stream) == [stream.events_list[2]]
    kinds = [(r["kind"], r.get("index")) for r in lines(store, stream.uid)]
    assert kinds == [
        ("header", None),
        ("event", 0),
        ("event", 1),
        ("title", None),
        ("settings", None),
        ("event", 2),
        ("summary", None),
    ]
    assert store.sync(stream) == []


def test_append_writes_only_the_new_line_and_leaves_earlier_bytes_alone(store):
    stream = new_stream(5)
    store.sync(stream)
    path = store.root / f"{stream.uid}.jsonl"
    before = path.read_bytes()
    stream.add_event(Event("action", content="one more"))
    store.sync(stream)
    after = path.read_bytes()
    assert after.startswith(before)
    added = after[len(before) :]
    assert added.count(b"\n") == 1 and json.loads(added)["content"] == "one more"


def io_counters() -> dict[str, int]:
    text = Path("/proc/self/io").read_text()
    return {key: int(value) for key, value in (line.split(": ") for line in text.splitlines())}


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_append_io_is_the_same_for_a_10_and_a_10000_event_stream(store):
    def one_append_io(size: int) -> tuple[int, int]:
        stream = new_stream(size)
        store.save(stream)
        stream.add_event(Event("action", content="x" * 500))
        start = io_counters()
        store.sync(stream)
        end = io_counters()
        return end["wchar"] - start["wchar"], end["rchar"] - start["rchar"]

    small_write, small_read = one_append_io(10)
    large_write, large_read = one_append_io(10_000)
    assert small_write < 1000 and abs(large_write - small_write) <= 3  # the index has 3 more digits
    assert abs(large_read - small_read) <= 16


def test_load_round_trips_everything(store):
    stream = new_stream(3, title="T", parent_event_stream_uids=["A", "B"], agent_type="orchestrator")
    stream.events_list[1].data = {"exit_code": 2, "cost": 0.001, "usage": {
        "input_tokens": 10, "output_tokens": 3, "cached_tokens": 0, "estimated": False, "model_calls": 1}}
    stream.events_list[2].message = "ünïcode ✓ \ud800 lone surrogate"
    stream.event_summaries_list.append(EventSummary("summary", 1, 2, "s"))
    stream.update_settings({"model": "gemini", "mcp_config": {"servers": {"x": {"command": "y"}}}})
    store.sync(stream)
    loaded = EventStore().load(stream.uid)
    assert loaded.to_dict() == stream.to_dict()
    assert loaded.created_at == stream.created_at


def test_load_of_a_missing_stream_raises_stream_not_found(store):
    with pytest.raises(StreamNotFound):
        store.load("nope")
    with pytest.raises(StreamNotFound):
        store.read_records("nope")
    with pytest.raises(StreamNotFound):
        store.info("nope")


def test_streams_with_their_history_rewritten_in_memory_are_written_whole(store):
    stream = new_stream(4)
    store.sync(stream)
    del stream.events_list[1:3]
    store.sync(stream)
    assert [e.content for e in store.load(stream.uid).events_list] == ["echo 0", "echo 3"]


def test_an_unseen_stream_object_with_an_existing_id_replaces_the_stored_one(store):
    store.sync(new_stream(3, uid="same"))
    store.sync(new_stream(1, uid="same"))
    assert len(store.load("same").events_list) == 1


def test_appending_continues_after_another_store_replaced_the_file(store):
    stream = new_stream(2, uid="shared")
    store.sync(stream)
    other = EventStore(store.root)
    copy = other.load("shared")
    copy.add_event(Event("action", content="from the other"))
    other.save(copy)
    stream.add_event(Event("action", content="mine"))
    store.sync(stream)
    records, _ = store.read_records("shared")
    events = [r for r in records if r["kind"] == "event"]
    assert [e["content"] for e in events] == ["echo 0", "echo 1", "from the other", "mine"]
    assert [e["index"] for e in events] == [0, 1, 2, 3]


def test_a_stream_deleted_under_a_writer_is_written_again_on_its_next_sync(store):
    stream = new_stream(2)
    store.sync(stream)
    store.delete(stream.uid)
    stream.add_event(Event("action", content="later"))
    assert len(store.sync(stream)) == 3
    assert len(store.load(stream.uid).events_list) == 3


def test_a_newer_format_is_refused_with_a_clear_error(store):
    store.sync(new_stream(1, uid="future"))
    path = store.root / "future.jsonl"
    path.write_text(json.dumps({"kind": "header", "format": 99, "uid": "future"}) + "\n")
    with pytest.raises(AngesError, match="format 99"):
        store.load("future")


# --- status and meta files ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "types, status",
    [
        ([], "new"),
        (["new_request"], "running"),
        (["new_request", "action", "edit_file"], "running"),
        (["new_request", "task_completion"], "completed"),
        (["new_request", "agent_requested_help"], "help_needed"),
        (["new_request", "agent_text_response"], "answered"),
        (["new_request", "action", "task_interrupted"], "interrupted"),
        (["new_request", "task_completion", "follow_up_request"], "running"),
        (["new_request_from_parent", "child_agent_task_completion"], "running"),
        (["follow_up_request_from_parent", "agent_text_response", "action"], "answered"),
    ],
)
def test_status_follows_the_events(store, types, status):
    stream = EventStream()
    store.sync(stream)
    with store.run_lock(stream.uid):  # as during a run
        for event_type in types:  # one sync per event, as an agent does
            stream.add_event(Event(event_type))
            store.sync(stream)
        assert store.info(stream.uid).status == status
    stream_in_one_go = EventStream()
    stream_in_one_go.events_list = [Event(t) for t in types]
    store.save(stream_in_one_go)
    with store.run_lock(stream_in_one_go.uid):
        assert store.info(stream_in_one_go.uid).status == status


def test_meta_is_rewritten_only_when_title_status_or_settings_change(store):
    stream = new_stream(0, title="t")
    stream.add_event(Event("new_request", content="do it"))
    store.sync(stream)
    meta = store.root / f"{stream.uid}.meta.json"
    before = file_id(meta)
    for i in range(5):
        stream.add_event(Event("action", content=f"step {i}"))
        stream.event_summaries_list.append(EventSummary("summary", 1, i + 1, "so far"))
        store.sync(stream)
    assert file_id(meta) == before
    for change in (
        lambda: setattr(stream, "title", "new title"),
        lambda: stream.update_settings({"model": "m"}),
        lambda: stream.add_event(Event("task_completion", content="done")),
    ):
        change()
        store.sync(stream)
        assert file_id(meta) != before
        before = file_id(meta)
    assert json.loads(meta.read_text()) == {
        "format": FORMAT,
        "uid": stream.uid,
        "title": "new title",
        "status": "completed",
        "parent_event_stream_uids": [],
        "agent_type": "",
        "created_at": stream.created_at.isoformat(),
    }


def test_the_meta_file_keeps_why_a_stream_stopped_and_the_listing_shows_it(store):
    stream = new_stream(0, title="t")
    stream.add_event(Event("new_request", content="do it"))
    stream.add_event(Event("task_interrupted", content="out of time", data={"reason": "timeout"}))
    store.sync(stream)
    assert (store.info(stream.uid).status, store.info(stream.uid).reason) == ("interrupted", "timeout")
    stream.add_event(Event("follow_up_request", content="go on"))
    stream.add_event(Event("task_interrupted", content="out of steps", data={"reason": "event_limit"}))
    store.sync(stream)  # interrupted before and after: the new reason is written all the same
    assert store.info(stream.uid).reason == "event_limit"
    assert store.list()[0].to_dict()["reason"] == "event_limit"
    stream.add_event(Event("follow_up_request", content="again"))
    stream.add_event(Event("task_completion", content="done"))
    store.sync(stream)
    assert (store.info(stream.uid).status, store.info(stream.uid).reason) == ("completed", "")


@pytest.mark.parametrize("damage", ["missing", "corrupt", "other uid", "empty"])
def test_a_missing_or_corrupt_meta_file_is_rebuilt_from_the_stream_file(store, damage):
    stream = new_stream(1, title="Keep me", parent_event_stream_uids=["P"], agent_type="task_analyzer")
    stream.add_event(Event("agent_requested_help", message="which one?"))
    store.sync(stream)
    meta = store.root / f"{stream.uid}.meta.json"
    good = json.loads(meta.read_text())
    if damage == "missing":
        meta.unlink()
    elif damage == "corrupt":
        meta.write_text('{"format": 1, "ti')
    elif damage == "other uid":
        meta.write_text(json.dumps({**good, "uid": "someone"}))
    else:
        meta.write_text("")
    [info] = store.list()
    assert (info.title, info.status, info.parent_ids, info.agent_type) == (
        "Keep me",
        "help_needed",
        ["P"],
        "task_analyzer",
    )
    assert json.loads(meta.read_text()) == good


def test_list_is_newest_first_and_reads_no_events(store, monkeypatch):
    uids = []
    for i in range(3):
        stream = new_stream(2, title=f"s{i}")
        store.sync(stream)
        os.utime(store.root / f"{stream.uid}.jsonl", (1_700_000_000 + i, 1_700_000_000 + i))
        uids.append(stream.uid)

    def forbidden(*args, **kwargs):
        raise AssertionError("list() parsed events")

    monkeypatch.setattr(anges.store.records, "build", forbidden)
    monkeypatch.setattr(anges.store.records, "records", forbidden)
    infos = store.list()
    assert [i.uid for i in infos] == uids[::-1]
    assert infos[0].updated_at == datetime.fromtimestamp(1_700_000_002)
    assert isinstance(infos[0], StreamInfo) and infos[0].to_dict()["title"] == "s2"


def test_list_skips_a_corrupt_stream_file_with_a_warning(store, caplog):
    store.sync(new_stream(1, uid="good"))
    (store.root / "bad.jsonl").write_text("this is not a stream\n")
    with caplog.at_level(logging.WARNING):
        assert [i.uid for i in store.list()] == ["good"]
    assert "bad.jsonl" in caplog.text


def test_info_and_exists(store):
    stream = new_stream(1, title="Info", agent_type="default")
    store.sync(stream)
    info = store.info(stream.uid)
    assert (info.uid, info.title, info.status, info.created_at) == (stream.uid, "Info", "new", stream.created_at)
    assert store.exists(stream.uid) and not store.exists("other")


# --- children and delete ---------------------------------------------------------------------------------


def family(store: EventStore) -> None:
    """root -> child1 -> grandchild, root -> child2, plus an unrelated stream; ancestor chains as in 0.1.x."""
    for uid, parents in [
        ("root", []),
        ("child1", ["root"]),
        ("child2", ["root"]),
        ("grandchild", ["root", "child1"]),
        ("other", []),
    ]:
        store.sync(new_stream(1, uid=uid, parent_event_stream_uids=parents))


def test_children_are_the_direct_children(store):
    family(store)
    assert sorted(i.uid for i in store.children("root")) == ["child1", "child2"]
    assert [i.uid for i in store.children("child1")] == ["grandchild"]
    assert store.children("grandchild") == []
    with pytest.raises(StreamNotFound):
        store.children("ghost")


def test_delete_removes_the_stream_its_descendants_and_all_side_files(store):
    family(store)
    with store.run_lock("child2"):
        pass  # leaves a .lock side file behind
    (store.root / ".child1.jsonl.Ab12Cd34.tmp").write_text("left by a crashed save")
    (store.root / ".other.meta.json.Ab12Cd34.tmp").write_text("not ours to remove")
    removed = store.delete("root")
    assert removed[0] == "root" and sorted(removed) == ["child1", "child2", "grandchild", "root"]
    assert sorted(p.name for p in store.root.iterdir()) == [
        ".other.meta.json.Ab12Cd34.tmp",
        "other.jsonl",
        "other.meta.json",
    ]
    with pytest.raises(StreamNotFound):
        store.delete("root")


def test_delete_refuses_while_a_run_is_active_on_a_descendant(store):
    family(store)
    with store.run_lock("grandchild"), pytest.raises(StreamBusy):
        store.delete("root")
    assert store.exists("root") and store.exists("grandchild")


# --- ids and permissions ------------------------------------------------------------------------------


def with_uid(stream: EventStream, uid) -> EventStream:
    stream.uid = uid  # bypass the constructor, which replaces a falsy id with a fresh one
    return stream


CALLS = {
    "load": lambda s, uid: s.load(uid),
    "exists": lambda s, uid: s.exists(uid),
    "info": lambda s, uid: s.info(uid),
    "children": lambda s, uid: s.children(uid),
    "delete": lambda s, uid: s.delete(uid),
    "export": lambda s, uid: s.export(uid),
    "read_records": lambda s, uid: s.read_records(uid),
    "run_lock": lambda s, uid: s.run_lock(uid).__enter__(),
    "is_running": lambda s, uid: s.is_running(uid),
    "sync": lambda s, uid: s.sync(with_uid(EventStream(), uid)),
    "save": lambda s, uid: s.save(with_uid(EventStream(), uid)),
    "import_dict": lambda s, uid: s.import_dict({**LEGACY, "uid": uid}),
}


@pytest.mark.parametrize("method", sorted(CALLS))
def test_crafted_ids_are_refused_and_touch_nothing(anges_home, store, method):
    store.sync(new_stream(1, uid="existing"))
    before = sorted(str(p) for p in anges_home.rglob("*"))
    for bad in BAD_IDS:
        if bad is None and method == "import_dict":
            continue  # a 0.1.x file without an id gets a fresh one
        with pytest.raises(InvalidStreamId):
            CALLS[method](store, bad)
    assert sorted(str(p) for p in anges_home.rglob("*")) == before
    assert not (store.root.parent / "x.jsonl").exists()


def test_a_symlink_leading_out_of_root_is_refused(tmp_path, store):
    store.sync(new_stream(1, uid="inside"))
    outside = tmp_path / "outside.jsonl"
    outside.write_text("secret\n")
    (store.root / "evil.jsonl").symlink_to(outside)
    for call in (
        lambda: store.load("evil"),
        lambda: store.sync(new_stream(1, uid="evil")),
        lambda: store.read_records("evil"),
    ):
        with pytest.raises(InvalidStreamId):
            call()
    assert outside.read_text() == "secret\n"
    (store.root / "alias.jsonl").symlink_to(store.root / "inside.jsonl")
    with pytest.raises(InvalidStreamId):
        store.load("alias")
    assert [i.uid for i in store.list()] == ["inside"]


def test_directories_are_0700_and_files_0600(anges_home, store):
    old = os.umask(0o002)
    try:
        stream = new_stream(1)
        store.sync(stream)
        with store.run_lock(stream.uid):
            pass
    finally:
        os.umask(old)
    for directory in (anges_home / "data", store.root):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for suffix in (".jsonl", ".meta.json", ".lock"):
        assert stat.S_IMODE((store.root / f"{stream.uid}{suffix}").stat().st_mode) == 0o600


# --- crash leftovers ----------------------------------------------------------------------------------


def test_a_torn_last_line_is_skipped_then_ended_before_the_next_append(store, caplog):
    stream = new_stream(3, uid="torn")
    store.sync(stream)
    path = store.root / "torn.jsonl"
    with open(path, "ab") as file:  # what a crash in the middle of one write leaves
        file.write(b'{"kind":"event","index":3,"type":"action","content":"half of it')
    with caplog.at_level(logging.WARNING):
        loaded = store.load("torn")
    assert len(loaded.events_list) == 3 and "incomplete last line" in caplog.text
    records, cursor = store.read_records("torn")  # the torn line is not returned, nor will it be
    assert [r["index"] for r in records if r["kind"] == "event"] == [0, 1, 2]
    assert store.read_records("torn", cursor) == ([], cursor)
    loaded.add_event(Event("action", content="after the crash"))
    store.sync(loaded)
    assert path.read_bytes().count(b"half of it\n{") == 1
    again = store.load("torn")
    assert [e.content for e in again.events_list][-2:] == ["echo 2", "after the crash"]
    events = [r for r in store.read_records("torn")[0] if r["kind"] == "event"]
    assert [r["index"] for r in events] == [0, 1, 2, 3]


def test_unreadable_lines_in_the_middle_are_skipped(store, caplog):
    stream = new_stream(2, uid="mid")
    store.sync(stream)
    with open(store.root / "mid.jsonl", "ab") as file:
        file.write(b'{"kind":"event","ind\n[1, 2]\n\n')
    stream.add_event(Event("action", content="last"))
    store.sync(stream)
    with caplog.at_level(logging.WARNING):
        assert [e.content for e in store.load("mid").events_list] == ["echo 0", "echo 1", "last"]
    assert "line 4" in caplog.text


WRONG_TYPES = [
    {"kind": "event", "index": 2, "type": "action", "data": [1, 2]},
    {"kind": "event", "index": 3, "type": "action", "message": 5},
    {"kind": "event", "index": 4, "type": "action", "est_input_token": "many"},
    {"kind": "summary", "type": "actions", "start_event_idx": "one", "end_event_idx": 2, "summary": "s"},
    {"kind": "title", "title": {"not": "a title"}},
    {"kind": "settings", "agent_settings": ["x"], "agent_type": "default"},
]


def test_records_whose_fields_have_the_wrong_type_are_skipped_and_the_rest_loads(store, caplog):
    stream = new_stream(2, uid="typed", title="Typed")
    store.sync(stream)
    path = store.root / "typed.jsonl"
    with open(path, "ab") as file:
        file.write(b"".join(json.dumps(record).encode() + b"\n" for record in WRONG_TYPES))
    stream.add_event(Event("task_completion", content="still here"))
    store.sync(stream)
    with caplog.at_level(logging.WARNING):
        loaded = store.load("typed")
    assert [e.content for e in loaded.events_list] == ["echo 0", "echo 1", "still here"]
    assert loaded.title == "Typed" and loaded.event_summaries_list == []
    for line in range(4, 4 + len(WRONG_TYPES)):  # after the header and two events
        assert f"line {line}:" in caplog.text
    assert store.info("typed").status == "completed"
    indexes = [r["index"] for r in store.read_records("typed")[0] if r["kind"] == "event"]
    assert indexes == [0, 1, 5]  # the skipped events kept their numbers: the next event's index is unique
    loaded.add_event(Event("action", content="more"))
    store.sync(loaded)
    assert [r["index"] for r in store.read_records("typed")[0] if r["kind"] == "event"][-1] == 6


# --- tailing --------------------------------------------------------------------------------------------


def test_read_records_tails_complete_lines_from_an_offset(store):
    stream = new_stream(2, uid="tail", title="Tail")
    store.sync(stream)
    records, offset = store.read_records("tail")
    assert [r["kind"] for r in records] == ["header", "event", "event"]
    assert [r.get("index") for r in records] == [None, 0, 1]
    assert store.read_records("tail", offset) == ([], offset)
    stream.add_event(Event("task_completion", content="done"))
    stream.title = "Renamed"
    store.sync(stream)
    records, offset = store.read_records("tail", offset)
    assert [(r["kind"], r.get("index"), r.get("title")) for r in records] == [
        ("title", None, "Renamed"),
        ("event", 2, None),
    ]
    with open(store.root / "tail.jsonl", "ab") as file:
        file.write(b'{"kind":"ev')  # a record being written: not returned yet
    assert store.read_records("tail", offset) == ([], offset)
    with pytest.raises(ValueError):
        store.read_records("tail", -1)


def test_read_records_starts_over_with_the_header_when_the_file_was_replaced(store):
    stream = new_stream(20, uid="replaced")
    store.sync(stream)
    _, cursor = store.read_records("replaced")
    store.save(new_stream(1, uid="replaced"))
    records, new_cursor = store.read_records("replaced", cursor)
    assert records[0]["kind"] == "header" and len(records) == 2
    assert store.read_records("replaced", new_cursor) == ([], new_cursor)


# --- run lock --------------------------------------------------------------------------------------------


def test_run_lock_is_exclusive_and_released_on_exit(store):
    assert not store.is_running("job")
    with store.run_lock("job"):
        assert store.is_running("job")
        with pytest.raises(StreamBusy), store.run_lock("job"):
            pass
    assert not store.is_running("job")
    with store.run_lock("job"):
        pass


def test_run_lock_is_released_when_its_holder_is_killed(store):
    holder = subprocess.Popen(
        [sys.executable, str(WORKER), "hold", str(store.root), "job"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(anges.store.event_store.__file__).parents[1])},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert store.is_running("job")
        with pytest.raises(StreamBusy), store.run_lock("job"):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not store.is_running("job")
    with store.run_lock("job"):
        assert store.is_running("job")


# --- import and export -----------------------------------------------------------------------------------


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data, indent=2))
    return path


def test_a_0_1_stream_is_imported_resumed_and_exported_with_every_field(tmp_path, store):
    stream = store.import_file(write_json(tmp_path / "Xk3pQ9aZ.json", LEGACY))
    assert stream.uid == "Xk3pQ9aZ"
    info = store.info("Xk3pQ9aZ")
    assert (info.title, info.status, info.parent_ids) == ("Count Python files", "completed", ["Root0001", "Orch0002"])
    resumed = store.load("Xk3pQ9aZ")
    resumed.add_event(Event("follow_up_request", content="And tests/?"))
    resumed.add_event(Event("agent_text_response", message="12 more.", data={"model": "m"}))
    assert len(store.sync(resumed)) == 2
    assert store.info("Xk3pQ9aZ").status == "answered"

    exported = store.export("Xk3pQ9aZ")
    assert LEGACY_REQUIRED["stream"] <= exported.keys()
    for key in LEGACY.keys() - {"events_list"}:
        assert exported[key] == LEGACY[key], key
    for original, event in zip(LEGACY["events_list"], exported["events_list"]):
        assert LEGACY_REQUIRED["event"] <= event.keys()
        assert {k: event[k] for k in original} == original
        datetime.fromisoformat(event["created_at"])
    assert [e["type"] for e in exported["events_list"][4:]] == ["follow_up_request", "agent_text_response"]
    for summary in exported["event_summaries_list"]:
        assert LEGACY_REQUIRED["summary"] <= summary.keys()


def test_an_imported_stream_is_dated_by_its_last_event_not_by_the_import(store):
    stream = store.import_dict(LEGACY)
    last = stream.events_list[-1].created_at
    assert last.year == 2025
    assert abs((store.info(stream.uid).updated_at - last).total_seconds()) < 1
    assert [info.uid for info in store.list()] == [stream.uid]


def test_export_load_import_round_trip_is_lossless(tmp_path, store):
    store.import_dict(LEGACY)
    first = store.export("Xk3pQ9aZ")
    again = EventStore(tmp_path / "elsewhere").import_file(write_json(tmp_path / "export.json", first))
    assert again.to_dict() == first
    assert EventStream.from_dict(first).to_dict() == first


def test_import_refuses_an_existing_id_unless_asked_for_a_new_one(tmp_path, store):
    path = write_json(tmp_path / "s.json", LEGACY)
    store.import_file(path)
    with pytest.raises(StreamExists, match=r"new id to keep both \(anges import --new-id, or new_id=True\)"):
        store.import_file(path)
    copy = store.import_file(path, new_id=True)
    assert copy.uid != "Xk3pQ9aZ" and store.exists(copy.uid)
    assert store.load(copy.uid).events_list == store.load("Xk3pQ9aZ").events_list
    assert len(store.list()) == 2


def test_import_accepts_a_copy_of_one_of_our_stream_files(tmp_path, store):
    stream = new_stream(2, uid="native", title="Native")
    store.sync(stream)
    copied = tmp_path / "native.jsonl"
    copied.write_bytes((store.root / "native.jsonl").read_bytes())
    imported = EventStore(tmp_path / "other").import_file(copied)
    assert imported.to_dict() == stream.to_dict()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not a JSON stream file"),
        (b"hello world", "not a JSON stream file"),
        (b"[1, 2, 3]", "not an anges event stream"),
        (b'{"name": "package.json", "version": "1.0"}', "not an anges event stream"),
        (b'{"events_list": [{"content": "no type"}]}', r"events_list\[0\] is not an event"),
        (b'{"events_list": [], "event_summaries_list": [{"summary": "x"}]}', "is not a summary"),
        (b'{"kind": "header", "format": 1, "uid": "../x"}\n', "invalid stream id"),
    ],
)
def test_import_refuses_files_that_are_not_streams(tmp_path, store, content, message):
    path = tmp_path / "input"
    path.write_bytes(content)
    with pytest.raises(AngesError, match=message):
        store.import_file(path)
    assert store.list() == []


def test_import_of_a_missing_file_says_so(tmp_path, store):
    with pytest.raises(AngesError, match="cannot read"):
        store.import_file(tmp_path / "missing.json")


def test_a_loaded_stream_finds_its_children_with_its_stores_loader(tmp_path):
    store = EventStore(tmp_path / "elsewhere")
    child = new_stream(2, uid="kid", parent_event_stream_uids=["mom"])
    child.add_event(Event("task_completion", content="child done"))
    store.sync(child)
    parent = new_stream(1, uid="mom")
    parent.add_event(Event("child_agent_running", reasoning='{"agent_id": "kid", "starting_from": 1}'))
    store.sync(parent)
    flat = store.load("mom").get_event_list_including_children_events(load=store.load)
    assert [e.content for e in flat] == ["echo 0", "", "echo 1", "child done"]


# --- format 2: a command's output stored once; format-1 files ---------------------------------------------------


def command_event(output: str, **facts) -> Event:
    """A command's event with the facts RUN_SHELL_CMD and the agent record."""
    from anges.safety.shell import CommandResult

    result = CommandResult("ls -l", 0, output, "", 0.01, stdout_bytes=len(output), stdout_lines=output.count("\n"))
    event = Event("action", reasoning="list them", data={
        **result.to_data(), "action_type": "RUN_SHELL_CMD", "stdout": output, "stderr": "", "sandbox": "workspace",
        "escalated": False, "result_format": 2, "input": {"command": "ls -l"}, **facts})
    event.content = ShellRun.of(event).text()
    return event


def test_a_commands_output_is_stored_once_and_every_reader_gets_the_text_the_model_read(store):
    output = "".join(f"line {n:04d}\n" for n in range(200))
    stream = EventStream(uid="cmds")
    stream.add_event(command_event(output))
    store.sync(stream)
    record = lines(store, "cmds")[-1]
    assert "content" not in record and record["data"]["stdout"] == output
    assert (store.root / "cmds.jsonl").read_bytes().count(b"line 0042") == 1
    expected = stream.events_list[0].content
    assert expected.startswith("COMMAND: ls -l\nEXIT CODE: 0\nSTDOUT:\nline 0000")
    assert store.load("cmds").events_list[0].content == expected
    assert store.export("cmds")["events_list"][0]["content"] == expected  # the 0.1.x form stays readable
    assert Event.from_dict(store.read_records("cmds")[0][-1]).content == expected


def test_a_content_that_is_not_its_facts_rendered_is_kept(store):
    stream = EventStream(uid="kept")
    stream.add_event(command_event("out\n"))
    stream.events_list[0].content += "\n(noted by a 0.1.x action)"
    store.sync(stream)
    assert lines(store, "kept")[-1]["content"].endswith("(noted by a 0.1.x action)")
    assert store.load("kept").to_dict() == stream.to_dict()


def test_a_format_1_file_is_read_as_it_is_and_rewritten_in_the_current_format_at_its_next_write(store):
    old = command_event("hello\n")
    header = {"kind": "header", "format": 1, "uid": "old1", "created_at": "2026-01-02T03:04:05",
              "parent_event_stream_uids": [], "agent_type": "default", "title": "From 0.2.0"}
    body = [header, {"kind": "event", "index": 0, **Event("new_request", content="hi").to_dict()},
            {"kind": "event", "index": 1, **old.to_dict()}]
    store.root.mkdir(parents=True)
    path = store.root / "old1.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in body))
    before = path.read_bytes()
    loaded = store.load("old1")
    assert [e.content for e in loaded.events_list] == ["hi", old.content]
    assert store.info("old1").title == "From 0.2.0" and path.read_bytes() == before  # reading writes nothing
    loaded.add_event(Event("task_completion", content="done"))
    store.sync(loaded)
    written = lines(store, "old1")
    assert written[0]["format"] == FORMAT == 3 and [r["index"] for r in written[1:]] == [0, 1, 2]
    assert "content" not in written[2]
    assert store.load("old1").to_dict() == loaded.to_dict()


def test_a_format_1_meta_file_still_serves_listings(store, monkeypatch):
    store.sync(new_stream(1, uid="meta1", title="Listed"))
    meta = store.root / "meta1.meta.json"
    meta.write_text(meta.read_text().replace(f'"format":{FORMAT}', '"format":1'))

    def forbidden(*args, **kwargs):
        raise AssertionError("the meta file was rebuilt")

    monkeypatch.setattr(anges.store.records, "build", forbidden)
    assert [info.title for info in store.list()] == ["Listed"]


def test_a_record_keeps_only_the_facts_that_differ_from_their_defaults(store):
    stream = EventStream(uid="small")
    stream.add_event(command_event("hi\n", approval={"request_id": None, "rule": "unsandboxed", "by": "auto",
                                                       "escalated": False},
                                   usage={"input_tokens": 900, "output_tokens": 20, "cached_tokens": 0,
                                          "estimated": False, "model_calls": 1}))
    store.sync(stream)
    record = lines(store, "small")[-1]
    assert set(record) == {"kind", "index", "type", "reasoning", "created_at", "data"}
    assert record["data"] == {"command": "ls -l", "exit_code": 0, "duration": 0.01, "stdout": "hi\n",
                              "stdout_bytes": 3, "stdout_lines": 1, "stderr_bytes": 0, "stderr_lines": 0,
                              "action_type": "RUN_SHELL_CMD", "sandbox": "workspace", "result_format": 2,
                              "approval": {"rule": "unsandboxed", "by": "auto"},
                              "usage": {"input_tokens": 900, "output_tokens": 20, "model_calls": 1}}
    loaded = EventStore().load("small").events_list[0]
    assert loaded == stream.events_list[0]  # every fact back, at its default
    assert loaded.data["timed_out"] is False and loaded.data["pid"] is None and loaded.data["stderr"] == ""
    assert loaded.data["approval"]["escalated"] is False and loaded.data["usage"]["cached_tokens"] == 0

    killed = command_event("", exit_code=None, interrupted=True, escalated=True, blocked="read-only file system")
    stream.add_event(killed)
    store.sync(stream)
    data = lines(store, "small")[-1]["data"]
    assert (data["interrupted"], data["escalated"], data["blocked"]) == (True, True, "read-only file system")
    assert "exit_code" not in data and EventStore().load("small").events_list[1] == killed


def test_a_format_2_file_reads_as_it_did_and_is_rewritten_in_format_3_at_its_next_write(store):
    event = command_event("hello\n")
    header = {"kind": "header", "format": 2, "uid": "old2", "created_at": "2026-01-02T03:04:05",
              "parent_event_stream_uids": [], "agent_type": "default", "title": "From 0.2.x"}
    stored = {"kind": "event", "index": 1, **event.to_dict()}
    del stored["content"]  # format 2 left out a content its facts rebuild, and stored every other field
    body = [header, {"kind": "event", "index": 0, **Event("new_request", content="hi").to_dict()}, stored]
    store.root.mkdir(parents=True)
    path = store.root / "old2.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in body))
    loaded = store.load("old2")
    assert loaded.events_list[1] == event and loaded.events_list[1].content == event.content
    loaded.add_event(Event("task_completion", content="done"))
    store.sync(loaded)
    written = lines(store, "old2")
    assert written[0]["format"] == 3 and "timed_out" not in written[2]["data"] and "title" not in written[2]
    assert store.load("old2").to_dict() == loaded.to_dict()
