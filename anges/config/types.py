"""The typed configuration: one frozen pydantic model per section, each field documented.

Imported on first use of a config type (`anges.config.loading` forwards the names), so `import anges` and
`anges --help` never import pydantic. Change a loaded config with `model_copy(update={...})`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator

from anges.config.section import Section
from anges.config.tools import (
    BLOCKING_EVENTS,
    HOOK_EVENTS,
    HookConfig,
    HookMatch,
    MCPConfig,
    MimeReaderConfig,
    OpenAPIAuth,
    OpenAPISource,
    ToolsConfig,
)
from anges.exceptions import ConfigError
from anges.registry import agent_types

__all__ = ["BLOCKING_EVENTS", "HOOK_EVENTS", "HookConfig", "HookMatch", "MCPConfig", "MimeReaderConfig", "OpenAPIAuth",
           "OpenAPISource", "Section", "ToolsConfig"]


class ModelPreset(Section):
    """A named way to reach one model."""

    provider: str = "openai"
    """openai (and every OpenAI-compatible endpoint), gemini, anthropic, a plug-in's provider, or module:Class."""
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
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers sent with every request (gateways, proxies, attribution)."""
    api_version: str = ""
    """Gemini API version (v1, v1beta, ...); empty = the SDK's default (or GOOGLE_GENAI_API_VERSION)."""
    prompt_cache_key: bool | None = None
    """OpenAI only: send each run's `prompt_cache_key` (None = only to api.openai.com; other servers may reject
    an unknown parameter)."""
    context_window: int = Field(default=0, ge=0)
    """The model's context window in tokens (prompt and reply together); 0 = ask the server where it can tell
    (Ollama, vLLM, llama.cpp, ...), else the known window of the model, else an assumed one (docs/models.md). For
    Ollama it also caps the window each request asks for (`num_ctx`)."""


class ModelSettings(Section):
    """Settings shared by every model call."""

    temperature: float = 0.0
    max_output_tokens: int = 8192
    request_timeout: float = 300
    """Seconds for one HTTP request."""
    json_mode: bool = False
    """Ask the endpoint for JSON output where it supports it."""
    stream: bool = True
    """Stream each reply: its text shows as it arrives, and a stop closes the stream at once."""


class RetryConfig(Section):
    """One retry policy for every provider."""

    max_attempts: int = 5
    """Total attempts for one call, the first included."""
    max_total_seconds: float = 300
    """Give up when the next wait would pass this many seconds since the first attempt."""
    initial_backoff: float = 1.0
    max_backoff: float = 60.0


