"""Streaming through each provider's real SDK against its loopback server speaking server-sent events: the text and
its pieces, usage from the last chunk, a stop in the middle, cut-off replies, and the prompt cache markers."""

import time

from test_models_providers import call_in_thread
from wire_servers import TEST_KEY, Wire

from anges.config.types import ModelSettings
from anges.exceptions import ModelCancelled
from anges.models.base import Prompt
from anges.models.cancel import CancelToken
from anges.models.openai_model import OpenAIModel
from anges.models.streaming import listening

STREAMED = ModelSettings(request_timeout=10)
WHOLE = ModelSettings(request_timeout=10, stream=False)


class Pieces:
    """A sink that keeps what it is given, and when."""

    def __init__(self):
        self.texts: list[str] = []
        self.times: list[float] = []
        self.begun = 0

    def begin(self):
        self.begun += 1

    def __call__(self, text):
        self.texts.append(text)
        self.times.append(time.monotonic())


def asked_to_stream(wire: Wire) -> bool:
    request = wire.server.requests[-1]
    return ":streamGenerateContent" in request.path if wire.provider == "gemini" else request.body.get("stream") is True


def test_a_streamed_reply_arrives_piece_by_piece_with_the_usage_of_its_last_chunk(wire):
    chunks = ['{"analysis": "Löo', "king at", ' the files\\n", "reasoning": "list', ' them", "actions": []}']
    wire.server.enqueue_text("".join(chunks), chunks=chunks, input_tokens=1200, output_tokens=48, cached_tokens=1000)
    model, _ = wire.model(settings=STREAMED)
    sink = Pieces()

    with listening(sink):
        reply = model("hi")

    assert asked_to_stream(wire)
    assert reply == "".join(chunks) and reply.finish_reason == "stop"
    assert sink.texts == chunks, "each piece reaches the listener, in order"
    assert sink.begun == 1
    cached = 0 if wire.provider == "ollama" else 1000  # Ollama does not say what its prompt cache held
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cached_tokens) == (1200, 48, cached)
    assert not reply.usage.estimated
    if wire.provider == "openai":
        assert wire.server.requests[-1].body["stream_options"] == {"include_usage": True}


def test_with_stream_off_the_reply_comes_whole(wire):
    wire.server.enqueue_text("the answer", input_tokens=12, output_tokens=7, cached_tokens=4)
    model, _ = wire.model(settings=WHOLE)
    sink = Pieces()

    with listening(sink):
        reply = model("hi")

    assert not asked_to_stream(wire)
    cached = 0 if wire.provider == "ollama" else 4
    assert reply == "the answer" and (reply.usage.input_tokens, reply.usage.cached_tokens) == (12, cached)
    assert sink.texts == [], "nothing streams"


