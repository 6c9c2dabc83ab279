"""A whole agent run through each real provider SDK against a loopback server speaking its wire format."""

import json

import pytest

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models import get_model
from anges.store.event_store import EventStore


def reply(*actions):
    return json.dumps({"analysis": "a", "reasoning": "r", "actions": list(actions)})


@pytest.mark.parametrize("fixture,preset", [("openai_server", "openai"), ("gemini_server", "gemini"),
                                            ("anthropic_server", "claude")])
def test_edit_run_complete_through_the_sdk(request, tmp_path, monkeypatch, fixture, preset):
    server = request.getfixturevalue(fixture)
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    server.enqueue_text(reply({"action_type": "EDIT_FILE", "directive_line": "NEW_FILE app.py",
                               "content": "print(6 * 7)\n"}), input_tokens=1200, output_tokens=40, cached_tokens=800)
    server.enqueue_text(reply({"action_type": "RUN_SHELL_CMD", "command": "python3 app.py"}),
                        input_tokens=1300, output_tokens=30)
    # the window is full before the third step: the history is folded into a summary first (its prompt is the
    # agent's own, with the request for the summary at its end)
    server.enqueue_text("Created app.py and ran it; it printed 42.", input_tokens=1500, output_tokens=15)
    server.enqueue_text(reply({"action_type": "TASK_COMPLETE", "content": "app.py prints 42"}),
                        input_tokens=1400, output_tokens=20)

    config = load_config(overrides={"agents": {"common": {"max_consecutive_actions_to_summarize": 2}},
                                    "prompt": {"recent_events_in_full": 1}})
    agent = DefaultAgent(inference_func=get_model(preset, config), cmd_init_dir=tmp_path, config=config)
    stream = agent.run_with_new_request("write app.py that prints 42 and run it")

    assert [e.type for e in stream.events_list] == ["new_request", "edit_file", "action", "history_folded",
                                                    "task_completion"]
    assert (tmp_path / "app.py").read_text() == "print(6 * 7)\n"
    assert "42" in stream.events_list[2].content and stream.events_list[2].data["exit_code"] == 0
    edit_usage = stream.events_list[1].data["usage"]
    assert (edit_usage["input_tokens"], edit_usage["output_tokens"], edit_usage["cached_tokens"]) == (1200, 40, 800)
    assert stream.events_list[2].data["usage"]["input_tokens"] == 1300
    summary = stream.event_summaries_list[0]
    assert (summary.start_event_idx, summary.end_event_idx) == (1, 2) and summary.summary.startswith("Created app.py")
    assert summary.data["usage"]["input_tokens"] == 1500
    fold, completion = (event.data["usage"] for event in stream.events_list[3:])  # each call counts once, where made
    assert (fold["model_calls"], fold["input_tokens"], fold["output_tokens"]) == (1, 1500, 15)
    assert (completion["model_calls"], completion["input_tokens"], completion["output_tokens"]) == (1, 1400, 20)
    assert "Created app.py and ran it" in json.dumps(server.requests[3].body)
    assert len(server.requests) == 4
    assert "write app.py" in json.dumps(server.requests[0].body)
    saved = json.dumps(EventStore().export(stream.uid))
    assert "TEST_KEY" not in saved and server.env[next(k for k in server.env if k.endswith("KEY"))] not in saved
