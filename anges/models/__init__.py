"""Choosing a model by name. Provider SDKs load only when a model of theirs is built.

Names: a preset (`openai`, `gemini`, `claude`, `deepseek`, `ollama`, or your own), `PROVIDER:MODEL-ID`
(`openai:gpt-4.1-mini`, `gemini:gemini-2.5-flash`, `anthropic:claude-sonnet-4-5`), `PRESET:MODEL-ID` (the
preset with another model id: `ollama:qwen2.5-coder:7b`, `deepseek:deepseek-reasoner`), `replay:FILE`,
`scripted:FILE`, and `auto` (the first preset of `auto_order` whose credentials are present).
"""

from __future__ import annotations

import dataclasses
import os
from importlib import import_module

from anges.config import Config, ModelPreset, default_config
from anges.exceptions import ModelSetupError
from anges.models.base import Completion, Model, Usage
from anges.models.provider import config_hint, has_credentials, key_env_names
from anges.models.replay import RecordingModel, ReplayModel, replay_model, with_recording

PROVIDERS = {
    "openai": "anges.models.openai_model.OpenAIModel",
    "gemini": "anges.models.gemini_model.GeminiModel",
    "anthropic": "anges.models.anthropic_model.AnthropicModel",
}
"""Provider name -> the class that speaks to it, imported on first use."""

PROVIDER_KEYS = {"openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
"""The key variable of `PROVIDER:MODEL-ID` names when no preset of that name exists."""

__all__ = ["PROVIDERS", "Completion", "Model", "RecordingModel", "ReplayModel", "Usage", "find_preset",
           "get_model", "provider_class", "with_recording"]


def get_model(name: str | None = None, config: Config | None = None, agent_type: str = "default", *,
              record: str | os.PathLike | None = None) -> Model:
    """The model a name stands for (default: the one configured for `agent_type`), recorded to `record` if given."""
    config = config or default_config()
    name = (name or config.model_for(agent_type)).strip()
    scheme, _, rest = name.partition(":")
    if scheme == "replay" and rest:
        model: Model = replay_model(rest)
    elif scheme == "scripted" and rest:
        model = import_module("anges.models.scripted").ScriptedModel.from_file(rest)
    else:
        label, preset = find_preset(name, config)
        model = provider_class(preset.provider)(preset, config.model_settings, config.retry,
                                                name=f"{label}:{preset.model}")
    return with_recording(model, record) if record else model


def find_preset(name: str, config: Config) -> tuple[str, ModelPreset]:
    """The preset a name stands for, and the name of the preset or provider it came from."""
    if name == "auto":
        return _auto(config)
    base, colon, model_id = name.partition(":")
    if base in config.models:
        preset = config.models[base]
    elif colon and base in PROVIDERS:
        preset = ModelPreset(provider=base, api_key_env=PROVIDER_KEYS[base])
    else:
        raise ModelSetupError(f"unknown model {name!r}. Valid names: a preset ({', '.join(config.models)}), "
                              f"PRESET:MODEL-ID, PROVIDER:MODEL-ID (providers: {', '.join(PROVIDERS)}), "
                              "replay:FILE, scripted:FILE, or auto")
    if colon:
        if not model_id:
            raise ModelSetupError(f"model name {name!r} has no model id after the colon")
        preset = dataclasses.replace(preset, model=model_id)
    return base, preset


def provider_class(provider: str) -> type:
    """The class of a provider, imported now; an unknown provider lists the known ones."""
    try:
        path = PROVIDERS[provider]
    except KeyError:
        raise ModelSetupError(f"unknown provider {provider!r} (known: {', '.join(PROVIDERS)})") from None
    module, _, cls = path.rpartition(".")
    return getattr(import_module(module), cls)


def _auto(config: Config) -> tuple[str, ModelPreset]:
    for name in config.auto_order:
        if name not in config.models:
            raise ModelSetupError(f"auto_order names {name!r}, which is not a preset (presets: "
                                  f"{', '.join(config.models)})")
        if has_credentials(config.models[name]):
            return name, config.models[name]
    wanted = []
    for name in config.auto_order:
        preset = config.models[name]
        names = " or ".join(key_env_names(preset))
        if preset.provider == "openai" and not preset.base_url:
            names += " (or OPENAI_BASE_URL for an OpenAI-compatible server)"
        if names:
            wanted.append(names)
    raise ModelSetupError(f"no model is configured and no credentials were found. Set one of "
                          f"{', '.join(wanted) or 'the API keys of your presets'}, or choose a model with "
                          f"{config_hint()} (for example ollama:qwen2.5-coder). No key at hand? The README's offline "
                          "demo replays a recorded run: --model replay:examples/recorded/fizzbuzz.jsonl")
