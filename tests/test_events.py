"""Events and streams: ids, lossless round trips, the 0.1.x form, settings, the flattened view."""

import json
import re

from anges.events import (
    RETURN_TO_PARENT_EVENT_TYPES,
    Event,
    EventStream,
    EventSummary,
    child_reference,
    is_valid_id,
    new_id,
)
from anges.store import EventStore


def test_ids_are_unique_and_url_safe():
    ids = {new_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(re.fullmatch(r"[A-Za-z0-9]{12}", uid) and is_valid_id(uid) for uid in ids)
    for bad in ("", "../x", "a/b", "a.b", "x" * 65, None, 7, "a\x00b"):
        assert not is_valid_id(bad)


def test_round_trip_is_lossless_including_facts_and_summaries():
    stream = EventStream(title="t", parent_event_stream_uids=["p1"], agent_type="task_executor")
    stream.add_event(Event("new_request", content="do it", message="do it"))
    stream.add_event(Event("action", reasoning="r", content="out", analysis="a", est_input_token=5,
                           est_output_token=6, data={"exit_code": 0, "usage": {"input_tokens": 5}}))
    stream.event_summaries_list.append(EventSummary("actions", 2, 2, "ran it", data={"reason": "actions"}))
    stream.update_settings({"cmd_init_dir": "/w", "model": "openai", "not_a_setting": 1})
    restored = EventStream.from_dict(json.loads(json.dumps(stream.to_dict())))
    assert restored == stream and restored.to_dict() == stream.to_dict()
    assert restored.events_list[1].data["exit_code"] == 0 and restored.created_at == stream.created_at
    assert restored.get_settings() == {"cmd_init_dir": "/w", "model": "openai"}


def test_a_0_1_stream_dict_loads_without_the_new_fields():
    old = {"events_list": [{"type": "new_request", "reasoning": "", "content": "hi", "title": None,
                            "message": "hi", "analysis": "", "est_input_token": 0, "est_output_token": 0,
                            "created_at": "2025-01-02T03:04:05"}],
           "event_summaries_list": [], "title": "old", "created_at": "2025-01-02T03:04:05", "uid": "abc12345",
           "parent_event_stream_uids": [], "agent_type": "default"}
    stream = EventStream.from_dict(old)
    assert stream.uid == "abc12345" and stream.events_list[0].data == {} and stream.agent_settings == {}
    exported = stream.to_dict()
    for key in old:
        assert key in exported
    for key in old["events_list"][0]:
        assert exported["events_list"][0][key] == old["events_list"][0][key]


def test_messages_lose_terminal_escapes():
    assert Event("action", message="\x1b[31mred\x1b[0m text").message == "red text"


def test_child_reference_reads_data_or_the_0_1_reasoning_json():
    assert child_reference(Event("child_agent_running", data={"agent_id": "kid1", "starting_from": 3})) == ("kid1", 3)
    legacy = Event("child_agent_running", reasoning='{"agent_id": "kid2", "starting_from": 0}')
    assert child_reference(legacy) == ("kid2", 0)
    assert child_reference(Event("child_agent_running", reasoning='{"agent_id": "../etc"}')) == (None, 0)
    assert child_reference(Event("child_agent_running", reasoning="not json")) == (None, 0)


def test_flattened_view_puts_child_events_in_place_up_to_their_return():
    store = EventStore()
    parent = EventStream(title="parent")
    child = EventStream(parent_event_stream_uids=[parent.uid])
    child.add_event(Event("new_request_from_parent", content="sub"))
    child.add_event(Event("action", content="work"))
    child.add_event(Event("task_completion", content="sub done"))
    child.add_event(Event("follow_up_request_from_parent", content="later"))
    store.sync(child)
    parent.add_event(Event("new_request", content="big"))
    parent.add_event(Event("child_agent_running", reasoning=json.dumps({"agent_id": child.uid, "starting_from": 0})))
    parent.add_event(Event("child_agent_task_completion", content="sub done"))
    parent.add_event(Event("child_agent_running", data={"agent_id": "missing1", "starting_from": 0}))
    store.sync(parent)
    flat = store.load(parent.uid).get_event_list_including_children_events()
    assert [e.type for e in flat] == ["new_request", "child_agent_running", "new_request_from_parent", "action",
                                      "task_completion", "child_agent_task_completion", "child_agent_running"]
    assert "task_completion" in RETURN_TO_PARENT_EVENT_TYPES
