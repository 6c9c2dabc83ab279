"""A model's context window: the preset's, its server's (an OpenAI-compatible `/v1/models`), the known table's or
an assumed one; and the token estimate that sizes prompts to it."""

import pytest
from wire_servers import TEST_KEY, OllamaWireServer

from anges.config.types import ModelPreset, ModelSettings
from anges.models.anthropic_model import AnthropicModel
from anges.models.gemini_model import GeminiModel
from anges.models.openai_model import OpenAIModel
from anges.models.tokens import PieceCounter, TokenGauge, pieces
from anges.models.window import Window, is_local, known_window, prompt_room, reply_room, window_of


@pytest.fixture(autouse=True)
def keys(clean_model_env, monkeypatch):
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, TEST_KEY)


def openai(server, model="served-model", **preset):
    return OpenAIModel(ModelPreset("openai", model, server.base_url, "OPENAI_API_KEY", **preset),
                       ModelSettings(max_output_tokens=8192))


def listing(*entries):
    return {"object": "list", "data": list(entries)}


def test_vllm_tells_max_model_len_and_the_reply_room_shrinks_to_fit_it(openai_server):
    openai_server.listing = listing({"id": "served-model", "object": "model", "owned_by": "vllm",
                                     "max_model_len": 4096})
    openai_server.enqueue_text("ok")
    model = openai(openai_server)

    assert model.window() == Window(4096, "server")
    model("hi")

    assert [lookup.path for lookup in openai_server.lookups] == ["/v1/models"]
    assert openai_server.lookups[0].headers["authorization"] == f"Bearer {TEST_KEY}"
    assert openai_server.requests[0].body["max_tokens"] == 1024, "a quarter of a 4k window, not 8192"


def test_llama_cpp_tells_the_window_its_slots_serve(openai_server):
    models = listing({"id": "/models/qwen2.5-coder-7b-q4.gguf", "object": "model", "owned_by": "llamacpp",
                      "meta": {"n_ctx_train": 32768, "n_vocab": 151936}})
    props = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}
    openai_server.listing = lambda request: props if request.path == "/props" else models

    assert openai(openai_server).window() == Window(8192, "server")
    assert [lookup.path for lookup in openai_server.lookups] == ["/v1/models", "/props"]


def test_a_listing_with_context_length_is_read(openai_server):
    openai_server.listing = listing({"id": "other", "context_length": 1000},
                                    {"id": "vendor/served-model", "context_length": 65_536})
    assert openai(openai_server, "vendor/served-model").window() == Window(65_536, "server")


def test_ollamas_openai_compatible_api_serves_its_default_window(clean_model_env, caplog):
    with OllamaWireServer() as server:
        model = OpenAIModel(ModelPreset("openai", "qwen2.5-coder", f"{server.url}/v1", ""), ModelSettings())
        assert model.window() == Window(4096, "assumed")
    assert "provider: ollama" in caplog.text


def test_a_server_that_cannot_tell_leaves_the_known_window_or_an_assumed_one(openai_server):
    assert openai(openai_server, "deepseek-chat").window() == Window(128_000, "known")
    assert openai(openai_server, "my-finetune").window() == Window(8192, "assumed"), "a local server: small"
    assert len(openai_server.lookups) == 2 and openai_server.requests == []


def test_the_presets_window_wins_when_the_server_serves_at_least_as_much(openai_server, caplog):
    openai_server.listing = listing({"id": "served-model", "max_model_len": 32_768})
    assert openai(openai_server, context_window=16_384).window() == Window(16_384, "preset")
    assert len(openai_server.lookups) == 1, "asked: a preset may say more than the server serves"
    assert "more than" not in caplog.text


def test_hosted_models_are_known_without_asking(gemini_server, anthropic_server):
    official = OpenAIModel(ModelPreset("openai", "gpt-4.1-mini", api_key_env="OPENAI_API_KEY"))
    assert official.window() == Window(1_047_576, "known")  # api.openai.com is never asked
    gemini = GeminiModel(ModelPreset("gemini", "gemini-2.5-flash", gemini_server.base_url, "GEMINI_API_KEY"))
    claude = AnthropicModel(ModelPreset("anthropic", "claude-sonnet-4-5", anthropic_server.base_url,
                                        "ANTHROPIC_API_KEY"))
    assert (gemini.window(), claude.window()) == (Window(1_048_576, "known"), Window(200_000, "known"))
    assert gemini_server.requests == gemini_server.lookups == anthropic_server.requests == []


@pytest.mark.parametrize(("model_id", "tokens"), [
    ("gpt-4.1", 1_047_576), ("GPT-4o-mini", 128_000), ("anthropic/claude-opus-4", 200_000),
    ("gemini-3.8-flash", 1_048_576), ("deepseek-reasoner", 128_000), ("qwen2.5-coder", None)])
