"""What every provider does alike, through its real SDK against a loopback server: replies, usage, retries, faults."""

import threading
import time

import pytest
from wire_servers import Scripted

from anges.config.types import ModelSettings, RetryConfig
from anges.exceptions import ModelCancelled, ModelError, ModelReplyError, ModelSetupError
from anges.models.base import Completion
from anges.models.cancel import CancelToken, cancellable
from anges.prompt.parsing import strip_thinking


def test_a_reply_carries_text_usage_model_and_finish_reason(wire):
    wire.server.enqueue_text("the answer", input_tokens=12, output_tokens=7, cached_tokens=4)
    model, _ = wire.model()

    reply = model("What is it?")

    assert isinstance(reply, Completion) and isinstance(reply, str)
    assert reply == "the answer"
    cached = 0 if wire.provider == "ollama" else 4  # Ollama does not say what its prompt cache held
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cached_tokens) == (12, 7, cached)
    assert not reply.usage.estimated
    assert reply.model == "test-model"
    assert reply.finish_reason == "stop"
    assert reply.latency > 0
    assert model.name == f"{wire.provider}:test-model"
    assert len(wire.server.requests) == 1 and wire.server.unscripted == 0


def test_429_waits_as_long_as_retry_after_says(wire):
    wire.server.enqueue_error(429, headers={"Retry-After": "1"})
    wire.server.enqueue_text("ok")
    model, waits = wire.model()

    assert model("hi") == "ok"
    assert waits == [1.0]
    assert len(wire.server.requests) == 2


def test_retry_after_ms_is_preferred(wire):
    wire.server.enqueue_error(429, headers={"retry-after-ms": "250", "Retry-After": "9"})
    wire.server.enqueue_text("ok")
    model, waits = wire.model()

    assert model("hi") == "ok"
    assert waits == [0.25]


def test_503_twice_then_success_backs_off_exponentially(wire):
    wire.server.enqueue_error(503, times=2)
    wire.server.enqueue_text("ok")
    retry = RetryConfig(max_attempts=5, max_total_seconds=30, initial_backoff=0.01, max_backoff=1)
    model, waits = wire.model(retry=retry)

    assert model("hi") == "ok"
    assert len(wire.server.requests) == 3
    assert 0.005 <= waits[0] <= 0.01 and 0.01 <= waits[1] <= 0.02


def test_overloaded_529_is_retried(wire):
    wire.server.enqueue_error(529)
    wire.server.enqueue_text("ok")
    model, waits = wire.model()

    assert model("hi") == "ok"
    assert len(waits) == 1


def test_500_forever_gives_up_after_max_attempts(wire):
    wire.server.enqueue_error(500, message="boom", times=10)
    model, waits = wire.model()

    with pytest.raises(ModelError) as caught:
        model("hi")

    assert not isinstance(caught.value, ModelSetupError)
    message = str(caught.value)
    assert "gave up after 3 attempts" in message and "(500)" in message and "boom" in message
    assert len(wire.server.requests) == 3 and len(waits) == 2


def test_retry_after_beyond_the_total_bound_gives_up_at_once(wire):
    wire.server.enqueue_error(429, headers={"Retry-After": "120"})
    model, waits = wire.model(retry=RetryConfig(max_attempts=5, max_total_seconds=60))

    with pytest.raises(ModelError, match=r"gave up after 1 attempts.*rate limited \(429\).*max_total_seconds"):
        model("hi")
    assert waits == [] and len(wire.server.requests) == 1


def test_401_fails_at_once_naming_the_variable(wire):
    wire.server.enqueue_error(401, message="invalid x-api-key")
    model, waits = wire.model()

    with pytest.raises(ModelSetupError, match=rf"rejected the API key \(401\)\. Check {wire.key_env}\."):
        model("hi")
    assert len(wire.server.requests) == 1 and waits == []


def test_403_fails_at_once(wire):
    wire.server.enqueue_error(403, message="not allowed")
    model, _ = wire.model()

    with pytest.raises(ModelSetupError, match=r"denied access \(403\): not allowed"):
        model("hi")
    assert len(wire.server.requests) == 1


def test_404_names_the_model_and_the_endpoint(wire):
    wire.server.enqueue_error(404, message="no such model")
    model, _ = wire.model(model="no-such-model")

    with pytest.raises(ModelSetupError) as caught:
        model("hi")
    message = str(caught.value)
    assert "model 'no-such-model' not found at" in message and wire.server.url in message
    assert "check the model id" in message
    assert len(wire.server.requests) == 1


def test_400_fails_at_once_with_the_server_message(wire):
    wire.server.enqueue_error(400, message="max_tokens is too large")
    model, _ = wire.model()

    with pytest.raises(ModelSetupError, match=r"rejected the request as invalid \(400\): max_tokens is too large"):
        model("hi")
    assert len(wire.server.requests) == 1


def test_a_hang_times_out_and_is_retried(wire):
    wire.server.enqueue_hang(3)
    wire.server.enqueue_text("ok")
    model, waits = wire.model(settings=ModelSettings(request_timeout=0.3))

    assert model("hi") == "ok"
    assert len(wire.server.requests) == 2 and len(waits) == 1


def test_hanging_forever_ends_in_a_timeout_error(wire):
    wire.server.enqueue_hang(3, times=2)
    model, _ = wire.model(settings=ModelSettings(request_timeout=0.2), retry=RetryConfig(2, 30, 0.01, 0.01))

    with pytest.raises(ModelError, match="gave up after 2 attempts.*timed out"):
        model("hi")


def test_a_dropped_connection_is_retried(wire):
    wire.server.enqueue_drop()
    wire.server.enqueue_text("ok")
    model, waits = wire.model()

    assert model("hi") == "ok"
    assert len(waits) == 1


