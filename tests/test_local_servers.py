"""Runs on the local servers people use, through the real OpenAI SDK against loopback fakes faithful to each
server's wire behaviour (`local_servers.py` says what each does, where that was read and what was checked against
a real server): the window each tells, the tokens its tokenizer counts, its refusal of a prompt over the window,
and the replies that show a prompt did not fit (a cut, a context shift, a full window).
"""

import json
import os
import subprocess
import sys
import threading

import pytest
from local_servers import LLAMA_CPP_PYTHON, LLAMA_SERVER, TEMPLATE_TOKENS, VLLM, LocalServer, toy_tokens
from test_context_window import SUMMARY, Steps, complete, step, unlimited
from wire_servers import OllamaWireServer, prompt_of

from anges.agents import DefaultAgent
from anges.config.types import ModelPreset
from anges.models.base import Completion, Usage
from anges.models.openai_model import OpenAIModel
from anges.models.scripted import SUMMARY_PROMPT_MARK
from anges.models.tokens import TokenGauge
from anges.models.window import Window


class Numbers(Steps):
    """Steps whose commands print a few hundred numbers each: dense output that soon fills a small window."""

    def __call__(self, request):
        text = super().__call__(request)
        if self.done > self.steps or prompt_of(request).startswith(SUMMARY_PROMPT_MARK):
            return text
        return step(self.done, f"seq {self.done * 1000} {self.done * 1000 + 250}")


def run(server, steps, request="go", pad=0, numbers=False, **preset):
    server.replier = (Numbers if numbers else Steps)(steps, pad=pad)
    config = unlimited()
    model = OpenAIModel(ModelPreset("openai", "smollm2", f"{server.url}/v1", "", **preset), config.model_settings,
                        name="local:smollm2")
    return DefaultAgent(inference_func=model, cmd_init_dir=server.tmp, config=config).run_with_new_request(request)


@pytest.fixture
def local(clean_model_env, tmp_path):
    servers = []

    def start(kind, **options):
        server = LocalServer(kind, **options).start()
        server.tmp = tmp_path
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def steps_ran(stream):
    return [e.data["command"].split()[:3] for e in stream.events_list if e.type == "action"]


@pytest.mark.parametrize("kind", [LLAMA_SERVER, VLLM])
def test_the_servers_tokenizer_sizes_every_prompt_and_counts_each_piece_once(local, kind):
    server = local(kind, n_ctx=4096)
    stream = run(server, 12, numbers=True)  # each step adds dense output: the history folds often

    first = stream.events_list[0].data
    assert (first["context_window"], first["context_window_source"], first["token_count"]) == (4096, "server",
                                                                                                 "server")
    assert stream.events_list[-1].type == "task_completion" and len(steps_ran(stream)) == 12
    assert not any(request.facts["refused"] for request in server.requests)
    assert all(r.facts["prompt_tokens"] + r.facts["asked"] <= 4096 for r in server.requests), "room for the reply"
    assert len(set(server.tokenized)) == len(server.tokenized), "no piece is counted twice"
    assert sum(text.startswith("You are anges") for text in server.tokenized) == 1, "the instructions once"
    assert sum(map(len, server.tokenized)) < sum(len(prompt_of(r)) for r in server.requests) / 2, "only what is new"


def test_llama_cpp_pythons_empty_stream_is_taken_for_its_refusal_and_its_window_is_used(local):
    server = local(LLAMA_CPP_PYTHON, n_ctx=4096)  # it cannot say its window: 8,192 is assumed
    stream = run(server, 8, numbers=True)

    refused = [index for index, request in enumerate(server.requests) if request.facts["refused"]]
    assert len(refused) == 2, "one streamed request, then the same once unstreamed to hear why"
    first, second = (server.requests[index] for index in refused)
    assert first.body["stream"] is True and "stream" not in second.body and prompt_of(first) == prompt_of(second)
    notices = [e for e in stream.events_list if e.type == "context_exceeded"]
    assert len(notices) == 1 and "maximum context length is 4096 tokens" in notices[0].message
    assert (notices[0].data["server_window"], notices[0].data["kind"]) == (4096, "refused")
    later = server.requests[refused[1] + 1:]
    assert all(r.facts["prompt_tokens"] + r.facts["asked"] <= 4096 for r in later), "sized to the server's window"
    assert stream.events_list[-1].type == "task_completion" and len(steps_ran(stream)) == 8


def test_vllms_refusal_names_the_window_and_the_prompts_tokens_and_both_are_used(local):
    server = local(VLLM, n_ctx=4096)
    server.lookup_route = None  # a vLLM behind a proxy that passes only chat completions: nothing to ask
    stream = run(server, 8, numbers=True, context_window=8192)

    notices = [e for e in stream.events_list if e.type == "context_exceeded"]
    assert len(notices) == 1
    assert (notices[0].data["server_window"], notices[0].data["kind"]) == (4096, "refused")
    refused = [request for request in server.requests if request.facts.get("refused")]
    assert len(refused) == 1, "never sent twice"
    assert notices[0].data["server_prompt_tokens"] == refused[0].facts["prompt_tokens"]
    assert stream.events_list[-1].type == "task_completion" and len(steps_ran(stream)) == 8