def test_a_cancel_in_the_middle_of_a_stream_closes_it_at_once(wire):
    wire.server.enqueue_text('{"analysis": "first part, then nothing more', chunks=['{"analysis": "first part',
                                                                                     ", then nothing more"], stall=30)
    model, _ = wire.model(settings=ModelSettings(request_timeout=60), real_waits=True)
    sink, token = Pieces(), CancelToken()

    with listening(sink):  # the context (and so the sink) goes with the call's thread
        thread, outcome = call_in_thread(model, token)
    deadline = time.monotonic() + 10
    while len(wire.server.sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(wire.server.sent) == 2, "the server sent both pieces, then stalled"

    cancelled = time.monotonic()
    token.cancel()
    thread.join(5)
    assert not thread.is_alive(), "the call outlived its cancel"
    assert isinstance(outcome["error"], ModelCancelled)
    assert outcome["ended"] - cancelled < 1
    deadline = time.monotonic() + 2
    while not wire.server.hangups and time.monotonic() < deadline:
        time.sleep(0.01)
    assert wire.server.hangups and wire.server.hangups[0] - cancelled < 1, "the stream was closed at the server"
    assert len(wire.server.requests) == 1, "a cancelled call is not retried"


def test_a_reply_cut_off_at_the_output_limit_is_returned_as_cut(wire):
    wire.server.enqueue_truncated('{"analysis": "a long', output_tokens=64)
    wire.server.enqueue_truncated("", output_tokens=64)
    model, _ = wire.model(settings=ModelSettings(max_output_tokens=64))

    reply = model("hi")
    assert reply == '{"analysis": "a long' and reply.finish_reason == "length"
    empty = model("hi")
    assert empty == "" and empty.finish_reason == "length", "even an empty cut-off reply is the agent's to handle"


def test_a_dropped_stream_is_retried_and_the_listener_starts_again(wire):
    wire.server.enqueue_drop()
    wire.server.enqueue_text("second try", chunks=["second", " try"])
    model, waits = wire.model(settings=STREAMED)
    sink = Pieces()

    with listening(sink):
        assert model("hi") == "second try"
    assert len(waits) == 1 and sink.texts == ["second", " try"]


# --- prompt caching ----------------------------------------------------------------------------------------------


def cacheable_prompt():
    fixed = "You are anges.\n# Actions\n...\n"
    history = "# History\n\n## Event 1 TYPE: NEW_REQUEST\nCONTENT:\ndo it\n\n## Event 2 TYPE: ACTION\nCONTENT:\nok"
    earlier = len(fixed) + history.index("\n\n## Event 2")
    text = fixed + history + "\n\nReply with the JSON object for your next step."
    end = len(fixed) + len(history)
    return Prompt(text, (len(fixed), earlier, end), (len(fixed), end), "anges-stream-1"), fixed, earlier, end


def test_anthropic_gets_the_prompt_in_blocks_with_cache_control_on_the_prefix_and_the_history(anthropic_server,
                                                                                          monkeypatch):
    from anges.config.types import ModelPreset
    from anges.models.anthropic_model import AnthropicModel

    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    anthropic_server.enqueue_text("ok", input_tokens=3000, cached_tokens=2500)
    model = AnthropicModel(ModelPreset("anthropic", "claude-test", anthropic_server.base_url, "ANTHROPIC_API_KEY"),
                           STREAMED)
    prompt, fixed, earlier, end = cacheable_prompt()

    reply = model(prompt)

    [message] = anthropic_server.requests[0].body["messages"]
    blocks = message["content"]
    assert "".join(block["text"] for block in blocks) == prompt, "the blocks make up the prompt, byte for byte"
    assert [len(block["text"]) for block in blocks] == [len(fixed), earlier - len(fixed), end - earlier,
                                                        len(prompt) - end]
    assert [block.get("cache_control") for block in blocks] == [{"type": "ephemeral"}, None, {"type": "ephemeral"},
                                                                None]
    assert reply.usage.cached_tokens == 2500 and reply.usage.input_tokens == 3000

    anthropic_server.enqueue_text("ok")
    model("a plain prompt")
    assert anthropic_server.requests[1].body["messages"][0]["content"] == "a plain prompt"


def test_openai_gets_the_runs_prompt_cache_key_where_the_preset_says(openai_server, monkeypatch):
    from anges.config.types import ModelPreset

    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    prompt = cacheable_prompt()[0]
    for flag in (None, True, False):
        openai_server.enqueue_text("ok")
        preset = ModelPreset("openai", "gpt-test", openai_server.base_url, "OPENAI_API_KEY", prompt_cache_key=flag)
        OpenAIModel(preset, STREAMED)(prompt)
    bodies = [request.body for request in openai_server.requests]
    assert "prompt_cache_key" not in bodies[0], "a compatible server gets no parameter it may not know"
    assert bodies[1]["prompt_cache_key"] == "anges-stream-1"
    assert "prompt_cache_key" not in bodies[2]
    assert bodies[1]["messages"] == [{"role": "user", "content": str(prompt)}]



def test_a_stream_the_server_closes_before_its_finish_reason_is_retried_as_a_dropped_connection(wire):
    # The body ends with the connection (no length, no chunked end): the SDK sees a complete stream, cut short.
    wire.server.enqueue_cut('{"analysis": "half a rep', chunks=['{"analysis": ', '"half a rep'])
    wire.server.enqueue_text('{"analysis": "whole"}', chunks=['{"analysis": ', '"whole"}'])
    model, waits = wire.model(settings=STREAMED)
    sink = Pieces()

    with listening(sink):
        reply = model("hi")

    assert reply == '{"analysis": "whole"}' and reply.finish_reason == "stop"
    assert len(wire.server.requests) == 2 and len(waits) == 1, "asked again after a back-off, as a dropped connection"
    assert sink.begun == 2 and sink.texts[-2:] == ['{"analysis": ', '"whole"}'], "the text started again"


def test_a_stream_cut_off_every_time_ends_as_a_model_error_not_an_invalid_reply(wire):
    from anges.exceptions import ModelError, ModelReplyError

    for _ in range(3):
        wire.server.enqueue_cut('{"analysis": "half', chunks=['{"analysis": "half'])
    model, _ = wire.model(settings=STREAMED)

    try:
        model("hi")
    except ModelReplyError as exc:
        raise AssertionError(f"taken for an invalid reply: {exc}") from exc
    except ModelError as exc:
        assert "gave up after 3 attempts" in str(exc) and "ended before" in str(exc)
    else:
        raise AssertionError("a cut-off stream was taken for a reply")