def test_an_empty_reply_raises_empty(wire):
    wire.server.enqueue_empty()
    model, _ = wire.model()

    with pytest.raises(ModelReplyError) as caught:
        model("hi")
    assert caught.value.kind == "empty"
    assert caught.value.usage.input_tokens == 10
    assert len(wire.server.requests) == 1


def test_a_reply_cut_at_max_tokens_is_returned_with_finish_reason_length(wire):
    wire.server.enqueue_truncated('{"analysis": "cut o', output_tokens=64)
    model, _ = wire.model(settings=ModelSettings(max_output_tokens=64))

    reply = model("hi")

    assert reply == '{"analysis": "cut o'
    assert reply.finish_reason == "length"
    assert reply.usage.output_tokens == 64


@pytest.mark.parametrize("wire", ["anthropic", "gemini", "openai"], indirect=True)  # Ollama filters nothing
def test_a_blocked_reply_raises_blocked(wire):
    wire.server.enqueue_blocked()
    model, _ = wire.model()

    with pytest.raises(ModelReplyError) as caught:
        model("hi")
    assert caught.value.kind == "blocked"
    assert len(wire.server.requests) == 1


def test_a_think_block_reaches_the_parser_which_alone_drops_it(wire):
    text = '<think>\nThe user wants JSON.\n</think>\n\n{"actions": []}'
    wire.server.enqueue_text(text)
    model, _ = wire.model()

    reply = model("hi")
    assert reply == text
    assert strip_thinking(reply.strip()) == '{"actions": []}'


def test_preset_headers_are_sent(wire):
    wire.server.enqueue_text("ok")
    model, _ = wire.model(headers={"X-Gateway-Team": "agents"})

    model("hi")
    assert wire.server.requests[0].headers["x-gateway-team"] == "agents"


def test_a_missing_key_names_the_variable(wire, monkeypatch):
    monkeypatch.delenv(wire.key_env)
    with pytest.raises(ModelSetupError, match=f"needs an API key: set {wire.key_env}"):
        wire.model()
    assert wire.server.requests == []


# --- cancelling a call, and replies that are not JSON ------------------------------------------------------------


def call_in_thread(model, token):
    """Start `model("hi")` under `token` on a thread; returns the thread and where its outcome lands."""
    outcome = {}

    def work():
        with cancellable(token):
            try:
                outcome["reply"] = model("hi")
            except BaseException as exc:
                outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, outcome


def test_a_cancel_closes_the_request_the_server_holds_open_and_retries_nothing(wire):
    wire.server.enqueue_hold(30)
    wire.server.enqueue_text("a retry nobody should make")
    model, _ = wire.model(settings=ModelSettings(request_timeout=60), real_waits=True)
    token = CancelToken()
    thread, outcome = call_in_thread(model, token)
    assert wire.server.wait_for_requests(1)

    cancelled = time.monotonic()
    token.cancel()
    thread.join(5)
    assert not thread.is_alive(), "the call outlived its cancel"
    assert isinstance(outcome["error"], ModelCancelled)
    assert outcome["ended"] - cancelled < 2
    deadline = time.monotonic() + 5
    while not wire.server.hangups and time.monotonic() < deadline:
        time.sleep(0.02)
    assert wire.server.hangups and wire.server.hangups[0] - cancelled < 2, "the server never saw the connection close"
    time.sleep(0.3)
    assert len(wire.server.requests) == 1 and wire.server.pending == 1


def test_a_cancel_cuts_the_wait_before_a_retry_short(wire):
    wire.server.enqueue_error(503, headers={"Retry-After": "20"})
    wire.server.enqueue_text("a retry nobody should make")
    model, _ = wire.model(retry=RetryConfig(3, 60, 0.01, 30), real_waits=True)
    token = CancelToken()
    thread, outcome = call_in_thread(model, token)
    assert wire.server.wait_for_requests(1)
    time.sleep(0.2)  # now waiting out the Retry-After

    cancelled = time.monotonic()
    token.cancel()
    thread.join(5)
    assert not thread.is_alive() and outcome["ended"] - cancelled < 2
    assert isinstance(outcome["error"], ModelCancelled)
    assert len(wire.server.requests) == 1


def test_a_call_made_after_a_cancel_uses_a_fresh_connection(wire):
    wire.server.enqueue_hold(30)
    wire.server.enqueue_text("fresh")
    model, _ = wire.model(real_waits=True)
    token = CancelToken()
    thread, outcome = call_in_thread(model, token)
    assert wire.server.wait_for_requests(1)
    token.cancel()
    thread.join(5)

    assert model("again") == "fresh"


@pytest.mark.parametrize("plain", [False, True], ids=["as an event", "as a plain body"])
def test_a_200_reply_that_is_not_json_is_retried_then_explained(wire, plain):
    # google-genai reads an empty 200 body as a reply without candidates: the empty-reply case
    bodies = ["<html><body>502 Bad Gateway</body></html>"] + ([] if wire.provider == "gemini" else [""])
    for body in bodies:
        wire.server.enqueue(Scripted(200, body=body, plain=plain))
        wire.server.enqueue_text("ok")
        model, waits = wire.model()

        assert model("hi") == "ok"
        unstreamed = wire.provider == "openai" and plain  # no event came: asked again at once, without streaming
        assert len(waits) == (0 if unstreamed else 1)
        assert ("stream" not in wire.server.requests[-1].body) if unstreamed else True

        wire.server.enqueue(Scripted(200, body=body, plain=plain), times=6 if unstreamed else 3)
        with pytest.raises(ModelError, match="gave up after 3 attempts.*not JSON") as caught:
            model("hi")
        assert not isinstance(caught.value, ModelSetupError)