def test_llama_server_answers_too_long_a_prompt_with_its_numbers(local):
    server = local(LLAMA_SERVER, n_ctx=2048)
    model = OpenAIModel(ModelPreset("openai", "smollm2", f"{server.url}/v1", "", context_window=2048))
    text = "word " * 3000

    with pytest.raises(Exception) as caught:
        model(text)

    error = caught.value
    assert (error.window, error.prompt_tokens) == (2048, len(toy_tokens(text)) + TEMPLATE_TOKENS)
    assert "exceeds the available context size (2048 tokens)" in str(error)


def test_a_preset_larger_than_the_servers_window_is_warned_about_and_the_servers_is_used(local, caplog):
    server = local(LLAMA_SERVER, n_ctx=2048)
    model = OpenAIModel(ModelPreset("openai", "smollm2", f"{server.url}/v1", "", context_window=16_384))

    assert model.window() == Window(2048, "server")
    assert "the preset's context_window (16,384 tokens) is more than the server at" in caplog.text
    assert "llama-server /props" in caplog.text


def test_a_server_that_reads_only_the_end_of_each_prompt_is_caught_by_the_second_request(clean_model_env, tmp_path):
    # Ollama's OpenAI-compatible API with a 1k window: every prompt is cut to the same count, which the usage says
    with OllamaWireServer(default_ctx=1024, chars_per_token=4.5) as server:
        server.replier = Steps(20, pad=2400)
        config = unlimited()
        preset = ModelPreset("openai", "qwen2.5-coder", f"{server.url}/v1", "", context_window=4096)
        model = OpenAIModel(preset, config.model_settings, name="local:qwen")
        stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config).run_with_new_request("go")

    cut = [index for index, request in enumerate(server.requests) if request.facts["cut"]]
    assert cut and cut[0] <= 1, "the first or the second request"
    notices = [e for e in stream.events_list if e.type == "context_exceeded"]
    assert notices and notices[0].data["kind"] == "cut"
    assert "I-NEVER-SAW-MY-INSTRUCTIONS" not in json.dumps([e.to_dict() for e in stream.events_list])


class ServedModel:
    """A model function whose server told its window (as a provider's `window()` does)."""

    name = "served"

    def __init__(self, replies, window=8192):
        self.replies, self.prompts, self.learned = list(replies), [], []
        self._window = Window(window, "server", "llama-server /props")

    def window(self):
        return self._window

    def learn_window(self, window):
        self.learned.append(window)
        self._window = window

    def __call__(self, prompt, temperature=0.0):
        self.prompts.append(prompt)
        reply = self.replies.pop(0)
        return reply(prompt) if callable(reply) else reply


def reply(text, prompt_tokens, output_tokens, finish="stop"):
    return Completion(text, usage=Usage(prompt_tokens, output_tokens), finish_reason=finish)


def test_a_full_window_is_told_apart_from_the_output_limit(local):
    # llama-cpp-python cannot say its window (8,192 is assumed): it cuts max_tokens to what its 3,500 leave
    server = local(LLAMA_CPP_PYTHON, n_ctx=3500)
    long_reply = json.dumps({"analysis": "plan " * 2500, "actions": []})
    server.enqueue_text(long_reply)
    server.enqueue_text(long_reply)
    stream = run(server, 3)

    notice = next(e for e in stream.events_list if e.type == "context_exceeded")
    first = server.requests[0]
    filled = 3500 - first.facts["prompt_tokens"]
    assert notice.data["kind"] == "full" and f"filled {filled:,} tokens into the reply" in notice.message
    assert "max_output_tokens" not in notice.message
    assert f"{3500 - TEMPLATE_TOKENS:,}" not in notice.message
    retried = server.requests[1]
    assert retried.facts["asked"] == 875, "the reply's room in the window the server turned out to have"
    told = prompt_of(server.requests[2])
    assert "Your previous reply was cut off" in told and "875 tokens" in told, "a reply too long for its room"
    assert stream.events_list[-1].type == "task_completion" and len(steps_ran(stream)) == 3


