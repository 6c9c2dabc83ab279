"""Layered YAML configuration loaded into typed objects, and the paths of packaged resources.

The types (`Config`, `AgentConfig`, ...) are frozen pydantic models in `anges.config.types`, imported on first
use, so importing this module imports no pydantic.
"""

from __future__ import annotations

import logging
import os
import typing
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anges.exceptions import ConfigError
from anges.registry import agent_types

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

    from anges.config.types import Config

AGENT_TYPES = agent_types.builtin_names
"""The built-in agent types; plug-ins may add more (`anges.registry.agent_types`)."""
AGENT_KEY_ALIASES = {"max_steps": "max_number_of_events_to_exhaust"}
"""Other names accepted for agent keys: `max_steps` is what the --max-steps flag sets."""
log = logging.getLogger(__name__)
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""The `anges` package: packaged resources lie in it (a wheel) or beside it (a checkout)."""
_EXPECTED = {"int_type": "an integer", "float_type": "a number", "string_type": "a string",
             "bool_type": "true or false", "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping"}
_KINDS = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "a list", dict: "a mapping",
          type(None): "nothing"}


def anges_home() -> Path:
    """The data home: `$ANGES_HOME`, default `~/.anges`."""
    return Path(os.environ.get("ANGES_HOME") or Path.home() / ".anges").expanduser()


def package_dir() -> Path:
    """The folder of the `anges` package."""
    return _PACKAGE_DIR


def resource_path(name: str) -> Path:
    """A packaged resource (`config.yaml`, `prompt_templates`, `web`), installed or in a source checkout."""
    installed = {"web": _PACKAGE_DIR / "web"}.get(name, _PACKAGE_DIR / name)
    if installed.exists():
        return installed
    return _PACKAGE_DIR.parent / name


def load_config(path: str | os.PathLike | None = None, overrides: dict | None = None) -> Config:
    """Load packaged defaults, then ANGES_HOME/config.yaml, then `path` (or $ANGES_CONFIG), then `overrides`."""
    layers = [(str(resource_path("config.yaml")), _read_yaml(resource_path("config.yaml")))]
    home_file = anges_home() / "config.yaml"
    if home_file.is_file():
        layers.append((str(home_file), _read_yaml(home_file)))
    explicit = path or os.environ.get("ANGES_CONFIG")
    if explicit:
        explicit_path = Path(explicit).expanduser()
        if not explicit_path.is_file():
            raise ConfigError(f"{explicit_path}: config file not found")
        layers.append((str(explicit_path), _read_yaml(explicit_path)))
        from anges.util.masking import note_secret_file

        note_secret_file(explicit_path)  # it may hold keys: commands do not see it
    if overrides:
        layers.append(("arguments", overrides))
    return _from_layers(layers)


@lru_cache(maxsize=1)
def default_config() -> Config:
    """The packaged defaults alone (for library callers that pass no config); frozen, so safe to share."""
    path = resource_path("config.yaml")
    return _from_layers([(str(path), _read_yaml(path))])


PROJECT_KEYS = ("hooks",)
"""What a project's `.anges/config.yaml` may set (once the user trusts it)."""


def project_hooks(data: bytes, source: str) -> list:
    """The hooks of a project's `.anges/config.yaml` (its bytes, as read once); ConfigError naming the file."""
    from anges.config.types import Config

    raw = _parse_yaml(data, Path(source))
    unknown = [key for key in raw if key not in PROJECT_KEYS]
    if unknown:
        raise ConfigError(f"{source}: unknown key '{unknown[0]}' (a project's config may set only: "
                          f"{', '.join(PROJECT_KEYS)})")
    return list(_validated(Config, raw, source).hooks)


def _from_layers(layers: list[tuple[str, dict]]) -> Config:
    from anges.config.types import AgentConfig, Config

    layers = [(source, _resolve_aliases(raw, source)) for source, raw in layers]
    for source, raw in layers:
        _check_layer(source, raw)
    types = _agent_types(layers)
    merged: dict = {}
    common: dict = {}
    for _, raw in layers:
        sections = raw.get("agents") or {}
        common = _merge(common, sections.get("common") or {})
        if sections:  # a layer's common block applies to every type, over an earlier layer's per-type value
            raw = {**raw, "agents": {name: _merge(sections.get("common") or {}, sections.get(name) or {})
                                     for name in types}}
        merged = _merge(merged, raw)
    _expand_template_dir(merged)
    config = _validated(Config, merged, "the merged configuration")
    config._common = AgentConfig.model_validate(common)
    return config


