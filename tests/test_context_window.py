"""Runs sized to the model's context window: every prompt fits, the instructions are never cut, and a server that
cuts a prompt (as Ollama does) makes the run say so and stop rather than go on with a model that did not read it.

The servers are loopback servers speaking Ollama's native API and its OpenAI-compatible one (`OllamaWireServer`):
they count tokens at a fixed rate and cut a prompt longer than their window the way Ollama does.
"""

import json
import os
import subprocess
import sys

from wire_servers import OllamaWireServer, prompt_of

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.config.types import ModelPreset
from anges.models import get_model
from anges.models.base import Completion, Usage
from anges.models.openai_model import OpenAIModel
from anges.models.replay import ReplayModel, with_recording
from anges.models.scripted import ScriptedModel, is_summary_prompt

ANGES = [sys.executable, "-m", "anges"]
SUMMARY = "Summary: the agent echoed each step in turn; every command exited 0. Open: the next steps."


def unlimited(**prompt):
    return load_config(overrides={"agents": {"common": {"max_number_of_events_to_exhaust": 0, "max_model_calls": 0,
                                                        "max_repeated_actions": 0}}, "prompt": prompt})


def step(n, command=None):
    return json.dumps({"analysis": "", "reasoning": f"step {n}",
                       "actions": [{"action_type": "RUN_SHELL_CMD", "command": command or f"echo step {n}"}]})


def complete(content="done"):
    return json.dumps({"reasoning": "finished", "actions": [{"action_type": "TASK_COMPLETE", "content": content}]})


class Steps:
    """A server's replier: `steps` echo commands, then a completion; folds get a summary. A prompt the server cut
    gets a reply that must never run."""

    def __init__(self, steps, pad=0):
        self.steps, self.done, self.pad = steps, 0, pad

    def __call__(self, request):
        if is_summary_prompt(prompt_of(request)):
            return SUMMARY
        if request.facts.get("cut"):
            return step(0, "echo I-NEVER-SAW-MY-INSTRUCTIONS")
        self.done += 1
        return step(self.done, f"echo step {self.done} {'x' * self.pad}".strip()) if self.done <= self.steps else (
            complete())


def assert_every_prompt_fit_and_kept_its_instructions(server, fixed):
    assert server.requests
    for request in server.requests:
        facts, prompt = request.facts, prompt_of(request)
        assert not facts["cut"], "a prompt over the server's window"
        body = request.body
        reply = body["options"]["num_predict"] if "options" in body else body["max_tokens"]
        assert facts["prompt_tokens"] + reply <= facts["window"], "no room left for the reply"
        if not is_summary_prompt(prompt):
            assert prompt.startswith(fixed) and "\n# History\n" in prompt, "the instructions are in every prompt"


def test_a_100_step_run_on_a_4k_ollama_model_fits_every_request_and_keeps_its_instructions(tmp_path, monkeypatch,
                                                                                           clean_model_env):
    # the server's tokenizer is denser than the estimate's default: the reported counts must correct it
    with OllamaWireServer(context_length=4096, chars_per_token=3.2) as server:
        server.replier = Steps(100)
        monkeypatch.setenv("OLLAMA_HOST", server.url.removeprefix("http://"))
        config = unlimited()
        agent = DefaultAgent(inference_func=get_model("ollama", config), cmd_init_dir=tmp_path, config=config)

        stream = agent.run_with_new_request("echo the steps, one per step")

    events = stream.events_list
    assert events[0].data["context_window"] == 4096 and events[0].data["context_window_source"] == "server"
    assert [e.data["command"] for e in events if e.type == "action"] == [f"echo step {n}" for n in range(1, 101)]
    assert events[-1].type == "task_completion"
    assert all(request.body["options"]["num_ctx"] <= 4096 for request in server.requests)
    fixed = prompt_of(server.requests[0]).split("\n# History\n")[0]
    assert_every_prompt_fit_and_kept_its_instructions(server, fixed)
    assert len(stream.event_summaries_list) >= 5, "a small window folds often"
    assert "echo the steps, one per step" in prompt_of(server.requests[-1]), "the request is kept word for word"


def test_a_run_through_ollamas_openai_compatible_api_fits_the_window_ollama_serves(tmp_path, clean_model_env):
    with OllamaWireServer(default_ctx=4096, chars_per_token=3.6) as server:
        server.replier = Steps(40)
        config = unlimited()
        model = OpenAIModel(ModelPreset("openai", "qwen2.5-coder", f"{server.url}/v1", ""), config.model_settings)
        stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config).run_with_new_request("go")

    assert stream.events_list[-1].type == "task_completion"
    assert stream.events_list[0].data["context_window"] == 4096, "Ollama's default: num_ctx cannot be sent there"
    assert all(request.path == "/v1/chat/completions" for request in server.requests)
    assert_every_prompt_fit_and_kept_its_instructions(server, prompt_of(server.requests[0]).split("\n# History")[0])