def test_known_windows(model_id, tokens):
    assert known_window(model_id) == tokens


@pytest.mark.parametrize(("url", "local"), [
    ("http://127.0.0.1:8000/v1", True), ("http://localhost:11434", True), ("http://192.168.1.20:8000", True),
    ("http://gpu-box:8000/v1", True), ("http://[::1]:8080", True), ("https://api.deepseek.com", False),
    ("https://openrouter.ai/api/v1", False), ("", True)])
def test_what_counts_as_local(url, local):
    assert is_local(url) is local


def test_the_reply_takes_a_quarter_of_a_small_window_and_the_prompt_the_rest_less_a_margin():
    assert [reply_room(window, 8192) for window in (2048, 4096, 32_768, 200_000)] == [512, 1024, 8192, 8192]
    assert reply_room(4096, 500) == 500
    assert prompt_room(4096, 8192) == 4096 - 1024 - (64 + 81)
    assert prompt_room(200_000, 8192) == 200_000 - 8192 - 2048


def test_window_of_reads_a_models_own_window_through_wrappers():
    class Wrapper:
        def __init__(self, inner):
            self.inner = inner

    def plain(prompt, temperature=0.0):
        return ""

    plain.context_window = 4096
    assert window_of(Wrapper(plain)) == Window(4096, "model")
    assert window_of(lambda prompt: "") is None


ENGLISH = ("The agent reads the request, runs a command in the sandbox, looks at what it printed and decides what "
           "to do next. ") * 100


def test_the_estimate_errs_high_until_counts_correct_it():
    gauge = TokenGauge()
    assert gauge.estimate(ENGLISH) > len(ENGLISH) / 3.4, "before any count: more tokens than most tokenizers make"

    gauge.observe(ENGLISH, len(ENGLISH) // 4)  # a tokenizer that reads this at four characters a token
    assert len(ENGLISH) / 4 < gauge.estimate(ENGLISH) < len(ENGLISH) / 3.4, "close to the count, still above it"


def test_digits_and_wide_characters_are_counted_at_their_own_rates():
    gauge = TokenGauge()
    digits = "1234567890" * 300
    assert gauge.estimate(digits) >= len(digits), "a digit may be a token of its own"
    assert gauge.estimate("数字" * 500) >= 1000, "and a character beyond ASCII"
    assert gauge.estimate(ENGLISH) < len(ENGLISH) / 2.8


def test_a_count_far_below_the_estimate_is_a_cut_and_does_not_calibrate():
    gauge = TokenGauge()
    text = ENGLISH * 2
    assert gauge.cut_short(text, len(text) // 10), "fewer tokens than any tokenizer makes"
    assert not gauge.cut_short(text, len(text) // 5)
    gauge.observe(text, len(text) // 10)
    assert gauge.counts == 0, "an implausible count does not correct the estimate"
    gauge.observe(text, len(text) // 4)
    assert gauge.cut_short(text, len(text) // 6) and not gauge.cut_short(text, len(text) // 5)
    assert not gauge.cut_short("short", 1), "a short prompt tells nothing"


def test_pieces_end_at_blank_lines_and_come_out_the_same_wherever_the_text_starts():
    text = "".join(f"paragraph {n}: " + "words " * (n % 7 * 40 + 10) + "\n\n" for n in range(60))
    parts = pieces(text)
    assert "".join(parts) == text and all(part.endswith("\n\n") for part in parts)
    later = pieces("a new start\n\n" + text[text.index("paragraph 9:"):])
    assert parts[-5:] == later[-5:], "the same text gives the same pieces: their counts are reused"


def test_the_piece_counter_asks_the_tokenizer_once_a_piece_and_adds_a_token_a_seam():
    asked = []

    def count(text):
        asked.append(text)
        return len(text.split())

    counter = PieceCounter(count, TokenGauge())
    text = "".join(f"paragraph {n}: " + "words " * 300 + "\n\n" for n in range(10))
    assert counter.count(text) == len(text.split()) + len(pieces(text)) - 1
    assert len(asked) == len(pieces(text)) and counter.count(text) and len(asked) == len(pieces(text)), "once"
    longer = text + "one more\n\n" * 3
    assert counter.count(longer) == len(longer.split()) + len(pieces(longer)) - 1
    assert len(asked) <= len(pieces(text)) + 2, "only the new end is asked"
    assert counter.gauge.counts == len(asked), "the counts teach the estimate too"


def test_a_tokenizer_that_fails_is_given_up_and_said_so(caplog):
    def broken(text):
        raise ConnectionError("refused")

    counter = PieceCounter(broken, name="llama-server")
    assert counter.count("some text") is None and counter.count("more") is None
    assert "llama-server stopped counting tokens (ConnectionError: refused)" in caplog.text
