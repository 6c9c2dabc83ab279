"""Layered configuration: packaged defaults, ANGES_HOME, ANGES_CONFIG/--config, arguments; precise errors."""

import pytest

from anges.config.loading import AGENT_TYPES, load_config, resource_path
from anges.config.loading import anges_home as home_dir
from anges.config.types import Config
from anges.exceptions import ConfigError

pytestmark = pytest.mark.packaged_safety  # the defaults as packaged, on every machine (see optional_groups.py)


def write(path, text):
    path.write_text(text)
    return path


def test_packaged_yaml_documents_exactly_the_typed_defaults():
    assert load_config() == Config(), "config.yaml and the dataclass defaults have drifted apart"


def test_layers_later_wins(anges_home, tmp_path, monkeypatch):
    write(anges_home / "config.yaml", "model: openai\nagents:\n  common:\n    shell_cmd_timeout: 100\n")
    assert load_config().model == "openai"
    env_file = write(tmp_path / "env.yaml", "model: gemini\n")
    monkeypatch.setenv("ANGES_CONFIG", str(env_file))
    config = load_config()
    assert config.model == "gemini" and config.agent("default").shell_cmd_timeout == 100
    flag_file = write(tmp_path / "flag.yaml", "model: claude\n")
    assert load_config(flag_file).model == "claude"
    assert load_config(flag_file, overrides={"model": "ollama"}).model == "ollama"


def test_agent_sections_inherit_the_common_block(tmp_path):
    path = write(tmp_path / "c.yaml", "agents:\n  common:\n    max_model_calls: 7\n    notes: [be brief]\n"
                                      "  task_executor:\n    max_model_calls: 9\n")
    config = load_config(path)
    assert config.agent("default").max_model_calls == 7
    assert config.agent("task_executor").max_model_calls == 9
    assert config.agent("task_executor").notes == ["be brief"]
    assert config.agent("orchestrator").max_model_calls == 7, "common overrides the packaged per-type value too"
    assert set(config.agents) == set(AGENT_TYPES)


def test_model_for_prefers_the_agent_type_setting(tmp_path):
    config = load_config(write(tmp_path / "c.yaml", "model: openai\nagents:\n  task_analyzer:\n    model: gemini\n"))
    assert config.model_for("task_analyzer") == "gemini" and config.model_for("default") == "openai"


