"""The Gemini provider through the real `google-genai` SDK against a loopback generateContent server."""

import pytest
from wire_servers import TEST_KEY, sleeper

from anges.config.types import Config, ModelPreset, ModelSettings, RetryConfig
from anges.exceptions import ModelReplyError, ModelSetupError
from anges.models import get_model
from anges.models.gemini_model import GeminiModel


def make(server, settings=None, **preset):
    waits, sleep = sleeper()
    options = {"model": "gemini-test", "base_url": server.base_url, "api_key_env": "GEMINI_API_KEY", **preset}
    model = GeminiModel(ModelPreset("gemini", **options), settings or ModelSettings(), RetryConfig(3, 60, 0.01, 0.01),
                        sleep=sleep)
    return model, waits


@pytest.fixture(autouse=True)
def key(clean_model_env, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", TEST_KEY)


def test_the_prompt_goes_as_one_user_turn_with_the_key_in_its_header(gemini_server):
    gemini_server.enqueue_text("hi there")
    model, _ = make(gemini_server, ModelSettings(max_output_tokens=321))

    model("Say hi.", temperature=0.2)

    request = gemini_server.requests[0]
    assert request.path.endswith("/models/gemini-test:streamGenerateContent?alt=sse")
    assert request.headers["x-goog-api-key"] == TEST_KEY
    assert request.body["contents"] == [{"role": "user", "parts": [{"text": "Say hi."}]}]
    assert request.body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 321}


def test_json_mode_asks_for_json_mime_type(gemini_server):
    gemini_server.enqueue_text("{}")
    model, _ = make(gemini_server, ModelSettings(json_mode=True))
    model("hi")
    assert gemini_server.requests[0].body["generationConfig"]["responseMimeType"] == "application/json"


def test_thought_parts_are_left_out_and_thinking_tokens_count_as_output(gemini_server):
    gemini_server.enqueue_json({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "pondering...", "thought": True},
                                                               {"text": '{"actions": []}'}]},
                        "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 8, "thoughtsTokenCount": 30,
                          "cachedContentTokenCount": 20},
        "modelVersion": "gemini-2.5-pro",
    })
    model, _ = make(gemini_server)

    reply = model("hi")

    assert reply == '{"actions": []}'
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cached_tokens) == (50, 38, 20)
    assert reply.model == "gemini-2.5-pro"


def test_retry_info_in_a_429_body_is_honoured(gemini_server):
    gemini_server.enqueue_json({"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED",
                                          "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                                       "retryDelay": "7s"}]}}, status=429)
    gemini_server.enqueue_text("ok")
    model, waits = make(gemini_server)

    assert model("hi") == "ok"
    assert waits == [7.0]


def test_an_invalid_key_400_is_a_setup_error_naming_the_variable(gemini_server):
    gemini_server.enqueue_json({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                                          "status": "INVALID_ARGUMENT",
                                          "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                                       "reason": "API_KEY_INVALID"}]}}, status=400)
    model, _ = make(gemini_server)

    with pytest.raises(ModelSetupError, match=r"Gemini rejected the API key \(400 API_KEY_INVALID\)\. Check GEMINI_API_KEY"):
        model("hi")
    assert len(gemini_server.requests) == 1


def test_a_blocked_candidate_is_blocked(gemini_server):
    gemini_server.enqueue_blocked(where="candidate", reason="PROHIBITED_CONTENT")
    model, _ = make(gemini_server)

    with pytest.raises(ModelReplyError, match="PROHIBITED_CONTENT") as caught:
        model("hi")
    assert caught.value.kind == "blocked"


def test_a_blocked_prompt_says_so(gemini_server):
    gemini_server.enqueue_blocked(where="prompt", reason="SAFETY")
    model, _ = make(gemini_server)

    with pytest.raises(ModelReplyError, match=r"prompt was blocked \(SAFETY\)") as caught:
        model("hi")
    assert caught.value.kind == "blocked"


def test_google_api_key_serves_as_well(gemini_server, monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key-0123456789")
    gemini_server.enqueue_text("ok")
    model, _ = make(gemini_server)

    assert model("hi") == "ok"
    assert model.key_env == "GOOGLE_API_KEY"
    assert gemini_server.requests[0].headers["x-goog-api-key"] == "google-key-0123456789"


def test_the_sdk_base_url_variable_keeps_working(gemini_server, monkeypatch):
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", gemini_server.base_url)
    gemini_server.enqueue_text("ok")

    model = get_model("gemini:gemini-2.5-flash", Config())

    assert model("hi") == "ok"
    assert gemini_server.requests[0].path.endswith("/models/gemini-2.5-flash:streamGenerateContent?alt=sse")


def test_api_version_from_the_preset(gemini_server):
    gemini_server.enqueue_text("ok")
    model, _ = make(gemini_server, api_version="v1beta")
    model("hi")
    assert gemini_server.requests[0].path == "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"


def test_vertex_ai_express_mode(gemini_server, monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("GOOGLE_API_KEY", TEST_KEY)
    gemini_server.enqueue_text("ok")
    model, _ = make(gemini_server, vertex=True, api_key_env="")

    assert model("hi") == "ok"
    assert model.label == "Vertex AI"
    assert gemini_server.requests[0].path == "/v1beta1/publishers/google/models/gemini-test:streamGenerateContent?alt=sse"


def test_vertex_ai_without_project_or_credentials_says_what_to_set(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/credentials.json")
    with pytest.raises(ModelSetupError, match="Vertex AI needs a project"):
        GeminiModel(ModelPreset("gemini", "gemini-2.5-pro", vertex=True))
