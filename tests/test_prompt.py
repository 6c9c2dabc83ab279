"""History formatting: the folded part, events shown once, labels, reasoning once per turn, the cache."""

from anges.config.types import PromptConfig
from anges.prompt.history import format_event, format_event_stream, format_events
from anges.prompt.summarize import fold_due, fold_end
from anges.prompt.templates import split_prompt
from anges.store.events import Event, EventStream, EventSummary


def stream_with(n_events, summaries=()):
    stream = EventStream()
    stream.add_event(Event("new_request", content="the request"))
    for i in range(2, n_events + 1):
        stream.add_event(Event("action", reasoning=f"r{i}", content=f"output {i}",
                               data={"action_type": "RUN_SHELL_CMD", "command": f"echo {i}"}))
    stream.event_summaries_list.extend(EventSummary("actions", a, b, f"S{a}-{b}") for a, b in summaries)
    return stream


def test_a_rolling_summary_stands_in_for_everything_before_it_but_the_requests():
    stream = stream_with(12, [(2, 5)])
    stream.events_list[6] = Event("follow_up_request", content="and then this")
    stream.event_summaries_list.append(EventSummary("rolling", 1, 9, "ROLLING"))
    text = format_event_stream(stream, PromptConfig())
    assert text.startswith("## Event 1 TYPE: NEW_REQUEST\nCONTENT:\nthe request\n\n"
                           "## Event 7 TYPE: FOLLOW_UP_REQUEST\nCONTENT:\nand then this\n\n"
                           "## Summary of Events 1 to 9\nROLLING\n\n## Event 10 TYPE: RUN_SHELL_CMD")
    assert "S2-5" not in text and "output 9" not in text and "output 12" in text


def test_old_streams_with_range_summaries_read_as_before():
    stream = stream_with(12, [(2, 5), (6, 9)])
    text = format_event_stream(stream, PromptConfig())
    assert text.startswith("## Event 1 TYPE: NEW_REQUEST\nCONTENT:\nthe request\n\n## Summary of Events 2 to 5\nS2-5")
    assert "## Summary of Events 6 to 9\nS6-9\n\n## Event 10 TYPE: RUN_SHELL_CMD" in text


def test_beside_the_summary_the_newest_requests_that_fit_are_kept_and_the_latest_always():
    stream = EventStream()
    for i in range(1, 21):
        kind = "new_request" if i == 1 else "follow_up_request"
        stream.add_event(Event(kind, content=f"request number {i} " + "x" * 200))
    stream.add_event(Event("follow_up_request", content="the latest " + "y" * 3000))
    stream.event_summaries_list.append(EventSummary("rolling", 1, 21, "ROLLING"))
    text = format_event_stream(stream, PromptConfig(max_folded_request_chars=1000))
    assert "the latest " + "y" * 3000 in text, "the latest request is shown whole even past the budget"
    assert "request number 20" not in text and "... [20 earlier requests (in the summary) cut] ..." in text

    room = len(format_event(21, stream.events_list[20])) + 2 * len(format_event(20, stream.events_list[19])) + 5
    text = format_event_stream(stream, PromptConfig(max_folded_request_chars=room))
    assert "request number 20 " + "x" * 200 in text and "request number 19 " in text and "number 18" not in text
    assert "[18 earlier requests (in the summary) cut]" in text


def test_labels_are_the_guides_action_names_and_old_records_still_read():
    stream = EventStream()
    stream.add_event(Event("new_request", content="go"))
    stream.add_event(Event("action", content="find src | wc -l\n42"))  # anges 0.1.x: no facts
    stream.add_event(Event("action", content="tool result", data={"action_type": "USE_MCP_TOOL", "server": "s",
                                                                  "tool": "t"}))
    stream.add_event(Event("edit_file", content="NEW_FILE a.py\n+x"))
    stream.add_event(Event("new_child_agent", content="do it", data={"agent_id": "abc", "agent_type": "default"}))
    for kind in ("task_completion", "agent_requested_help", "agent_text_response", "task_interrupted"):
        stream.add_event(Event(kind, content=kind))
    labels = [line.split("TYPE: ")[1] for line in format_event_stream(stream, PromptConfig()).splitlines()
              if line.startswith("## Event")]
    assert labels == ["NEW_REQUEST", "RUN_SHELL_CMD", "USE_MCP_TOOL", "EDIT_FILE", "NEW_CHILD_AGENT",
                      "TASK_COMPLETE", "HELP_NEEDED", "AGENT_TEXT_RESPONSE", "TASK_INTERRUPTED"]