def test_unknown_key_names_file_key_and_valid_keys(tmp_path):
    path = write(tmp_path / "c.yaml", "agents:\n  common:\n    max_stepz: 3\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert str(path) in message and "agents.common.max_stepz" in message and "max_model_calls" in message


def test_max_steps_is_another_name_for_the_events_limit(tmp_path):
    config = load_config(write(tmp_path / "c.yaml", "agents:\n  common:\n    max_steps: 12\n"
                                                    "  orchestrator:\n    max_steps: 30\n"))
    assert config.agent("default").max_number_of_events_to_exhaust == 12
    assert config.agent("orchestrator").max_number_of_events_to_exhaust == 30
    assert load_config(overrides={"agents": {"default": {"max_steps": 4}}}).agent("default") \
        .max_number_of_events_to_exhaust == 4
    both = write(tmp_path / "both.yaml", "agents:\n  common:\n    max_steps: 3\n    max_number_of_events_to_exhaust: 4\n")
    with pytest.raises(ConfigError, match=r"agents\.common sets both 'max_steps' and 'max_number_of_events_to_exhaust'"):
        load_config(both)
    with pytest.raises(ConfigError, match=r"key 'agents\.common\.max_number_of_events_to_exhaust' \(max_steps\): expected an integer"):
        load_config(write(tmp_path / "bad.yaml", "agents:\n  common:\n    max_steps: many\n"))


def test_a_template_dir_that_does_not_exist_is_reported(tmp_path, caplog, monkeypatch):
    missing = tmp_path / "no-such-templates"
    with caplog.at_level("WARNING", logger="anges.config.loading"):
        config = load_config(write(tmp_path / "c.yaml", f"prompt:\n  template_dir: {missing}\n"))
    assert config.prompt.template_dir == str(missing)
    assert [r.getMessage() for r in caplog.records] == [
        f"prompt.template_dir {missing} is not a directory: the packaged templates are used instead"]
    caplog.clear()
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine").mkdir()
    with caplog.at_level("WARNING", logger="anges.config.loading"):
        config = load_config(write(tmp_path / "ok.yaml", "prompt:\n  template_dir: ~/mine\n"))
    assert caplog.records == [] and config.prompt.template_dir == str(tmp_path / "mine")


def test_unknown_agent_section(tmp_path):
    with pytest.raises(ConfigError, match=r"agents\.task_excutor.*valid keys here: common, default"):
        load_config(write(tmp_path / "c.yaml", "agents:\n  task_excutor: {}\n"))


@pytest.mark.parametrize("text,key,expected", [
    ("web:\n  port: '80'\n", "web.port", "an integer"),
    ("web:\n  port: true\n", "web.port", "an integer"),
    ("agents:\n  common:\n    timeout: soon\n", "agents.common.timeout", "a number"),
    ("agents:\n  common:\n    notes: just one\n", "agents.common.notes", "a list"),
    ("models:\n  mine:\n    provider: 3\n", "models.mine.provider", "a string"),
    ("web: 5\n", "web", "a mapping"),
])
def test_wrong_type_names_file_key_and_expectation(tmp_path, text, key, expected):
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert str(path) in message and f"'{key}'" in message and f"expected {expected}" in message


def test_broken_yaml_names_the_line(tmp_path):
    path = write(tmp_path / "c.yaml", "model: auto\nweb:\n  port: [1, 2\n")
    with pytest.raises(ConfigError, match=rf"{path}: not valid YAML \(line \d+"):
        load_config(path)


def test_top_level_must_be_a_mapping_and_empty_is_fine(tmp_path):
    with pytest.raises(ConfigError, match="expected a mapping of keys at the top level, got list"):
        load_config(write(tmp_path / "list.yaml", "- a\n- b\n"))
    assert load_config(write(tmp_path / "empty.yaml", "")) == Config()


def test_a_named_file_that_is_missing_is_an_error(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    monkeypatch.setenv("ANGES_CONFIG", str(tmp_path / "also-nope.yaml"))
    with pytest.raises(ConfigError, match="also-nope.yaml: config file not found"):
        load_config()


def test_bad_override_arguments_are_reported_as_arguments():
    with pytest.raises(ConfigError, match=r"^arguments: key 'agents.common.timeout'"):
        load_config(overrides={"agents": {"common": {"timeout": "x"}}})


def test_user_presets_extend_the_packaged_ones(tmp_path):
    config = load_config(write(tmp_path / "c.yaml", "models:\n  work:\n    provider: openai\n    model: m1\n"
                                                    "    base_url: http://gateway.local/v1\n"))
    assert config.models["work"].base_url == "http://gateway.local/v1" and "openai" in config.models


def test_home_and_resources(anges_home):
    assert home_dir() == anges_home
    assert resource_path("config.yaml").is_file() and (resource_path("prompt_templates") / "base_agent.j2").is_file()


def test_every_field_has_a_docstring_in_the_yaml():
    text = resource_path("config.yaml").read_text()
    for name in Config.model_fields:
        assert f"\n{name}:" in text or text.startswith(f"{name}:"), name


def test_a_loaded_config_is_frozen_and_the_shared_default_stays_as_packaged(tmp_path):
    from pydantic import ValidationError

    from anges.agents import DefaultAgent
    from anges.config.loading import default_config

    shared = default_config()
    with pytest.raises(ValidationError, match="frozen"):
        shared.agent("default").timeout = 5
    with pytest.raises(ValidationError, match="frozen"):
        shared.model = "ollama"
    agent = DefaultAgent(inference_func=lambda prompt, temperature=0.0: "", cmd_init_dir=tmp_path,
                         max_consecutive_actions_to_summarize=2)
    assert agent.agent_config.max_consecutive_actions_to_summarize == 2
    assert default_config().agent("default").max_consecutive_actions_to_summarize == 50
    changed = shared.model_copy(update={"model": "ollama"})
    assert changed.model == "ollama" and default_config().model == "auto"


def test_presets_and_rules_still_take_their_fields_in_order():
    from anges.config.types import ModelPreset, SafetyRule

    assert ModelPreset("openai", "m", "http://local/v1") == ModelPreset(provider="openai", model="m",
                                                                       base_url="http://local/v1")
    assert SafetyRule("RUN_SHELL_CMD", "make *", "allow").decision == "allow"
    with pytest.raises(ValueError, match="decision"):
        SafetyRule("RUN_SHELL_CMD", "make *", "perhaps")


def test_importing_the_config_module_does_not_import_pydantic():
    import subprocess
    import sys

    code = ("import sys, anges.config.loading, anges.store.event_store\n"
            "print('pydantic' in sys.modules)\n"
            "anges.config.loading.load_config()\n"
            "print('pydantic' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
