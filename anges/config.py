"""Layered YAML configuration loaded into typed objects, and the paths of packaged resources."""

from __future__ import annotations

import dataclasses
import logging
import os
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from anges.exceptions import ConfigError

AGENT_TYPES = ("default", "task_executor", "task_analyzer", "orchestrator")
AGENT_KEY_ALIASES = {"max_steps": "max_number_of_events_to_exhaust"}
"""Other names accepted for agent keys: `max_steps` is what the --max-steps flag sets."""
log = logging.getLogger(__name__)
_PACKAGE_DIR = Path(__file__).resolve().parent


def anges_home() -> Path:
    """The data home: `$ANGES_HOME`, default `~/.anges`."""
    return Path(os.environ.get("ANGES_HOME") or Path.home() / ".anges").expanduser()


def resource_path(name: str) -> Path:
    """A packaged resource (`config.yaml`, `prompt_templates`, `web`), installed or in a source checkout."""
    installed = {"web": _PACKAGE_DIR / "web"}.get(name, _PACKAGE_DIR / name)
    if installed.exists():
        return installed
    return _PACKAGE_DIR.parent / name


@dataclass
class ModelPreset:
    """A named way to reach one model."""

    provider: str = "openai"
    """openai (and every OpenAI-compatible endpoint), gemini or anthropic."""
    model: str = ""
    """The provider's model id."""
    base_url: str = ""
    """Endpoint URL; empty = the provider's default (or its SDK's standard env var)."""
    api_key_env: str = ""
    """The environment variable that holds the key; empty = no key needed (local servers)."""
    vertex: bool = False
    """Gemini or Anthropic through Google Vertex AI instead of an API key."""
    project: str = ""
    """Vertex AI project (default: GOOGLE_CLOUD_PROJECT)."""
    location: str = ""
    """Vertex AI location (default: GOOGLE_CLOUD_LOCATION)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra HTTP headers sent with every request (gateways, proxies, attribution)."""
    api_version: str = ""
    """Gemini API version (v1, v1beta, ...); empty = the SDK's default (or GOOGLE_GENAI_API_VERSION)."""


@dataclass
class ModelSettings:
    """Settings shared by every model call."""

    temperature: float = 0.0
    max_output_tokens: int = 8192
    request_timeout: float = 300
    """Seconds for one HTTP request."""
    json_mode: bool = False
    """Ask the endpoint for JSON output where it supports it."""


@dataclass
class RetryConfig:
    """One retry policy for every provider."""

    max_attempts: int = 5
    """Total attempts for one call, the first included."""
    max_total_seconds: float = 300
    """Give up when the next wait would pass this many seconds since the first attempt."""
    initial_backoff: float = 1.0
    max_backoff: float = 60.0


