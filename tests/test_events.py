"""Events and streams: ids, lossless round trips, the 0.1.x form, settings, the flattened view, the vocabulary."""

import json
import re

from anges.store.event_store import EventStore
from anges.store.events import (
    EVENT_KINDS,
    REQUEST_EVENT_TYPES,
    RETURN_TO_PARENT_EVENT_TYPES,
    ChildReturn,
    Event,
    EventStream,
    EventSummary,
    FileEdit,
    ShellRun,
    StepUsage,
    child_reference,
    derived_content,
    group_of,
    is_valid_id,
    kind_of,
    new_id,
    shown_path,
    status_of,
    stream_status,
)


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


# --- the vocabulary --------------------------------------------------------------------------------------------


def shell_event(**facts) -> Event:
    data = {"command": "make test", "exit_code": 0, "stdout": "ok\n", "stderr": "", "duration": 1.26,
            "timed_out": False, "interrupted": False, "pid": None, "log_path": None, **facts}
    event = Event("action", data=data)
    event.content = ShellRun.of(event).text()
    return event


def test_the_kinds_table_agrees_with_the_documented_type_lists():
    assert [t for t, kind in EVENT_KINDS.items() if kind.status == "running"] == list(REQUEST_EVENT_TYPES)
    assert all(status_of(t) not in (None, "running") for t in RETURN_TO_PARENT_EVENT_TYPES)
    assert [status_of(t) for t in ("action", "edit_file", "child_agent_task_completion")] == [None, None, None]
    assert stream_status([Event("new_request"), Event("action"), Event("agent_text_response")]) == "answered"
    assert kind_of("child_agent_agent_requested_help").title == "Child agent returned"
    assert kind_of("MY_LEGACY_EVENT").title == "MY_LEGACY_EVENT"  # a 0.1.x custom action's type reads as itself
    assert not kind_of("approval_requested").in_prompt and not kind_of("summary_failed").in_report


def test_events_are_grouped_by_type_and_facts():
    tool = Event("action", data={"server": "docs", "tool": "search", "args": {}})
    failed = Event("action", data={"action_type": "CALL_CHILD_AGENT", "error": "bad directive"})
    returned = Event("child_agent_task_completion", data={"agent_id": "kid", "exit_type": "task_completion"})
    groups = [group_of(e) for e in (shell_event(), tool, failed, Event("edit_file"), Event("follow_up_request"),
                                    Event("agent_requested_help"), returned, Event("child_agent_running"))]
    assert groups == ["shell", "tool", "other", "edit", "request", "answer", "child_exit", "child_running"]
    assert ChildReturn.of(returned).status == "completed" and ChildReturn.of(tool) is None


def test_a_commands_facts_say_how_it_ended_and_make_the_text_the_model_reads():
    assert ShellRun.of(shell_event()).state == "exited"
    assert ShellRun.of(shell_event(exit_code=None, timed_out=True)).state == "timed_out"
    assert ShellRun.of(shell_event(exit_code=None, interrupted=True)).state == "interrupted"
    background = shell_event(exit_code=None, pid=4321, log_path="/tmp/job.log", stdout="")
    assert ShellRun.of(background).state == "background"
    assert background.content == "COMMAND: make test\nStarted in the background: pid 4321, output in /tmp/job.log"
    both = ShellRun.of(shell_event(stdout="built", stderr="warning\n"))
    assert both.output() == "built\nSTDERR:\nwarning\n"
    assert both.text() == "COMMAND: make test\nEXIT CODE: 0\nSTDOUT:\nbuilt\nSTDERR:\nwarning\n"
    assert ShellRun.of(Event("action", content="ls\nSTDOUT:\nx")) is None  # a 0.1.x event has no facts


def test_an_edits_facts_come_from_data_or_from_a_0_1_content():
    edit = Event("edit_file", data={"directive": "NEW_FILE a.py", "path": "/w/src/a.py", "diff": "--- a\n+++ b\n+x",
                                    "lines_added": 1, "lines_removed": 0})
    facts = FileEdit.of(edit)
    assert facts.text() == "NEW_FILE a.py\n--- a\n+++ b\n+x" and shown_path(facts.path, "/w/") == "src/a.py"
    assert shown_path("/elsewhere/a.py", "/w") == "/elsewhere/a.py"
    old = FileEdit.of(Event("edit_file", content="REPLACE_LINES a.py 1-2\n--- a.py\n+++ a.py\n-x\n+y"))
    assert old.directive == "REPLACE_LINES a.py 1-2" and old.diff == "--- a.py\n+++ a.py\n-x\n+y"
    failed = Event("edit_file", data={"directive": "REMOVE_LINES a.py 9-9", "error": "line 9 is past the end"})
    assert FileEdit.of(failed).text() == "EDIT FAILED: line 9 is past the end\nThe file was not changed."


def test_usage_reads_the_recorded_facts_in_one_line():
    data = {"usage": {"input_tokens": 1234, "output_tokens": 56, "model_calls": 2, "estimated": True},
            "model": "openai:gpt-4.1", "cost": 0.00125}
    usage = StepUsage.of(data)
    assert (usage.input_tokens, usage.output_tokens, usage.model_calls, usage.cost) == (1234, 56, 2, 0.00125)
    assert usage.line() == "1,234 input / 56 output tokens (estimated) · openai:gpt-4.1 · $0.0013"
    assert StepUsage.of({}) is None and StepUsage.of({"usage": {"input_tokens": 3}}).line() == "3 input / 0 output tokens"


def test_a_derived_content_is_left_out_on_disk_and_rebuilt_when_read():
    event = shell_event(stdout="x" * 5000)
    record = {**event.to_dict()}
    assert derived_content(event) == event.content
    del record["content"]
    assert Event.from_dict(record) == event
    changed = shell_event()
    changed.content += "\n(something the facts do not say)"
    assert derived_content(changed) != changed.content  # such a content is kept as it is
    assert derived_content(Event("task_completion", content="done")) is None
