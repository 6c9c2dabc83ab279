"""The Ollama provider against a loopback server speaking Ollama's native API (`/api/chat`, `/api/show`)."""

import threading
import time

import pytest
from wire_servers import fast_retry, sleeper

from anges.config.types import Config, ModelPreset, ModelSettings
from anges.exceptions import ContextExceeded, ModelCancelled, ModelError, ModelSetupError
from anges.models import get_model
from anges.models.cancel import CancelToken
from anges.models.ollama_model import OllamaModel, ollama_host
from anges.models.streaming import listening
from anges.models.window import Window


def make(server, settings=None, **preset):
    waits, sleep = sleeper()
    options = {"model": "qwen2.5-coder", "base_url": server.url, **preset}
    model = OllamaModel(ModelPreset("ollama", **options), settings or ModelSettings(max_output_tokens=1000),
                        fast_retry(), sleep=sleep)
    return model, waits


class Pieces:
    def __init__(self):
        self.pieces, self.begun = [], 0

    def begin(self):
        self.begun += 1

    def __call__(self, text):
        self.pieces.append(text)


def test_the_prompt_goes_to_api_chat_with_a_window_sized_to_it_and_the_reply(ollama_server):
    ollama_server.enqueue_text("hello", output_tokens=3, chunks=["hel", "lo"])
    model, _ = make(ollama_server)
    sink = Pieces()

    with listening(sink):
        reply = model("x" * 20_000, temperature=0.2)

    request = ollama_server.requests[0]
    body = request.body
    assert (request.path, body["model"], body["stream"]) == ("/api/chat", "qwen2.5-coder", True)
    assert body["messages"] == [{"role": "user", "content": "x" * 20_000}]
    assert body["truncate"] is False, "asks Ollama to refuse rather than cut a prompt that does not fit"
    options = body["options"]
    assert options["temperature"] == 0.2 and options["num_predict"] == 1000
    assert request.facts["prompt_tokens"] + options["num_predict"] <= options["num_ctx"] <= 32_768
    assert not request.facts["cut"]
    assert (reply, reply.finish_reason, sink.pieces, sink.begun) == ("hello", "stop", ["hel", "lo"], 1)
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.estimated) == (5008, 3, False)
    assert [(lookup.path, lookup.body) for lookup in ollama_server.lookups] == [
        ("/api/show", {"model": "qwen2.5-coder"})]


def test_num_ctx_grows_with_the_prompt_in_powers_of_two_never_shrinks_and_stays_within_the_window(ollama_server):
    ollama_server.context_length = 16_384
    ollama_server.refuses = True
    ollama_server.enqueue_text("ok", times=3)
    model, _ = make(ollama_server)

    for size in (2_000, 40_000, 4_000):
        model("y" * size)
    with pytest.raises(ContextExceeded, match="does not fit the model's context window: the input length exceeds"):
        model("z" * 100_000)

    sizes = [request.body["options"]["num_ctx"] for request in ollama_server.requests]
    assert sizes == [2048, 16_384, 16_384, 16_384]
    assert all(request.facts["prompt_tokens"] + 1000 <= request.facts["window"]
               for request in ollama_server.requests[:3])
    assert len(ollama_server.lookups) == 1, "the window is asked of the server once"


def test_the_window_is_the_presets_else_the_servers_else_assumed(ollama_server, caplog):
    ollama_server.context_length = 4096
    assert make(ollama_server)[0].window() == Window(4096, "server")
    assert make(ollama_server, context_window=2048)[0].window() == Window(2048, "preset")
    assert "more than" not in caplog.text, "a preset under the model's window is the user's choice"
    larger = make(ollama_server, context_window=16_384)[0].window()
    assert larger == Window(4096, "server") and "the preset says 16,384" in larger.detail
    assert "the preset's context_window (16,384 tokens) is more than Ollama at" in caplog.text
    assert len(ollama_server.lookups) == 3, "the server is asked even when the preset names a window"
    ollama_server.context_length = None  # /api/show answers 404
    assert make(ollama_server)[0].window() == Window(8192, "assumed")


def test_a_small_window_scales_the_reply_room_down(ollama_server):
    ollama_server.context_length = 4096
    ollama_server.enqueue_text("ok")
    model, _ = make(ollama_server, settings=ModelSettings(max_output_tokens=8192))

    model("hi")

    assert ollama_server.requests[0].body["options"]["num_predict"] == 1024


def test_a_reply_cut_at_num_predict_has_finish_reason_length(ollama_server):
    ollama_server.enqueue_truncated('{"analysis": "long')
    reply = make(ollama_server)[0]("hi")
    assert reply.finish_reason == "length" and reply == '{"analysis": "long'