def test_a_context_shift_is_caught_by_usage_past_the_window(tmp_path):
    model = ServedModel([lambda prompt: reply(step(1, "echo I-NEVER-SAW-MY-INSTRUCTIONS"), len(prompt) // 3, 2100),
                         lambda prompt: reply(SUMMARY, len(prompt) // 4, 30),
                         lambda prompt: reply(complete(), len(prompt) // 4, 40)], window=4096)
    stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=unlimited()).run_with_new_request("go")

    notice = next(e for e in stream.events_list if e.type == "context_exceeded")
    assert notice.data["kind"] == "shifted" and "dropped the start of the prompt" in notice.message
    assert "I-NEVER-SAW-MY-INSTRUCTIONS" not in json.dumps([e.to_dict() for e in stream.events_list])
    assert stream.events_list[-1].type == "task_completion"


def test_one_dense_prompt_does_not_skew_the_estimate_of_the_instructions(local):
    server = local(LLAMA_SERVER)
    instructions = run_once_for_the_instructions(server)
    truth = len(toy_tokens(instructions))
    gauge = TokenGauge()
    history = "".join(f"$ ls -l /tmp/x{n}\n-rw-r--r-- 1 root root {n * 37} Nov 29 05:41 file{n}.txt\n" for n in range(60))
    for size in range(0, 4800, 800):  # the prompts of a few steps, read whole
        gauge.observe(instructions + history[:size], len(toy_tokens(instructions + history[:size])))
    before = gauge.estimate(instructions)
    numbers = "\n".join(f"{n} {n * 7919 % 100_003} {n * 2654435761 % 2**32}" for n in range(900))
    gauge.observe(numbers, len(toy_tokens(numbers)))  # a summary of a command's numbers: about a token a character

    after = gauge.estimate(instructions)
    assert truth <= after <= truth * 1.25, "still on the safe side, and close"
    assert after <= before * 1.05, "the numbers' rate is the digits' own"
    assert gauge.estimate(numbers) >= len(toy_tokens(numbers)), "dense text is not underestimated"


def run_once_for_the_instructions(server):
    stream = run(server, 0)
    assert stream.events_list[-1].type == "task_completion"
    return prompt_of(server.requests[0]).split("\n# History\n")[0]


def test_anges_models_asks_each_server_for_its_window_and_tokenizer(local, tmp_path):
    servers = {kind: local(kind, n_ctx=n_ctx) for kind, n_ctx in ((LLAMA_SERVER, 4096), (VLLM, 32_768),
                                                                  (LLAMA_CPP_PYTHON, 2048))}
    with OllamaWireServer(context_length=131_072) as ollama:
        config = tmp_path / "config.yaml"
        config.write_text("models:\n" + "".join(
            f"  {kind}: {{provider: openai, model: smollm2, base_url: '{server.url}/v1'{extra}}}\n"
            for (kind, server), extra in zip(servers.items(), ("", "", ", context_window: 2048"))) +
            f"  ollama: {{provider: ollama, model: qwen2.5-coder, base_url: '{ollama.url}'}}\n")
        out = subprocess.run([sys.executable, "-m", "anges", "models", "--config", str(config)], capture_output=True,
                             text=True, timeout=120, env=os.environ, check=True)

    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert lines[LLAMA_SERVER].endswith("4,096 tokens (server: llama-server /props), counted by the server")
    assert lines[VLLM].endswith("32,768 tokens (server: vLLM /v1/models), counted by the server")
    assert lines[LLAMA_CPP_PYTHON].endswith("2,048 tokens (preset), counted by the server"), "it cannot tell"
    assert lines["ollama"].endswith("131,072 tokens (server: Ollama /api/show)")


def test_the_status_line_shows_the_window_and_where_it_came_from(local):
    from anges.cli.status import Status

    stream = run(local(LLAMA_SERVER, n_ctx=4096), 1)
    status = Status(model="local:smollm2", sandbox="workspace", approval="ask")
    for event in stream.events_list:
        status.recorded(event)

    assert "local:smollm2 · 4,096-token window (server) · sandbox workspace" in status.line()
    assert status.window["context_window_detail"] == "llama-server /props" and status.window["token_count"] == "server"
    status.begin()
    assert "4,096-token window (server)" in status.line(width=200), "and while a request runs"


class HangingTokenizer(LocalServer):
    """llama-server whose tokenizer answers nothing until `release` is set (a server busy with another slot)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release, self.asked = threading.Event(), threading.Event()

    def answer_lookup(self, request):
        if request.path == "/tokenize":
            self.asked.set()
            self.release.wait(60)
        return super().answer_lookup(request)


def test_a_stop_while_the_servers_tokenizer_is_counting_ends_the_run_at_once(clean_model_env, tmp_path):
    server = HangingTokenizer(LLAMA_SERVER, n_ctx=4096).start()
    try:
        server.replier = Steps(3)
        config = unlimited()
        model = OpenAIModel(ModelPreset("openai", "smollm2", f"{server.url}/v1", ""), config.model_settings,
                            name="local:smollm2")
        agent = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config)
        runner = threading.Thread(target=agent.run_with_new_request, args=("go",), daemon=True)
        runner.start()
        assert server.asked.wait(60), "the prompt is being counted"
        agent.interrupt("SIGINT")
        runner.join(5)  # not the tokenizer's timeout (10 s): the count is given up at the stop
        assert not runner.is_alive(), "the run ended while its tokenizer still had not answered"
        assert not server.release.is_set()
        assert agent.event_stream.events_list[-1].type == "task_interrupted"
        assert not any(request.path.endswith("/chat/completions") for request in server.requests), "nothing sent"
    finally:
        server.release.set()
        server.close()