def _check_layer(source: str, raw: dict) -> None:
    """Validate one (partial) layer, so an error names the file it is in."""
    from anges.config.types import AgentConfig, Config

    rest = {key: value for key, value in raw.items() if key != "agents"}
    _validated(Config, rest, source)
    if "agents" not in raw:
        return
    sections = raw["agents"]
    if not isinstance(sections, dict):
        raise ConfigError(f"{source}: key 'agents': expected a mapping, got {_describe(sections)}")
    for name, section in sections.items():
        if name != "common" and name not in AGENT_TYPES and (":" in name or name not in agent_types):
            valid = ", ".join(["common", *AGENT_TYPES, *(n for n in agent_types.names() if n not in AGENT_TYPES)])
            raise ConfigError(f"{source}: unknown key 'agents.{name}' (valid keys here: {valid})")
        _validated(AgentConfig, section or {}, source, ("agents", name))


def _agent_types(layers: list[tuple[str, dict]]) -> list[str]:
    """The built-in agent types and every other type a layer has a section for."""
    named = [name for _, raw in layers for name in (raw.get("agents") or {}) if name != "common"]
    return list(dict.fromkeys([*AGENT_TYPES, *named]))


def _validated(model: type[BaseModel], raw: Any, source: str, prefix: tuple = ()) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _config_error(exc, model, source, prefix) from None


def _config_error(exc: ValidationError, model: type, source: str, prefix: tuple) -> ConfigError:
    """The first problem of a validation error as today's messages say it: the file, the key, what was expected."""
    error = exc.errors()[0]
    loc, kind = error["loc"], error["type"]
    where = _where(prefix + tuple(loc))
    named = f"'{where}'" + "".join(f" ({alias})" for alias, key in AGENT_KEY_ALIASES.items() if loc[-1:] == (key,))
    if kind == "extra_forbidden":
        valid = ", ".join(_type_at(model, loc[:-1]).model_fields)
        return ConfigError(f"{source}: unknown key '{where}' (valid keys here: {valid})")
    if kind == "value_error":
        return ConfigError(f"{source}: key {named}: {error['ctx']['error']}")
    if kind == "literal_error":
        expected = "one of " + ", ".join(choice for choice in typing.get_args(_type_at(model, loc)) if choice)
    else:
        expected = _EXPECTED.get(kind, error["msg"].lower())
    return ConfigError(f"{source}: key {named}: expected {expected}, got {_describe(error['input'])}")


def _type_at(model: type, loc: tuple) -> Any:
    """The type a location of a validation error refers to (a model, or a field's type)."""
    current: Any = model
    for part in loc:
        fields = getattr(current, "model_fields", {}) if isinstance(part, str) else {}
        field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        if field is not None:
            current = field.annotation
        elif typing.get_origin(current) in (dict, list):
            current = typing.get_args(current)[-1]
    return current


def _where(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _describe(value: Any) -> str:
    return f"{_KINDS.get(type(value), type(value).__name__)} ({value!r})"[:120]


def _expand_template_dir(merged: dict) -> None:
    prompt = merged.get("prompt")
    if isinstance(prompt, dict) and prompt.get("template_dir"):
        prompt["template_dir"] = os.path.expanduser(prompt["template_dir"])
        if not os.path.isdir(prompt["template_dir"]):
            log.warning("prompt.template_dir %s is not a directory: the packaged templates are used instead",
                        prompt["template_dir"])


def _resolve_aliases(raw: dict, source: str) -> dict:
    """Rename the `AGENT_KEY_ALIASES` of a layer's agent sections to the keys they stand for."""
    sections = raw.get("agents")
    if not isinstance(sections, dict):
        return raw
    renamed = {}
    for name, section in sections.items():
        for alias, key in AGENT_KEY_ALIASES.items():
            if isinstance(section, dict) and alias in section:
                if key in section:
                    raise ConfigError(f"{source}: agents.{name} sets both '{alias}' and '{key}' (the same setting)")
                section = {(key if k == alias else k): v for k, v in section.items()}
        renamed[name] = section
    return {**raw, "agents": renamed}


def _read_yaml(path: Path) -> dict:
    try:
        return _parse_yaml(path.read_bytes(), path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def _parse_yaml(data: bytes, path: Path) -> dict:
    import yaml

    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level, got {type(raw).__name__}")
    return raw


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