@dataclass
class Price:
    """US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float = 0.0


@dataclass
class AgentConfig:
    """Settings of one agent type (the `common` block merged with the type's own section)."""

    model: str = ""
    """Empty = the global `model`."""
    max_consecutive_actions_to_summarize: int = 30
    """Summarize after this many unsummarized action events."""
    max_number_of_events_to_exhaust: int = 80
    """Events since the last user input before the run stops."""
    max_model_calls: int = 120
    """Model calls per request, retries and summaries included."""
    max_invalid_replies: int = 3
    """Consecutive invalid replies before the run stops."""
    max_repeated_actions: int = 5
    """The same action with the same arguments this many times in a row stops the run."""
    timeout: float = 0
    """Wall-clock seconds per request; 0 = none."""
    max_tokens: int = 0
    """Token budget per request (input + output); 0 = none."""
    max_cost: float = 0.0
    """Dollar budget per request; 0 = none."""
    shell_cmd_timeout: float = 600
    """Default seconds for one shell command."""
    max_shell_cmd_timeout: float = 1800
    """A command may ask for at most this many seconds."""
    shell_output_cap: int = 50000
    """Characters of a command's output kept (head and tail)."""
    event_text_cap: int = 120000
    """Characters of each text of a recorded event (content, reasoning, output, diff, ...); a longer text is cut
    (head and tail) and a longer diff becomes a count of the lines it changes. The change itself is made."""
    pass_env: list[str] = field(default_factory=list)
    """Credential environment variables that commands may see."""
    notes: list[str] = field(default_factory=list)
    """Notes added to every prompt of this agent type."""
    auto_entitle: bool = False
    """Give new streams a model-written title."""
    max_depth: int = 3
    """Nesting depth of orchestrators."""
    max_concurrent_children: int = 2
    """Children an orchestrator runs at once."""


@dataclass
class PromptConfig:
    """How the event history is shown to the model."""

    template_dir: str = ""
    """A directory of your own .j2 templates, searched before the packaged ones."""
    recent_events_in_full: int = 5
    max_event_lines: int = 100
    max_event_chars: int = 5000
    max_prompt_chars: int = 400000
    """No prompt is longer: a larger one first triggers a summary, then the middle of the history is cut."""
    max_summary_chars: int = 8000
    """A summary longer than this (the model is asked for about 300 words) is cut when it is recorded."""


@dataclass
class WebConfig:
    """The web chat."""

    host: str = "127.0.0.1"
    port: int = 5000
    password: str = ""
    """Or ANGES_UI_PASSWORD, 12 characters or more; required on any non-loopback address."""
    heartbeat_seconds: float = 15
    """Seconds of silence after which a live event feed sends a comment, so proxies keep it open."""
    login_attempts_per_minute: int = 5
    """Failed logins allowed per client address per minute; more are refused with 429."""
    login_attempts_per_minute_total: int = 20
    """Failed logins allowed per minute from all addresses together (against guessing from many addresses)."""
    poll_seconds: float = 0.25
    """How often a live event feed looks at the store for new events."""
    secure_cookies: bool = False
    """Mark the session cookie Secure (set this when the chat is served over HTTPS)."""
    allow_unsandboxed: bool = False
    """Let people reach the chat from other machines while commands run without a sandbox (safety.sandbox: off)."""


@dataclass
class MCPConfig:
    """MCP servers."""

    config_file: str = ""
    """A JSON file of servers ({"mcpServers": {...}} or anges 0.1.x's bare {name: {...}})."""
    servers: dict[str, dict] = field(default_factory=dict)
    """Servers inline, in the same shape as the file's entries."""
    startup_timeout: float = 30
    """Seconds a server may take to start and list its tools before it is left out."""
    tool_timeout: float = 300
    """Seconds one tool call may take."""


@dataclass
class MimeReaderConfig:
    """Reading images and PDFs."""

    model: str = "gemini:gemini-3.8-flash"
    max_file_bytes: int = 20_000_000


@dataclass
class SafetyRule:
    """One policy rule; the first rule that matches an action decides it."""

    action: str = "*"
    """An action type (RUN_SHELL_CMD, EDIT_FILE, USE_MCP_TOOL, READ_MIME_FILES, CALL_CHILD_AGENT, ...) or *."""
    match: str = "*"
    """A glob on the command, path, server.tool or directive; `re:PATTERN` for a regular expression (searched)."""
    decision: str = "ask"
    """allow, ask or deny."""
    reason: str = ""
    """Why: shown to the person asked, and to the model when the action is declined."""


def _default_rules() -> list[SafetyRule]:
    deny, ask = "deny", "ask"
    return [
        SafetyRule("RUN_SHELL_CMD",
                   r"re:\brm\s+(-\S+\s+){0,32}(--no-preserve-root\b|(/[/.]*\*?|~/?\*?|\$HOME/?\*?|\$\{HOME\}/?\*?)"
                   r"(\s|;|&|\||\)|$))", deny, "deletes the root or home directory"),
        SafetyRule("RUN_SHELL_CMD", r"re:\bmkfs(\.\w+)?\b", deny, "formats a file system"),
        SafetyRule("RUN_SHELL_CMD",
                   r"re:(>|\bof=|\btee\s+(-\S+\s+){0,32})\s*/dev/(sd|hd|vd|xvd|nvme|mmcblk|dm-|md|disk|loop)", deny,
                   "writes to a block device"),
        SafetyRule("RUN_SHELL_CMD", r"re:(?<!\w)(\w+|:)\s*\(\)\s*\{[^}]{0,200}\1\s*\|\s*\1\s*&", deny, "a fork bomb"),
        SafetyRule("RUN_SHELL_CMD", r"re:(^|[\s;&|(`{])(\S{0,200}/)?(sudo|su|doas|pkexec|run0)(\s|$|[;&|)])", ask,
                   "runs as another user"),
        SafetyRule("RUN_SHELL_CMD", r"re:\bgit\b[^;&|\n]{0,300}?\bpush\b", ask, "publishes to a remote repository"),
        SafetyRule("USE_MCP_TOOL", "*", ask, "MCP tools may act outside the sandbox; allow trusted ones by rule"),
    ]


@dataclass
class SafetyConfig:
    """The sandbox commands run in, and the policy that decides which actions need approval."""

    sandbox: str = "workspace"
    """workspace (read-only but the working directory), read-only, or off."""
    network: bool = False
    """Let sandboxed commands reach the network."""
    writable_paths: list[str] = field(default_factory=list)
    """More directories sandboxed commands may write (workspace mode)."""
    hidden_paths: list[str] = field(default_factory=list)
    """More paths hidden from commands, beside the built-in credential places and ANGES_HOME."""
    approval: str = ""
    """What an `ask` becomes: ask (a person), auto (approved) or deny; empty = ask where someone can answer."""
    auto_escalate: bool = False
    """Let --approval auto also approve leaving the sandbox: escalated commands, and in-process edits and reads
    outside the writable paths, of protected paths or of hidden paths."""
    bwrap: str = ""
    """The bwrap to use (an absolute path); empty = the first in /usr/bin, /bin, /usr/sbin, /sbin, /usr/local/bin."""
    contain_unsandboxed: bool = True
    """Run commands that run without the sandbox in a PID namespace of their own (through bwrap, when it works),
    so none outlives the run; setuid programs (sudo) cannot gain privileges there."""
    keep_background: bool = False
    """Keep background jobs running after the run ends (until the agent is closed or anges exits)."""
    background_log_cap: int = 10_000_000
    """Bytes kept of each background job's log (the oldest are dropped)."""
    rules: list[SafetyRule] = field(default_factory=list)
    """Your rules, checked first."""
    default_rules: list[SafetyRule] = field(default_factory=_default_rules)
    """The built-in rules, checked after yours."""


def _default_presets() -> dict[str, ModelPreset]:
    return {
        "openai": ModelPreset("openai", "gpt-4.1", api_key_env="OPENAI_API_KEY"),
        "gemini": ModelPreset("gemini", "gemini-3.8-flash", api_key_env="GEMINI_API_KEY"),
        "claude": ModelPreset("anthropic", "claude-sonnet-5", api_key_env="ANTHROPIC_API_KEY"),
        "deepseek": ModelPreset("openai", "deepseek-chat", "https://api.deepseek.com", "DEEPSEEK_API_KEY"),
        "ollama": ModelPreset("openai", "qwen2.5-coder", "http://localhost:11434/v1", ""),
    }


def _default_agents() -> dict[str, AgentConfig]:
    agents = {name: AgentConfig() for name in AGENT_TYPES}
    agents["orchestrator"].max_model_calls = 200
    return agents


@dataclass
class Config:
    """The whole configuration."""

    model: str = "auto"
    """A preset name, provider:model-id, replay:FILE, or auto."""
    auto_order: list[str] = field(default_factory=lambda: ["claude", "openai", "gemini", "deepseek"])
    models: dict[str, ModelPreset] = field(default_factory=_default_presets)
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    retry: RetryConfig = field(default_factory=RetryConfig)
    prices: dict[str, Price] = field(default_factory=dict)
    agents: dict[str, AgentConfig] = field(default_factory=_default_agents)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    web: WebConfig = field(default_factory=WebConfig)
    mcp: MCPConfig = field(default_factory=MCPConfig)
    mime_reader: MimeReaderConfig = field(default_factory=MimeReaderConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)

    def agent(self, agent_type: str) -> AgentConfig:
        """The settings of one agent type."""
        try:
            return self.agents[agent_type]
        except KeyError:
            raise ConfigError(f"unknown agent type {agent_type!r} (known: {', '.join(self.agents)})") from None

    def model_for(self, agent_type: str) -> str:
        """The model name an agent type uses."""
        return self.agent(agent_type).model or self.model


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
        from anges.sandbox import hide_secret_file

        hide_secret_file(explicit_path)  # it may hold keys: commands do not see it
    if overrides:
        layers.append(("arguments", overrides))
    return _from_layers(layers)


@lru_cache(maxsize=1)
def default_config() -> Config:
    """The packaged defaults alone (for library callers that pass no config)."""
    path = resource_path("config.yaml")
    return _from_layers([(str(path), _read_yaml(path))])


def _from_layers(layers: list[tuple[str, dict]]) -> Config:
    merged: dict = {}
    for source, raw in layers:
        raw = _resolve_aliases(raw, source)
        _check(Config, raw, source, "")
        merged = _merge(merged, _expand_agents(raw))
    config = _build_config(merged)
    _check_safety(config.safety)
    return config


def _expand_agents(raw: dict) -> dict:
    """Apply a layer's `agents.common` to each agent type of that layer, so a later layer's common block
    overrides an earlier layer's per-type value."""
    sections = raw.get("agents")
    if not sections:
        return raw
    common = sections.get("common") or {}
    expanded = {name: _merge(common, sections.get(name) or {}) for name in AGENT_TYPES}
    return {**raw, "agents": {name: section for name, section in expanded.items() if section}}


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
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except (OSError, UnicodeDecodeError) as exc:
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


def _check(cls: type, raw: Any, source: str, where: str) -> None:
    """Validate a (possibly partial) mapping against a dataclass: known keys, right types."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: key '{where}': expected a mapping, got {_describe(raw)}")
    hints = typing.get_type_hints(cls)
    for key, value in raw.items():
        path = f"{where}.{key}" if where else str(key)
        if cls is Config and key == "agents":
            _check_agents(value, source, path)
        elif key not in hints:
            valid = ", ".join(f.name for f in dataclasses.fields(cls))
            raise ConfigError(f"{source}: unknown key '{path}' (valid keys here: {valid})")
        else:
            _check_value(hints[key], value, source, path)


def _check_agents(raw: Any, source: str, where: str) -> None:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: key '{where}': expected a mapping, got {_describe(raw)}")
    for name, section in raw.items():
        if name != "common" and name not in AGENT_TYPES:
            valid = ", ".join(("common",) + AGENT_TYPES)
            raise ConfigError(f"{source}: unknown key '{where}.{name}' (valid keys here: {valid})")
        _check(AgentConfig, section or {}, source, f"{where}.{name}")


def _check_value(tp: Any, value: Any, source: str, where: str) -> None:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        _check(tp, value, source, where)
    elif origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{source}: key '{where}': expected a list, got {_describe(value)}")
        for i, item in enumerate(value):
            _check_value(typing.get_args(tp)[0], item, source, f"{where}[{i}]")
    elif origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: key '{where}': expected a mapping, got {_describe(value)}")
        for key, item in value.items():
            _check_value(typing.get_args(tp)[1], item, source, f"{where}.{key}")
    elif origin in (typing.Union, types.UnionType):
        if not any(_fits(arg, value) for arg in typing.get_args(tp)):
            raise ConfigError(f"{source}: key '{where}': expected {_name(tp)}, got {_describe(value)}")
    elif not _fits(tp, value):
        raise ConfigError(f"{source}: key '{where}': expected {_name(tp)}, got {_describe(value)}")


def _fits(tp: Any, value: Any) -> bool:
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is dict or typing.get_origin(tp) is dict:
        return isinstance(value, dict)
    return isinstance(value, tp) if isinstance(tp, type) else True


def _name(tp: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a mapping"}
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_name(a) for a in typing.get_args(tp))
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _describe(value: Any) -> str:
    kinds = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "a list",
             dict: "a mapping", type(None): "nothing"}
    return f"{kinds.get(type(value), type(value).__name__)} ({value!r})"[:120]


def _build(cls: type, raw: dict) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in raw.items():
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            value = _build(tp, value)
        elif typing.get_origin(tp) is list and dataclasses.is_dataclass(typing.get_args(tp)[0]):
            value = [_build(typing.get_args(tp)[0], item or {}) for item in value]
        elif typing.get_origin(tp) is dict and dataclasses.is_dataclass(typing.get_args(tp)[1]):
            value = {k: _build(typing.get_args(tp)[1], v or {}) for k, v in value.items()}
        elif tp is float:
            value = float(value)
        kwargs[key] = value
    return cls(**kwargs)


def _build_config(raw: dict) -> Config:
    raw = dict(raw)
    sections = raw.pop("agents", None) or {}
    config = _build(Config, raw)
    config.agents = {name: _build(AgentConfig, sections.get(name) or {}) for name in AGENT_TYPES}
    if config.prompt.template_dir:
        config.prompt.template_dir = os.path.expanduser(config.prompt.template_dir)
        if not os.path.isdir(config.prompt.template_dir):
            log.warning("prompt.template_dir %s is not a directory: the packaged templates are used instead",
                        config.prompt.template_dir)
    return config


SAFETY_CHOICES = {"sandbox": ("workspace", "read-only", "off"), "approval": ("", "ask", "auto", "deny")}
DECISIONS = ("allow", "ask", "deny")


def _check_safety(safety: SafetyConfig) -> None:
    """The values of the safety section that the type check cannot judge: modes, decisions, patterns."""
    import re

    for key, choices in SAFETY_CHOICES.items():
        if getattr(safety, key) not in choices:
            valid = ", ".join(c for c in choices if c)
            raise ConfigError(f"key 'safety.{key}': expected one of {valid}, got {getattr(safety, key)!r}")
    for name in ("rules", "default_rules"):
        for index, rule in enumerate(getattr(safety, name)):
            where = f"safety.{name}[{index}]"
            if rule.decision not in DECISIONS:
                raise ConfigError(f"key '{where}.decision': expected allow, ask or deny, got {rule.decision!r}")
            if rule.match.startswith("re:"):
                try:
                    re.compile(rule.match[3:])
                except re.error as exc:
                    raise ConfigError(f"key '{where}.match': not a valid regular expression: {exc}") from None
