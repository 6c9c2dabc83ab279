"""Choosing a model by name: presets, provider:model-id, preset:model-id, auto, replay, scripted, errors."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from wire_servers import TEST_KEY

from anges.config.types import Config, ModelPreset
from anges.exceptions import ModelSetupError
from anges.models import get_model
from anges.models.anthropic_model import AnthropicModel
from anges.models.gemini_model import GeminiModel
from anges.models.ollama_model import OllamaModel
from anges.models.openai_model import OpenAIModel
from anges.models.replay import RecordingModel, ReplayModel

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("clean_model_env")



@pytest.fixture
def all_keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.setenv(name, TEST_KEY)


@pytest.mark.parametrize(("name", "cls", "model_id", "shown"), [
    ("openai", OpenAIModel, "gpt-4.1", "openai:gpt-4.1"),
    ("openai:gpt-4.1-mini", OpenAIModel, "gpt-4.1-mini", "openai:gpt-4.1-mini"),
    ("gemini", GeminiModel, "gemini-3.8-flash", "gemini:gemini-3.8-flash"),
    ("gemini:gemini-2.5-flash", GeminiModel, "gemini-2.5-flash", "gemini:gemini-2.5-flash"),
    ("claude", AnthropicModel, "claude-sonnet-5", "claude:claude-sonnet-5"),
    ("anthropic:claude-opus-4-1", AnthropicModel, "claude-opus-4-1", "anthropic:claude-opus-4-1"),
    ("deepseek", OpenAIModel, "deepseek-chat", "deepseek:deepseek-chat"),
    ("deepseek:deepseek-reasoner", OpenAIModel, "deepseek-reasoner", "deepseek:deepseek-reasoner"),
    ("ollama", OllamaModel, "qwen2.5-coder", "ollama:qwen2.5-coder"),
    ("ollama:qwen2.5-coder:7b", OllamaModel, "qwen2.5-coder:7b", "ollama:qwen2.5-coder:7b"),
])
def test_every_name_form(all_keys, name, cls, model_id, shown):
    model = get_model(name, Config())

    assert type(model) is cls
    assert model.preset.model == model_id
    assert model.name == shown
    assert get_model(model.name, Config()).preset == model.preset  # the name builds the same model again


def test_preset_model_id_keeps_the_rest_of_the_preset(all_keys):
    model = get_model("deepseek:deepseek-reasoner", Config())
    assert model.base_url == "https://api.deepseek.com"
    assert model.key_env == "DEEPSEEK_API_KEY"


def test_a_provider_name_without_a_preset_uses_the_provider_key(all_keys):
    model = get_model("anthropic:claude-x", Config())
    assert model.key_env == "ANTHROPIC_API_KEY"


def test_a_user_preset(monkeypatch):
    monkeypatch.setenv("WORK_GATEWAY_KEY", TEST_KEY)
    config = Config()
    config.models["work"] = ModelPreset("openai", "team-model", "https://gateway.example/v1", "WORK_GATEWAY_KEY")

    model = get_model("work", config)

    assert model.name == "work:team-model"
    assert model.key_env == "WORK_GATEWAY_KEY"
    assert model.base_url == "https://gateway.example/v1"


def test_no_name_means_the_agent_types_model(all_keys):
    agents = Config().agents  # config is frozen: build it with the setting
    config = Config(model="openai", agents={
        **agents, "task_analyzer": agents["task_analyzer"].model_copy(update={"model": "gemini:gemini-2.5-flash"})})

    assert get_model(config=config).name == "openai:gpt-4.1"
    assert get_model(config=config, agent_type="task_analyzer").name == "gemini:gemini-2.5-flash"


def test_without_a_config_the_packaged_defaults_apply(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", TEST_KEY)
    assert get_model().name == "gemini:gemini-3.8-flash"  # model: auto; only Gemini has a key


@pytest.mark.parametrize(("variable", "preset"), [
    ("ANTHROPIC_API_KEY", "claude"),
    ("OPENAI_API_KEY", "openai"),
    ("OPENAI_BASE_URL", "openai"),
    ("GEMINI_API_KEY", "gemini"),
    ("GOOGLE_API_KEY", "gemini"),
    ("DEEPSEEK_API_KEY", "deepseek"),
])
def test_auto_picks_the_preset_whose_credentials_are_present(monkeypatch, variable, preset):
    monkeypatch.setenv(variable, "http://127.0.0.1:9/v1" if variable == "OPENAI_BASE_URL" else TEST_KEY)
    assert get_model("auto", Config()).name.split(":")[0] == preset


def test_auto_follows_auto_order(all_keys):
    assert get_model("auto", Config()).name.startswith("claude:")
    assert get_model("auto", Config(auto_order=["gemini", "claude"])).name.startswith("gemini:")


def test_vertex_counts_as_credentials_for_auto(monkeypatch):
    monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "my-project")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "us-central1")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/credentials.json")
    from anges.models import find_preset

    assert find_preset("auto", Config())[0] == "gemini"


def test_no_credentials_give_one_clear_message(anges_home):
    with pytest.raises(ModelSetupError) as caught:
        get_model(None, Config())
    message = str(caught.value)
    for variable in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                     "DEEPSEEK_API_KEY"):
        assert variable in message
    assert f"`model:` in {anges_home / 'config.yaml'}" in message and "--model" in message
    assert "\n" not in message


def test_an_unknown_name_lists_the_valid_ones():
    config = Config()
    config.models["mine"] = ModelPreset("openai", "m")
    for name in ("gtp-4", "mistral:large"):
        with pytest.raises(ModelSetupError) as caught:
            get_model(name, config)
        message = str(caught.value)
        assert repr(name) in message
        assert "openai, gemini, claude, deepseek, ollama, mine" in message
        assert "providers: openai, gemini, anthropic" in message
        assert "replay:FILE" in message and "auto" in message


def test_an_unknown_provider_in_a_preset_lists_the_known_ones():
    config = Config()
    config.models["odd"] = ModelPreset("mistral", "large", api_key_env="")
    with pytest.raises(ModelSetupError, match=r"unknown provider 'mistral' \(known: openai, gemini, anthropic, ollama\)"):
        get_model("odd", config)


def test_an_empty_model_id_is_refused(all_keys):
    with pytest.raises(ModelSetupError, match="no model id"):
        get_model("openai:", Config())


def test_a_preset_whose_key_is_unset_names_the_variable():
    with pytest.raises(ModelSetupError, match="deepseek:deepseek-chat needs an API key: set DEEPSEEK_API_KEY"):
        get_model("deepseek", Config())


def test_auto_order_naming_no_preset_says_so(all_keys):
    with pytest.raises(ModelSetupError, match="auto_order names 'gpt5'"):
        get_model("auto", Config(auto_order=["gpt5"]))


def test_replay_names_a_recording(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"prompt": "p", "reply": "r"}) + "\n")

    model = get_model(f"replay:{path}", Config())

    assert isinstance(model, ReplayModel)
    assert model("p") == "r"


def test_scripted_names_load_the_scripted_model_lazily(monkeypatch, tmp_path):
    # A stand-in for anges.models.scripted (owned elsewhere): only the lazy hand-off is checked here.
    loaded = []
    stand_in = types.ModuleType("anges.models.scripted")
    stand_in.ScriptedModel = type("ScriptedModel", (), {"from_file": staticmethod(lambda p: loaded.append(p) or p)})
    monkeypatch.setitem(sys.modules, "anges.models.scripted", stand_in)

    assert get_model(f"scripted:{tmp_path / 'replies.txt'}", Config()) == str(tmp_path / "replies.txt")
    assert loaded == [str(tmp_path / "replies.txt")]


def test_record_wraps_any_model(all_keys, tmp_path):
    model = get_model("openai", Config(), record=tmp_path / "rec.jsonl")
    assert isinstance(model, RecordingModel)
    assert model.name == "openai:gpt-4.1"


def test_importing_anges_models_loads_no_sdk():
    code = ("import sys, anges, anges.models, anges.models.retry, anges.models.pricing, anges.models.replay\n"
            "anges.get_model\n"
            "print([m for m in ('openai', 'google.genai', 'anthropic', 'httpx2', 'httpx') if m in sys.modules])\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
