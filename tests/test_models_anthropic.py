"""The Anthropic provider through the real `anthropic` SDK against a loopback messages server."""

import sys

import pytest
from wire_servers import TEST_KEY, sleeper

from anges.config.types import Config, ModelPreset, ModelSettings, RetryConfig
from anges.exceptions import ModelSetupError
from anges.models import get_model
from anges.models.anthropic_model import AnthropicModel


def make(server, settings=None, **preset):
    options = {"model": "claude-test", "base_url": server.base_url, "api_key_env": "ANTHROPIC_API_KEY", **preset}
    return AnthropicModel(ModelPreset("anthropic", **options), settings or ModelSettings(),
                          RetryConfig(3, 10, 0.01, 0.01), sleep=sleeper()[1])


@pytest.fixture(autouse=True)
def key(clean_model_env, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)


def test_the_prompt_goes_as_one_user_message_with_the_key(anthropic_server):
    anthropic_server.enqueue_text("hi there")

    make(anthropic_server, ModelSettings(max_output_tokens=321))("Say hi.")

    request = anthropic_server.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["authorization"] == f"Bearer {TEST_KEY}"
    assert "anthropic-version" in request.headers
    assert request.body == {"model": "claude-test", "max_tokens": 321, "stream": True,
                            "messages": [{"role": "user", "content": "Say hi."}]}


def test_cache_reads_and_writes_count_as_input(anthropic_server):
    anthropic_server.enqueue_json({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "ok"}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 1000,
                  "cache_creation_input_tokens": 200},
    })

    reply = make(anthropic_server)("hi")

    assert reply == "ok"
    assert (reply.usage.input_tokens, reply.usage.cached_tokens, reply.usage.output_tokens) == (1210, 1000, 4)
    assert reply.model == "claude-sonnet-4-5"


def test_the_sdk_base_url_variable_keeps_working(anthropic_server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_server.base_url)
    anthropic_server.enqueue_text("ok")

    model = get_model("claude:claude-test", Config())

    assert model("hi") == "ok"
    assert model.name == "claude:claude-test"


def test_claude_on_vertex_ai_through_a_gateway(anthropic_server):
    anthropic_server.enqueue_text("ok")
    model = make(anthropic_server, vertex=True, api_key_env="", project="proj", location="us-east5",
                 headers={"Authorization": "Bearer gateway-token"})

    assert model("hi") == "ok"
    request = anthropic_server.requests[0]
    assert request.path == "/projects/proj/locations/us-east5/publishers/anthropic/models/claude-test:streamRawPredict"
    assert request.headers["authorization"] == "Bearer gateway-token"
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]


def test_claude_on_vertex_ai_needs_a_region():
    with pytest.raises(ModelSetupError, match="needs a region"):
        AnthropicModel(ModelPreset("anthropic", "claude-test", vertex=True))


def test_without_the_sdk_the_message_says_what_to_install(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    monkeypatch.setitem(sys.modules, "anthropic", None)  # what Python does when the package is not installed

    with pytest.raises(ModelSetupError, match=r"a dependency of anges that is missing here: pip install anthropic$"):
        get_model("claude", Config())

