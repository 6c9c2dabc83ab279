"""Choosing a model by name. Provider SDKs load only when a model of theirs is built.

Names: a preset (`openai`, `gemini`, `claude`, `deepseek`, `ollama`, or your own), `PROVIDER:MODEL-ID`
(`openai:gpt-4.1-mini`, `gemini:gemini-2.5-flash`, `anthropic:claude-sonnet-4-5`, or a plug-in's provider),
`PRESET:MODEL-ID` (the preset with another model id: `ollama:qwen2.5-coder:7b`, `deepseek:deepseek-reasoner`),
`replay:FILE`, `scripted:FILE`, and `auto` (the first preset of `auto_order` whose credentials are present).
Providers are looked up in `anges.registry.providers`.
"""

from __future__ import annotations

import os
from importlib import import_module
from typing import TYPE_CHECKING

from anges.config.loading import default_config
from anges.exceptions import ModelSetupError
from anges.models.base import Completion, Model, Prompt, Usage
from anges.models.provider import config_hint, credential_hint, has_credentials
from anges.models.replay import RecordingModel, ReplayModel, replay_model, with_recording
from anges.registry import providers

if TYPE_CHECKING:
    from anges.config.types import Config, ModelPreset

__all__ = ["Completion", "Model", "Prompt", "RecordingModel", "ReplayModel", "Usage", "find_preset", "get_model",
           "provider_class", "provider_key_envs", "with_recording"]


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
    from anges.config.types import ModelPreset

    if name == "auto":
        return _auto(config)
    base, colon, model_id = name.partition(":")
    if base in config.models:
        preset = config.models[base]
    elif colon and base in providers:
        preset = ModelPreset(provider=base, api_key_env=getattr(providers.get(base), "default_key_env", ""))
    else:
        raise ModelSetupError(f"unknown model {name!r}. Valid names: a preset ({', '.join(config.models)}), "
                              f"PRESET:MODEL-ID, PROVIDER:MODEL-ID (providers: {', '.join(providers.names())}), "
                              "replay:FILE, scripted:FILE, or auto")
    if colon:
        if not model_id:
            raise ModelSetupError(f"model name {name!r} has no model id after the colon")
        preset = preset.model_copy(update={"model": model_id})
    return base, preset


def provider_class(provider: str) -> type:
    """The class of a provider (a registered name or module:Class), imported now; an unknown one lists the known."""
    return providers.get(provider)


def provider_key_envs() -> set[str]:
    """The key variable of every provider (what a `PROVIDER:MODEL-ID` name without a preset reads)."""
    return {key for _, cls in providers.classes() if (key := getattr(cls, "default_key_env", ""))}


def _auto(config: Config) -> tuple[str, ModelPreset]:
    for name in config.auto_order:
        if name not in config.models:
            raise ModelSetupError(f"auto_order names {name!r}, which is not a preset (presets: "
                                  f"{', '.join(config.models)})")
        if has_credentials(config.models[name]):
            return name, config.models[name]
    wanted = [hint for name in config.auto_order if (hint := credential_hint(config.models[name]))]
    raise ModelSetupError(f"no model is configured and no credentials were found. Set one of "
                          f"{', '.join(wanted) or 'the API keys of your presets'}, or choose a model with "
                          f"{config_hint()} (for example ollama:qwen2.5-coder). No key at hand? The README's offline "
                          "demo replays a recorded run, from the anges checkout: "
                          "--model replay:examples/recorded/fizzbuzz.jsonl")