def test_a_server_that_cuts_a_prompt_once_is_told_folded_and_asked_again(tmp_path, clean_model_env):
    # the preset claims 8k, but the server serves 2.5k and cuts a longer prompt from its start without an error
    with OllamaWireServer(default_ctx=2560) as server:
        server.replier = Steps(40, pad=130)
        config = unlimited()
        preset = ModelPreset("openai", "qwen2.5-coder", f"{server.url}/v1", "", context_window=8192)
        model = OpenAIModel(preset, config.model_settings, name="local:qwen2.5-coder")
        stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=config).run_with_new_request("go")

    cut = [index for index, request in enumerate(server.requests) if request.facts["cut"]]
    assert len(cut) == 1, "after one cut the prompts stay under the size that was cut"
    notices = [e for e in stream.events_list if e.type == "context_exceeded"]
    assert len(notices) == 1
    assert notices[0].message.startswith("local:qwen2.5-coder read only 1,282 of the about ")
    assert "a window of 8,192 tokens (set in its preset)" in notices[0].message
    assert "I-NEVER-SAW-MY-INSTRUCTIONS" not in json.dumps([e.to_dict() for e in stream.events_list])
    assert is_summary_prompt(prompt_of(server.requests[cut[0] + 1])), "it folds before asking again"
    assert stream.events_list[-1].type == "task_completion"
    assert [e.data["command"].split()[:3] for e in stream.events_list if e.type == "action"] == [
        ["echo", "step", str(n)] for n in range(1, 41)]


def test_a_server_that_keeps_cutting_stops_the_run_with_exit_4_naming_the_window(tmp_path, clean_model_env):
    with OllamaWireServer(default_ctx=2048) as server:
        server.replier = Steps(40)
        config = tmp_path / "config.yaml"
        config.write_text(f"models:\n  local:\n    provider: openai\n    model: qwen2.5-coder\n"
                          f"    base_url: {server.url}/v1\n    context_window: 8192\n")
        out = subprocess.run([*ANGES, "-q", "echo the steps", "--model", "local", "--config", str(config)],
                             cwd=tmp_path, env=os.environ, capture_output=True, text=True, timeout=60, check=False)

    assert out.returncode == 4, out.stderr
    assert "read only 1,026 of the about" in out.stderr and "a window of 8,192 tokens" in out.stderr
    assert "do not fit the context window of local:qwen2.5-coder" in out.stderr
    assert "I-NEVER-SAW-MY-INSTRUCTIONS" not in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


