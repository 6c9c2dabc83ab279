"""The OpenAI provider through the real `openai` SDK against a loopback chat-completions server."""

import pytest
from wire_servers import TEST_KEY, sleeper

from anges.config.types import Config, ModelPreset, ModelSettings, RetryConfig
from anges.exceptions import ContextExceeded, FormatError, ModelReplyError, ModelSetupError
from anges.models import get_model
from anges.models.openai_model import OpenAIModel
from anges.prompt.parsing import parse_reply, strip_thinking


def make(server, settings=None, **preset):
    options = {"model": "gpt-test", "base_url": server.base_url, "api_key_env": "OPENAI_API_KEY", **preset}
    return OpenAIModel(ModelPreset("openai", **options), settings or ModelSettings(), RetryConfig(3, 10, 0.01, 0.01),
                       sleep=sleeper()[1])


@pytest.fixture(autouse=True)
def key(clean_model_env, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)


def test_the_prompt_goes_as_one_user_message_with_the_key_as_bearer(openai_server):
    openai_server.enqueue_text("hi there")

    make(openai_server, ModelSettings(max_output_tokens=321))("Say hi.", temperature=0.3)

    request = openai_server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {TEST_KEY}"
    assert request.body["messages"] == [{"role": "user", "content": "Say hi."}]
    assert request.body["model"] == "gpt-test"
    assert request.body["temperature"] == 0.3
    assert request.body["max_tokens"] == 321  # a compatible server: the widely understood parameter
    assert "response_format" not in request.body


def test_temperature_defaults_to_the_configured_one(openai_server):
    openai_server.enqueue_text("ok")
    make(openai_server, ModelSettings(temperature=0.7))("hi")
    assert openai_server.requests[0].body["temperature"] == 0.7


def test_json_mode_asks_for_a_json_object(openai_server):
    openai_server.enqueue_text("{}")
    make(openai_server, ModelSettings(json_mode=True))("Answer in JSON.")
    assert openai_server.requests[0].body["response_format"] == {"type": "json_object"}


def test_reasoning_content_in_its_own_field_is_left_out(openai_server):
    openai_server.enqueue_text('{"actions": []}', reasoning_content="Let me think about the files first.")
    assert make(openai_server)("hi") == '{"actions": []}'


def test_a_think_block_without_its_opening_tag_reaches_the_parser_which_drops_it(openai_server):
    openai_server.enqueue_text('The user wants a list.\n</think>\n{"actions": []}')
    reply = make(openai_server)("hi")
    assert reply.startswith("The user wants a list.") and strip_thinking(reply) == '{"actions": []}'


def test_a_reply_cut_off_while_thinking_reaches_the_parser_which_says_so(openai_server):
    openai_server.enqueue_truncated("<think>\nFirst I will consider")
    reply = make(openai_server)("hi")
    assert reply.finish_reason == "length"
    with pytest.raises(FormatError, match="never closes it; it may have been cut off"):
        parse_reply(reply, {})


def test_a_refusal_is_blocked(openai_server):
    openai_server.enqueue_text("", refusal="I can't help with that.")
    with pytest.raises(ModelReplyError, match="refused: I can't help with that") as caught:
        make(openai_server)("hi")
    assert caught.value.kind == "blocked"


def test_deepseek_cache_hits_count_as_cached_tokens(openai_server):
    openai_server.enqueue_json({
        "id": "x", "object": "chat.completion", "created": 0, "model": "deepseek-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103, "prompt_cache_hit_tokens": 64},
    })
    reply = make(openai_server)("hi")
    assert (reply.usage.input_tokens, reply.usage.cached_tokens, reply.model) == (100, 64, "deepseek-chat")


def test_a_server_that_reports_no_usage_gets_an_estimate(openai_server):
    openai_server.enqueue_json({
        "id": "x", "object": "chat.completion", "created": 0, "model": "local",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "12345678"}, "finish_reason": "stop"}],
    })
    reply = make(openai_server)("a" * 40)
    assert reply.usage.estimated
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (10, 2)


def test_openai_base_url_alone_reaches_a_local_server(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.enqueue_text("local answer")

    model = get_model("openai:local-model", Config())

    assert model("hi") == "local answer"
    assert openai_server.requests[0].body["model"] == "local-model"
    assert openai_server.requests[0].headers["authorization"] == "Bearer no-key"


def test_a_keyless_preset_for_a_local_server(openai_server):
    config = Config()
    config.models["local"] = ModelPreset("openai", "qwen", openai_server.base_url, api_key_env="")
    openai_server.enqueue_text("ok")

    model = get_model("local:qwen2.5-coder:7b", config)

    assert model("hi") == "ok"
    assert model.name == "local:qwen2.5-coder:7b"
    assert openai_server.requests[0].body["model"] == "qwen2.5-coder:7b"


def test_a_configured_base_url_wins_over_the_environment(openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    openai_server.enqueue_text("ok")
    assert make(openai_server)("hi") == "ok"


def test_the_official_endpoint_is_recognised():
    # No request is made: only what the model would say to api.openai.com is checked.
    model = OpenAIModel(ModelPreset("openai", "gpt-4.1", api_key_env="OPENAI_API_KEY"))
    assert model.label == "OpenAI"
    assert model.base_url == "https://api.openai.com/v1"
    assert model.official


def test_a_401_without_any_key_says_which_variable_to_set(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.enqueue_error(401)

    with pytest.raises(ModelSetupError, match=r"Check OPENAI_API_KEY \(it is not set, so no key was sent\)"):
        get_model("openai", Config())("hi")


def test_a_server_that_refuses_stream_options_is_asked_again_without_them(openai_server, caplog):
    openai_server.enqueue_error(400, message="Unrecognized request argument supplied: stream_options")
    openai_server.enqueue_text("first", output_tokens=1)
    openai_server.enqueue_text("second", output_tokens=1)
    model = make(openai_server)

    first = model("a" * 40)
    assert model("again") == "second"

    assert first == "first" and first.usage.estimated and first.usage.input_tokens == 10
    sent = [request.body for request in openai_server.requests]
    assert "stream_options" in sent[0] and all("stream_options" not in body for body in sent[1:])
    assert all(body["stream"] is True for body in sent) and len(sent) == 3
    assert "refused stream_options; going on without it" in caplog.text


def test_a_server_that_refuses_json_mode_is_asked_again_without_it(openai_server):
    detail = [{"type": "extra_forbidden", "loc": ["body", "response_format"], "msg": "Extra inputs are not permitted"}]
    openai_server.enqueue_error(422, body={"detail": detail})
    openai_server.enqueue_text("{}")

    assert make(openai_server, ModelSettings(json_mode=True))("Answer in JSON.") == "{}"
    assert [("response_format" in request.body) for request in openai_server.requests] == [True, False]


def test_any_other_bad_request_is_an_error_and_is_not_sent_again(openai_server):
    openai_server.enqueue_error(400, message="Invalid value for 'temperature': must be at most 2")
    openai_server.enqueue_text("never")

    with pytest.raises(ModelSetupError, match=r"rejected the request as invalid \(400\): Invalid value for"):
        make(openai_server)("hi")
    assert len(openai_server.requests) == 1


def test_a_prompt_over_the_window_is_said_so_and_not_sent_again(openai_server):
    openai_server.enqueue_error(400, message="This model's maximum context length is 8192 tokens")
    openai_server.enqueue_text("never")

    with pytest.raises(ContextExceeded, match=r"does not fit the model's context window \(400\): This model.s max"):
        make(openai_server)("hi")
    assert len(openai_server.requests) == 1