def test_a_replys_reasoning_is_shown_once_for_all_its_actions():
    stream = EventStream()
    stream.add_event(Event("new_request", content="go"))
    for command in ("one", "two", "three"):
        stream.add_event(Event("action", reasoning="run three echoes", content=f"echo {command}"))
    stream.add_event(Event("approval_decided", content="approved"))
    stream.add_event(Event("task_completion", reasoning="run three echoes", content="done"))
    stream.add_event(Event("follow_up_request", content="again"))
    stream.add_event(Event("action", reasoning="run three echoes", content="echo again"))
    stream.add_event(Event("action", reasoning="check", content="ls"))
    text = format_event_stream(stream, PromptConfig())
    assert text.count("REASONING:\nrun three echoes") == 2, "once for the first reply, once after the new request"
    assert "REASONING:\ncheck" in text
    assert format_events(stream, 1, len(stream.events_list), PromptConfig()) == text


def test_an_event_is_cut_once_the_same_at_every_step_and_requests_stay_whole():
    config = PromptConfig(max_event_chars=300, max_event_lines=20)
    stream = EventStream()
    stream.add_event(Event("new_request", content="r" * 5000))
    stream.add_event(Event("action", content="x" * 20000))
    first = format_event_stream(stream, config)
    assert "r" * 5000 in first and "x" * 1000 not in first and "characters cut]" in first
    for _ in range(10):
        stream.add_event(Event("action", content="\n".join(["line"] * 100)))
        later = format_event_stream(stream, config)
        assert later.startswith(first + "\n\n")
        first = later
    assert later.count("line\n") <= 10 * 20, "each 100-line event is cut to its 20 lines"


def test_the_cached_history_matches_a_fresh_format_as_the_stream_grows():
    config = PromptConfig(recent_events_in_full=3, max_event_chars=50)
    stream = stream_with(5)
    for step in range(6, 80):
        reasoning = "same" if step % 3 else f"new {step}"
        stream.add_event(Event("action", reasoning=reasoning, content=f"output {step} " + "z" * 100))
        if step % 11 == 0:
            stream.add_event(Event("follow_up_request", content=f"request {step}"))
        if step % 7 == 0:
            stream.event_summaries_list.append(EventSummary("rolling", 1, len(stream.events_list) - 3, f"S{step}"))
        assert format_event_stream(stream, config) == format_events(stream, 1, len(stream.events_list), config)


def test_a_fold_is_due_by_count_or_by_characters_and_keeps_the_newest_events():
    stream = stream_with(10)
    config = PromptConfig(recent_events_in_full=2, history_window_chars=0)
    assert fold_due(stream, config, threshold=9) is None, "the two newest events do not count: they stay"
    assert fold_due(stream, config, threshold=8) == 8 == fold_end(stream, config)
    stream.event_summaries_list.append(EventSummary("rolling", 1, 8, "S"))
    assert fold_due(stream, config, threshold=3) is None and fold_end(stream, config) is None
    for _ in range(2):
        stream.add_event(Event("action", content="y" * 400))
    assert fold_due(stream, config, threshold=0) is None
    by_size = PromptConfig(recent_events_in_full=2, history_window_chars=500)
    assert fold_due(stream, by_size, threshold=0) is None, "the two newest are not counted: they stay"
    stream.add_event(Event("action", content="short"))
    assert fold_due(stream, by_size, threshold=0) == 11


def test_split_prompt_finds_the_tail_after_the_history():
    head, tail = split_prompt("fixed\n\n# History\n\n## Event 1\n# Now\n(in content)\n\n# Now\n\nfeedback")
    assert head.endswith("(in content)") and tail == "\n\n# Now\n\nfeedback"
    assert split_prompt("no tail here") == ("no tail here", "")


def test_after_a_fold_the_next_waits_for_threshold_new_events_however_many_are_kept():
    stream = stream_with(20)
    config = PromptConfig(recent_events_in_full=8, history_window_chars=0)
    end = fold_due(stream, config, threshold=3)
    assert end == 12
    stream.event_summaries_list.append(EventSummary("rolling", 1, end, "S"))
    for _ in range(2):
        stream.add_event(Event("action", content="more"))
        assert fold_due(stream, config, threshold=3) is None
    stream.add_event(Event("action", content="more"))
    assert fold_due(stream, config, threshold=3) == end + 3
