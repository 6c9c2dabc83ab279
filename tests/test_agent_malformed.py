"""Every malformed reply of the corpus, driven through the real agent loop: never an exception."""

import pytest
from test_parsing import load_corpus

from anges.actions import Action
from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models.scripted import is_summary_prompt
from anges.store.events import Event, is_step

CORPUS = load_corpus()
COMPLETE = '{"reasoning": "done", "actions": [{"action_type": "TASK_COMPLETE", "content": "recovered"}]}'


class LegacySearch(Action):
    type = "LEGACY_SEARCH"

    def handle_action_in_parsed_response(self, run_config, parsed_response_dict, action_json):
        run_config["event_stream"].events_list.append(Event("action", content="searched"))


def scripted(first):
    replies = [first]

    def model(prompt, temperature=0.0):
        if is_summary_prompt(prompt):
            return "summary"
        return replies.pop(0) if replies else COMPLETE

    return model


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_corpus_reply_recovers_or_runs(tmp_path, entry):
    model = scripted(entry["reply"])
    prompts = []
    agent = DefaultAgent(inference_func=lambda p, temperature=0.0: prompts.append(p) or model(p, temperature),
                         cmd_init_dir=tmp_path, config=load_config())
    agent.registered_actions.append(LegacySearch())
    stream = agent.run_with_new_request("do the thing")
    last = stream.events_list[-1]
    assert last.type in ("task_completion", "agent_text_response"), (last.type, last.content)
    if entry["expect"] == "error":
        feedback = prompts[1].split("Your previous reply could not be used")[1].lower()
        for word in entry.get("mentions", []):
            assert word.lower() in feedback
        assert [e.type for e in stream.events_list] == ["new_request", "reply_rejected", "task_completion"]
        rejection = stream.events_list[1].content
        assert rejection.startswith("reply rejected: ") and rejection.endswith(" (asked again)")
    else:
        recorded = [e for e in stream.events_list[1:] if e.type in ("action", "edit_file")]
        assert len(recorded) == sum(a["action_type"] not in ("TASK_COMPLETE", "AGENT_TEXT_RESPONSE")
                                    for a in entry["actions"])


def test_only_malformed_replies_end_in_a_clean_interrupt(tmp_path):
    bad = [e["reply"] for e in CORPUS if e["expect"] == "error"]
    calls = []

    def model(prompt, temperature=0.0):
        calls.append(temperature)
        return bad[len(calls) % len(bad)]

    agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config())
    stream = agent.run_with_new_request("go")
    attempts = agent.agent_config.max_invalid_replies
    assert [e.type for e in stream.events_list] == ["new_request", *["reply_rejected"] * (attempts - 1),
                                                     "task_interrupted"]
    assert stream.events_list[-1].data["reason"] == "invalid_replies"
    assert calls == sorted(calls) and calls[-1] > calls[0], "each retry raises the temperature"


def test_a_rejected_reply_is_recorded_with_its_reason_and_its_call_but_the_model_reads_only_the_feedback(tmp_path):
    replies = ['{"reasoning": "My plan: first PLAN_IT, then build.", "actions": [{"action_type": "PLAN_IT"}]}',
               COMPLETE]
    prompts = []

    def model(prompt, temperature=0.0):
        prompts.append(prompt)
        return replies.pop(0)

    stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=load_config()).run_with_new_request("go")

    rejected = stream.events_list[1]
    assert rejected.type == "reply_rejected"
    assert rejected.content == 'reply rejected: actions[0] has unknown action_type "PLAN_IT" (asked again)'
    assert rejected.data["began"].startswith('{"reasoning": "My plan: first PLAN_IT')
    assert (rejected.data["attempt"], rejected.data["max_attempts"]) == (1, 3)
    assert rejected.data["usage"]["model_calls"] == 1, "the rejected call's usage is on its record"
    assert stream.events_list[2].data["usage"]["model_calls"] == 1
    assert "reply rejected" not in prompts[1] and "Your previous reply could not be used" in prompts[1]
    assert not is_step(rejected)