def test_a_second_cut_right_after_the_fold_stops_the_run(tmp_path):
    calls = []

    def cutting(prompt, temperature=0.0):  # reads the whole prompt until it grows past 30,000 characters or folds
        calls.append(prompt)
        if is_summary_prompt(prompt):
            return Completion(SUMMARY, usage=Usage(input_tokens=len(prompt) // 4, output_tokens=20))
        cut = len(prompt) > 30_000 or any(is_summary_prompt(call) for call in calls)
        return Completion(step(len(calls), "seq 1 1000"),
                          usage=Usage(input_tokens=900 if cut else len(prompt) // 4, output_tokens=20))

    cutting.name = "cutter"
    cutting.context_window = 32_768
    stream = DefaultAgent(inference_func=cutting, cmd_init_dir=tmp_path, config=unlimited()).run_with_new_request("go")

    types = [e.type for e in stream.events_list]
    assert types[-3:] == ["context_exceeded", "history_folded", "task_interrupted"]
    assert types.count("context_exceeded") == 1
    assert "cutter read only 900 of the about" in stream.events_list[-3].message
    stop = stream.events_list[-1]
    assert stop.data["reason"] == "context_window"
    assert "does not fit the context window of cutter, even with the history folded" in stop.content
    assert "cutter read only 900 of the about" in stop.content
    assert is_summary_prompt(calls[-2]), "folded, then asked once more"
    assert len(calls[-1]) < len(calls[-3]), "the prompt asked again was smaller"


def test_a_server_that_says_the_prompt_is_too_long_is_asked_again_after_a_fold(openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for n in range(1, 4):
        openai_server.enqueue_text(step(n, "seq 1 3000"))
    openai_server.enqueue_error(400, message="This model's maximum context length is 32768 tokens. However, you "
                                             "requested 33000 tokens")
    openai_server.enqueue_text(SUMMARY)
    openai_server.enqueue_text(complete())
    preset = ModelPreset("openai", "served", openai_server.base_url, "OPENAI_API_KEY", context_window=32_768)
    config = unlimited(recent_events_in_full=1)
    agent = DefaultAgent(inference_func=OpenAIModel(preset, config.model_settings), cmd_init_dir=tmp_path,
                         config=config)

    stream = agent.run_with_new_request("go")

    assert [e.type for e in stream.events_list][-3:] == ["context_exceeded", "history_folded", "task_completion"]
    assert "maximum context length is 32768" in stream.events_list[-3].message
    assert stream.event_summaries_list, "folded before asking again"
    sent = [len(prompt_of(request)) for request in openai_server.requests]
    assert len(sent) == 6 and sent[5] < sent[3], "asked again with a smaller prompt"


def test_instructions_that_cannot_fit_a_tiny_window_stop_at_once(tmp_path):
    model = ScriptedModel([complete()], context_window=2048)
    stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=unlimited()).run_with_new_request("hi")

    stop = stream.events_list[-1]
    assert stop.type == "task_interrupted" and stop.data["reason"] == "context_window"
    assert "instructions alone" in stop.content and "2,048 tokens" in stop.content and "512 of them" in stop.content
    assert stop.data["context_window"] == 2048
    assert model.prompts == [], "no model call"


def test_a_prompt_that_still_does_not_fit_is_cut_in_the_history_never_in_the_instructions(tmp_path):
    prompts = []
    for request in ("hi", "Start of the request. " + "filler " * 8000 + "End of the request."):
        model = ScriptedModel([complete()], context_window=8192)
        stream = DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=unlimited()).run_with_new_request(
            request)
        assert stream.events_list[-1].type == "task_completion"
        prompts.append(model.prompts[0])

    short, long = prompts
    fixed = short[:short.index("\n# History\n")]
    assert long.startswith(fixed), "the instructions are whole"
    assert len(long) < 8192 * 3.5, "cut to the window"
    assert "Start of the request." in long and long.rstrip().endswith("End of the request.")
    assert "characters cut] ..." in long[len(fixed):], "the cut is marked, in the history"


def test_a_small_window_scales_the_history_and_a_commands_output_and_says_it_in_the_first_event(tmp_path):
    script = [step(1, "seq 1 5000"), complete()]
    small, large = ScriptedModel(list(script), context_window=8192), ScriptedModel(list(script))
    streams = [DefaultAgent(inference_func=model, cmd_init_dir=tmp_path, config=unlimited()).run_with_new_request(
        "count") for model in (small, large)]

    first, output = streams[0].events_list[0], streams[0].events_list[1]
    assert (first.data["context_window"], first.data["context_window_source"]) == (8192, "model")
    assert "context_window" not in streams[1].events_list[0].data, "a plain model says nothing of a window"
    assert len(output.content) < len(streams[1].events_list[1].content) < 9000
    assert "FULL OUTPUT: 5000 lines" in output.content, "the rest is in a file the model can read"
    assert len(small.prompts[1]) < len(large.prompts[1])


def test_a_recorded_run_on_a_small_window_replays_with_the_same_prompts(tmp_path):
    recording = tmp_path / "run.jsonl"
    model = ScriptedModel([step(n) for n in range(1, 30)] + [complete()], summary=SUMMARY, context_window=4096)
    DefaultAgent(inference_func=with_recording(model, recording), cmd_init_dir=tmp_path,
                 config=unlimited()).run_with_new_request("echo the steps")

    replay = ReplayModel(recording)  # strict: a prompt that differs from the recording is an error
    stream = DefaultAgent(inference_func=replay, cmd_init_dir=tmp_path, config=unlimited()).run_with_new_request(
        "echo the steps")

    assert replay.context_window == 4096
    last = stream.events_list[-1]
    assert last.type == "task_completion" and replay.divergence is None, (last.content, str(replay.divergence))
    assert replay.calls == len(model.prompts)


def test_anges_models_lists_the_presets_with_their_windows(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("models:\n  local: {provider: openai, model: m, base_url: 'http://127.0.0.1:9/v1', "
                      "context_window: 4096}\n")
    out = subprocess.run([*ANGES, "models", "--config", str(config)], capture_output=True, text=True, timeout=60,
                         check=True)
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert lines["claude"].endswith("claude-sonnet-5   200,000 tokens (known)")
    assert lines["local"].endswith("4,096 tokens (preset)"), "the server at port 9 does not answer"
    assert lines["deepseek"].endswith("128,000 tokens (known); the server was not asked: no DEEPSEEK_API_KEY")