class Price(Section):
    """US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float = 0.0


class AgentConfig(Section):
    """Settings of one agent type (the `common` block merged with the type's own section)."""

    model: str = ""
    """Empty = the global `model`."""
    max_consecutive_actions_to_summarize: int = 50
    """At most this many events the model reads wait to be folded into the rolling summary (those since the last
    fold but the newest `prompt.recent_events_in_full`), however small; 0 = no bound. Before it, the size of the
    history decides (`prompt.history_window_chars`). Checked before each model call, so a finished task costs no
    summary call."""
    max_number_of_events_to_exhaust: int = 80
    """Steps (events but approvals and bookkeeping) since the last user input before the run stops."""
    max_model_calls: int = 120
    """Model calls per request, retries and summaries included (a child's also count against its parent's)."""
    max_invalid_replies: int = 3
    """Consecutive invalid replies before the run stops."""
    max_cut_off_replies: int = 3
    """Consecutive replies cut off at `max_output_tokens` before the run stops (each is asked again, shorter)."""
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
    shell_output_cap: int = 8000
    """Bytes of a command's output (stdout and stderr together) its result keeps: the head and tail, cut at line ends,
    with a marker saying how many lines and bytes were cut; the whole output then goes to a file named in the result
    (up to `safety.background_log_cap` bytes, for as long as the request runs). Also the characters kept of an MCP
    tool's result."""
    shell_background_after: float = 120
    """Seconds after which a command still running goes on in the background (as if `run_in_background` had been
    asked): the model gets its pid, its output so far and its log. A command that starts listening on a TCP port
    (outside the ephemeral range) goes sooner, within about a second. A command may ask for another value
    (`background_after`); 0 = wait for every command until its timeout, listening or not."""
    event_text_cap: int = 120000
    """Characters of each text of a recorded event (content, reasoning, output, diff, ...); a longer text is cut
    (head and tail) and a longer diff becomes a count of the lines it changes. The change itself is made."""
    pass_env: list[str] = Field(default_factory=list)
    """Credential environment variables that commands may see."""
    keep_anges_venv: bool = False
    """Commands keep the virtualenv anges runs from (its `bin` first on PATH, `VIRTUAL_ENV`): for a venv that is
    also the project's. Off, they get the environment without it, unless it lies in the working directory."""
    notes: list[str] = Field(default_factory=list)
    """Notes added to every prompt of this agent type."""
    auto_entitle: bool = False
    """Give new streams a model-written title."""
    extra_actions: list[str] = Field(default_factory=list)
    """More actions this agent type offers: action types registered by plug-ins, or module:Class paths."""
    max_depth: int = 3
    """Nesting depth of orchestrators."""
    max_concurrent_children: int = 2
    """Children an orchestrator runs at a time, whichever reply started them; more wait their turn."""
    completion_check: Literal["evidence", "always", "off"] = "evidence"
    """Before a TASK_COMPLETE takes effect: `evidence` holds it once when the run shows a cause (its background
    jobs still running, open plan steps, a failed check with files edited after it, a failed action of the same
    reply), `always` holds the first of each request for one more check, `off` never (YAML's unquoted off, false,
    is read as off)."""

    @field_validator("completion_check", mode="before")
    @classmethod
    def _unquoted_off(cls, value: Any) -> Any:
        return "off" if value is False else value


class PromptConfig(Section):
    """How the event history is shown to the model."""

    template_dir: str = ""
    """A directory of your own .j2 templates, searched before the packaged ones."""
    recent_events_in_full: int = 5
    """The newest events a summary fold leaves out of the summary (they stay in the history as they were); events
    the model does not read are not counted."""
    max_event_lines: int = 4000
    max_event_chars: int = 12000
    """Each event's text in the history is cut to this many characters (and `max_event_lines` lines), the same at
    every step, so between folds a prompt is the previous one with new text at the end."""
    history_window_chars: int = 16000
    """Fold the history into the rolling summary once the events waiting to be folded fill more than this many
    characters (less for a small context window; or once they are `max_consecutive_actions_to_summarize`); 0 = by
    count only."""
    shrink_chars: int = 4000
    """An older result longer than this in the history (a command's, a child agent's brief or report) shrinks to
    its head and tail and the file that holds it whole, in batches (see docs/prompt.md); 0 = never."""
    max_prompt_chars: int = 400000
    """No prompt is longer: a larger one first triggers a summary fold, then the middle of the history is cut."""
    max_summary_chars: int = 8000
    """The rolling summary is cut to this when it is recorded (the model is asked for about 400 words)."""
    max_folded_request_chars: int = 12000
    """Characters of the user's requests shown beside the rolling summary, newest first (the latest whole);
    older requests are left to the summary."""
    agents_md: bool = True
    """Put the AGENTS.md files of the working directory and its parents (up to the repository root) in the
    prompt; `--no-agents-md` turns it off for one run."""
    max_agents_md_chars: int = 16000
    """Characters of AGENTS.md text in the prompt, all files together; the nearest file is kept first."""


class WebConfig(Section):
    """The web chat."""

    host: str = "127.0.0.1"
    port: int = 5000
    """0 to 65535; 0: any free port."""
    password: str = ""
    """Or ANGES_UI_PASSWORD, 12 characters or more; required on any non-loopback address."""
    heartbeat_seconds: float = 15
    """Seconds of silence after which a live event feed sends a comment, so proxies keep it open."""
    max_login_delay: float = 30
    """After each failed login a client waits twice as long before its next try is checked (1, 2, 4 ... seconds),
    at most this long; a browser that logged in before is counted apart from its address."""
    poll_seconds: float = 0.25
    """How often a live event feed looks at the store for new events."""
    secure_cookies: bool = False
    """Mark the session cookie Secure (set this when the chat is served over HTTPS)."""
    allow_unsandboxed: bool = False
    """Let people reach the chat from other machines while commands run without a sandbox (safety.sandbox: off)."""

    @field_validator("port")
    @classmethod
    def _is_a_port(cls, port: int) -> int:
        if not 0 <= port <= 65535:
            raise ValueError(f"must be a port number, 0 to 65535, got {port}")
        return port


class CheckpointsConfig(Section):
    """Checkpoints: the working directory (and `safety.writable_paths`) snapshotted before each step that can
    change files, for `anges diff` and `anges undo` (docs/checkpoints.md)."""

    enabled: bool = True
    batch: bool = True
    """Keep checkpoints in the tasks of `anges batch` too."""
    max_file_bytes: int = 10_000_000
    """A file larger than this is left out of checkpoints (and the step's record says so)."""
    max_files: int = 100_000
    """A folder with more files than this (not counting ignored ones) is not checkpointed (and the run says so)."""
    git: str = ""
    """The git to run (an absolute path); empty: the system's (/usr/bin, /bin, /usr/local/bin, ...), never PATH."""

    @field_validator("max_file_bytes", "max_files")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be 1 or more, got {value}")
        return value


class TelemetryConfig(Section):
    """OpenTelemetry traces and metrics of every run (docs/telemetry.md); off unless enabled."""

    enabled: bool = False
    """Export spans and metrics over OTLP/HTTP (needs `pip install 'anges[otel]'`)."""
    endpoint: str = ""
    """The collector's OTLP/HTTP base URL (http://collector:4318); empty: the OTEL_EXPORTER_OTLP_* variables, else
    http://localhost:4318."""
    capture_content: bool = False
    """Put requests, prompts, replies and command output in spans (masked and cut like everything recorded)."""
    max_content_chars: int = 20000
    """The most of one text a span keeps when content is captured."""
    metrics: bool = True
    """Export metrics too (model-call duration and tokens, action durations, runs by outcome)."""


class SafetyRule(Section):
    """One policy rule; the first rule that matches an action decides it."""

    action: str = "*"
    """An action type (RUN_SHELL_CMD, EDIT_FILE, USE_MCP_TOOL, CALL_API, READ_MIME_FILES, CALL_CHILD_AGENT, ...) or
    *."""
    match: str = "*"
    """A glob on the command, path, server.tool, `api.operationId` or `api METHOD /path` (CALL_API), or directive;
    `re:PATTERN` for a regular expression (searched)."""
    decision: Literal["allow", "ask", "deny"] = "ask"
    reason: str = ""
    """Why: shown to the person asked, and to the model when the action is declined."""

    @field_validator("match")
    @classmethod
    def _pattern_compiles(cls, match: str) -> str:
        if match.startswith("re:"):
            try:
                re.compile(match[3:])
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return match


def _rule(action: str, match: str, decision: Literal["allow", "ask", "deny"], reason: str) -> SafetyRule:
    return SafetyRule(action=action, match=match, decision=decision, reason=reason)


def _default_rules() -> list[SafetyRule]:
    return [
        _rule("RUN_SHELL_CMD",
              r"re:\brm\s+(-\S+\s+){0,32}(--no-preserve-root\b|(/[/.]*\*?|~/?\*?|\$HOME/?\*?|\$\{HOME\}/?\*?)"
              r"(\s|;|&|\||\)|$))", "deny", "deletes the root or home directory"),
        _rule("RUN_SHELL_CMD", r"re:\bmkfs(\.\w+)?\b", "deny", "formats a file system"),
        _rule("RUN_SHELL_CMD",
              r"re:(>|\bof=|\btee\s+(-\S+\s+){0,32})\s*/dev/(sd|hd|vd|xvd|nvme|mmcblk|dm-|md|disk|loop)", "deny",
              "writes to a block device"),
        _rule("RUN_SHELL_CMD", r"re:(?<!\w)(\w+|:)\s*\(\)\s*\{[^}]{0,200}\1\s*\|\s*\1\s*&", "deny", "a fork bomb"),
        _rule("RUN_SHELL_CMD", r"re:(^|[\s;&|(`{])(\S{0,200}/)?(sudo|su|doas|pkexec|run0)(\s|$|[;&|)])", "ask",
              "runs as another user"),
        _rule("RUN_SHELL_CMD", r"re:\bgit\b[^;&|\n]{0,300}?\bpush\b", "ask", "publishes to a remote repository"),
        _rule("USE_MCP_TOOL", "*", "ask", "MCP tools may act outside the sandbox; allow trusted ones by rule"),
        _rule("CALL_API", r"re:^\S+ (GET|HEAD) ", "allow", "GET and HEAD read a web API"),
        _rule("CALL_API", "*", "ask", "a web API call that may change something (every method but GET and HEAD)"),
    ]


class SafetyConfig(Section):
    """The sandbox commands run in, and the policy that decides which actions need approval."""

    sandbox: Literal["workspace", "read-only", "off"] = "workspace"
    """workspace (read-only but the working directory), read-only, or off."""
    network: bool = False
    """Let sandboxed commands reach the network."""
    writable_paths: list[str] = Field(default_factory=list)
    """More directories sandboxed commands may write (workspace mode)."""
    hidden_paths: list[str] = Field(default_factory=list)
    """More paths hidden from commands, beside the built-in credential places and ANGES_HOME."""
    approval: Literal["", "ask", "auto", "deny"] = ""
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
    """Bytes kept of each background job's log and of each command's full-output file (the oldest are dropped)."""
    tmp_size: int = Field(default=1_000_000_000, ge=1_000_000)
    """Bytes the sandbox's private /tmp may hold (and its /dev/shm); it lives in memory."""
    max_processes: int = Field(default=2048, ge=16)
    """Processes (threads included) the sandbox may hold at once: a fork bomb stops there."""
    user_namespaces: bool = False
    """Let sandboxed commands make user namespaces of their own (rootless containers, Chromium's own sandbox)."""
    unix_sockets: bool = False
    """Let sandboxed commands make Unix sockets; then a daemon's socket bound by a name the sandbox does not cover
    (relative, a hard link, made after the sandbox started, abstract with the network on) is reachable."""
    rules: list[SafetyRule] = Field(default_factory=list)
    """Your rules, checked first."""
    default_rules: list[SafetyRule] = Field(default_factory=_default_rules)
    """The built-in rules, checked after yours."""


def _default_presets() -> dict[str, ModelPreset]:
    return {
        "openai": ModelPreset(provider="openai", model="gpt-4.1", api_key_env="OPENAI_API_KEY"),
        "gemini": ModelPreset(provider="gemini", model="gemini-3.8-flash", api_key_env="GEMINI_API_KEY"),
        "claude": ModelPreset(provider="anthropic", model="claude-sonnet-5", api_key_env="ANTHROPIC_API_KEY"),
        "deepseek": ModelPreset(provider="openai", model="deepseek-chat", base_url="https://api.deepseek.com",
                                api_key_env="DEEPSEEK_API_KEY"),
        "ollama": ModelPreset(provider="ollama", model="qwen2.5-coder"),
    }


def _default_agents() -> dict[str, AgentConfig]:
    agents = {name: AgentConfig() for name in agent_types.builtin_names}
    agents["orchestrator"] = AgentConfig(max_model_calls=200)
    return agents


class Config(Section):
    """The whole configuration."""

    model: str = "auto"
    """A preset name, provider:model-id, replay:FILE, or auto."""
    auto_order: list[str] = Field(default_factory=lambda: ["claude", "openai", "gemini", "deepseek"])
    models: dict[str, ModelPreset] = Field(default_factory=_default_presets)
    model_settings: ModelSettings = Field(default_factory=ModelSettings)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    prices: dict[str, Price] = Field(default_factory=dict)
    agents: dict[str, AgentConfig] = Field(default_factory=_default_agents)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    mcp: MCPConfig = Field(default_factory=MCPConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    mime_reader: MimeReaderConfig = Field(default_factory=MimeReaderConfig)
    safety: SafetyConfig = Field(default_factory=SafetyConfig)
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    hooks: list[HookConfig] = Field(default_factory=list)
    """Command hooks (docs/hooks.md); a project's trusted `.anges/config.yaml` adds its own after these."""
    plugin_hooks: list[str] = Field(default_factory=list)
    """Installed plug-ins (entry-point names) whose Python hooks run, or `*` for all; extensions always run."""
    _common: AgentConfig = PrivateAttr(default_factory=AgentConfig)
    """The merged `agents.common` block: the settings of an agent type without a section of its own."""

    def agent(self, agent_type: str) -> AgentConfig:
        """The settings of one agent type (a type without its own section, e.g. a plug-in's, gets `common`'s)."""
        if agent_type in self.agents:
            return self.agents[agent_type]
        if agent_type not in agent_types:
            raise ConfigError(f"unknown agent type {agent_type!r} (known: {', '.join(agent_types.names())})")
        return self._common

    def model_for(self, agent_type: str) -> str:
        """The model name an agent type uses."""
        return self.agent(agent_type).model or self.model
