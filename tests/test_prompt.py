"""History formatting: cut older events, summaries, and the cache that keeps steps flat."""

from anges.config import PromptConfig
from anges.events import Event, EventStream, EventSummary
from anges.prompt import format_event_stream, format_events
from anges.summarize import action_range_due, unsummarized_segments


def stream_with(n_events, summaries=()):
    stream = EventStream()
    stream.add_event(Event("new_request", content="the request"))
    for i in range(2, n_events + 1):
        stream.add_event(Event("action", reasoning=f"r{i}", content=f"output {i}"))
    stream.event_summaries_list.extend(EventSummary("actions", a, b, f"S{a}-{b}") for a, b in summaries)
    return stream


def test_summaries_replace_their_ranges_and_requests_stay():
    config = PromptConfig(recent_events_in_full=2)
    stream = stream_with(12, [(2, 5), (6, 9)])
    text = format_event_stream(stream, config)
    assert text.startswith("## Event 1 TYPE: NEW_REQUEST\nCONTENT:\nthe request")
    assert "## Summary of Events 2 to 5\nS2-5" in text and "## Summary of Events 6 to 9\nS6-9" in text
    assert "output 4" not in text and "## Event 10 TYPE: ACTION" in text and "output 12" in text


def test_the_cached_history_matches_a_fresh_format_as_the_stream_grows():
    config = PromptConfig(recent_events_in_full=3, max_event_chars=50)
    stream = stream_with(5, [(2, 3)])
    for step in range(6, 60):
        stream.add_event(Event("action", content=f"output {step} " + "z" * 100))
        if step % 7 == 0:
            start = stream.event_summaries_list[-1].end_event_idx + 1
            stream.event_summaries_list.append(EventSummary("actions", start, step - 3, f"S{step}"))
        assert format_event_stream(stream, config) == format_events(stream, 1, len(stream.events_list), config)


def test_a_wider_later_summary_wins_over_the_ones_it_covers():
    stream = stream_with(10, [(2, 4), (5, 7)])
    stream.event_summaries_list.append(EventSummary("task_completion", 2, 9, "ALL"))
    text = format_event_stream(stream, PromptConfig(recent_events_in_full=1))
    assert "## Summary of Events 2 to 9\nALL" in text and "S2-4" not in text and "S5-7" not in text


def test_action_range_due_scans_back_to_the_last_summary_or_request():
    stream = stream_with(20, [(2, 8)])
    assert action_range_due(stream, threshold=5, keep_recent=2) == (9, 18)
    assert action_range_due(stream, threshold=11, keep_recent=2) is None
    stream.add_event(Event("follow_up_request", content="more"))
    stream.add_event(Event("action", content="x"))
    assert action_range_due(stream, threshold=1, keep_recent=0) == (22, 22)
    assert unsummarized_segments(stream, keep_recent=0) == [(9, 20), (22, 22)]