def test_without_streaming_one_plain_reply(ollama_server):
    ollama_server.enqueue_text("whole", output_tokens=2)
    model, _ = make(ollama_server, settings=ModelSettings(stream=False))

    reply = model("hi there")

    assert ollama_server.requests[0].body["stream"] is False
    assert reply == "whole" and reply.usage.output_tokens == 2


def test_json_mode_asks_for_json_format(ollama_server):
    ollama_server.enqueue_text("{}")
    make(ollama_server, settings=ModelSettings(json_mode=True))[0]("Answer in JSON.")
    assert ollama_server.requests[0].body["format"] == "json"


def test_a_reply_without_prompt_eval_count_gets_an_estimate(ollama_server):
    ollama_server.enqueue_json({"model": "qwen2.5-coder", "message": {"role": "assistant", "content": "ok"},
                                "done": True, "done_reason": "stop", "eval_count": 1}, )
    reply = make(ollama_server, settings=ModelSettings(stream=False))[0]("a" * 40)
    assert reply.usage.estimated and (reply.usage.input_tokens, reply.usage.output_tokens) == (10, 1)


def test_a_model_not_pulled_says_how_to_pull_it(ollama_server):
    ollama_server.enqueue_error(404, message="model 'qwen9' not found, try pulling it first")
    model, waits = make(ollama_server, model="qwen9")
    with pytest.raises(ModelSetupError, match=r"not found at http.*: model 'qwen9' not found.*ollama pull qwen9"):
        model("hi")
    assert waits == [] and len(ollama_server.requests) == 1


def test_a_server_error_and_an_error_line_mid_stream_are_retried(ollama_server):
    ollama_server.enqueue_error(500, message="llama runner process has terminated")
    ollama_server.enqueue_json({"error": "an error was encountered while running the model"})
    ollama_server.enqueue_text("third time")
    model, waits = make(ollama_server, settings=ModelSettings(stream=False))
    assert model("hi") == "third time"
    assert len(waits) == 2


def test_no_server_says_to_start_ollama(clean_model_env):
    model = OllamaModel(ModelPreset("ollama", "qwen2.5-coder", "http://127.0.0.1:9"), ModelSettings(), fast_retry(),
                        sleep=sleeper()[1])
    with pytest.raises(ModelError, match=r"cannot connect to Ollama at http://127.0.0.1:9: is Ollama running"):
        model("hi")


def test_a_stop_closes_the_stream_within_a_second(ollama_server):
    ollama_server.enqueue_text("thinking about it " * 3, chunks=["thinking ", "about it " + "thinking about it " * 2],
                               stall=30)
    model, _ = make(ollama_server)
    token, sink, outcome = CancelToken(), Pieces(), {}

    def call():
        with listening(sink):
            try:
                model("hi", cancel=token)
            except ModelCancelled as exc:
                outcome["error"] = exc

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + 5
    while len(sink.pieces) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    stopped = time.monotonic()
    token.cancel()
    worker.join(5)

    assert "error" in outcome and not worker.is_alive()
    deadline = time.monotonic() + 3
    while not ollama_server.hangups and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ollama_server.hangups and ollama_server.hangups[0] - stopped < 1, "the stream closed within a second"
    assert len(ollama_server.requests) == 1, "a stop is not retried"


@pytest.mark.parametrize("form", ["{host}:{port}", "http://{host}:{port}", "http://{host}:{port}/"])
def test_ollama_host_is_honoured(ollama_server, monkeypatch, form):
    host, port = ollama_server.url.removeprefix("http://").split(":")
    monkeypatch.setenv("OLLAMA_HOST", form.format(host=host, port=port))
    ollama_server.enqueue_text("from OLLAMA_HOST")

    model = get_model("ollama:qwen2.5-coder:7b", Config())

    assert model("hi") == "from OLLAMA_HOST"
    assert model.base_url == ollama_server.url
    assert ollama_server.requests[0].body["model"] == "qwen2.5-coder:7b"


def test_a_presets_base_url_wins_over_ollama_host(ollama_server, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")  # nothing listens there
    ollama_server.enqueue_text("ok")
    assert make(ollama_server)[0]("hi") == "ok"


@pytest.mark.parametrize(("value", "url"), [
    ("", "http://127.0.0.1:11434"),
    ("0.0.0.0", "http://0.0.0.0:11434"),
    ("box.lan", "http://box.lan:11434"),
    ("box.lan:8080", "http://box.lan:8080"),
    ("http://box.lan", "http://box.lan:80"),
    ("https://ollama.example", "https://ollama.example:443"),
    ("[::1]:11435", "http://[::1]:11435"),
])
def test_ollama_host_is_read_as_ollamas_clients_read_it(value, url):
    assert ollama_host(value) == url


def test_a_bad_ollama_host_is_a_setup_error(clean_model_env, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "box:notaport")
    with pytest.raises(ModelSetupError, match="OLLAMA_HOST='box:notaport' is not a host"):
        get_model("ollama", Config())
