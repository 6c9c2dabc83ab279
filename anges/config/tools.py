"""The sections of what a run reaches beside its shell: MCP servers, web APIs, the image and PDF reader, and the
hooks that act at the points of a run."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from anges.config.section import Section


class MCPConfig(Section):
    """MCP servers."""

    config_file: str = ""
    """A JSON file of servers ({"mcpServers": {...}} or anges 0.1.x's bare {name: {...}})."""
    servers: dict[str, dict] = Field(default_factory=dict)
    """Servers inline, in the same shape as the file's entries."""
    startup_timeout: float = 30
    """Seconds a server may take to start and list its tools before it is left out."""
    tool_timeout: float = 300
    """Seconds one tool call may take."""


class OpenAPIAuth(Section):
    """How anges signs a web API's requests: the secret comes from an environment variable or a file, and only the
    request carries it (never the prompt, the record or a log)."""

    model_config = ConfigDict(**Section.model_config, populate_by_name=True)

    type: Literal["", "bearer", "api_key", "basic"] = ""
    """bearer, api_key or basic; empty: the document's security scheme (when it has exactly one of these kinds)."""
    env: str = ""
    """The environment variable that holds the secret: the token, the key, or basic's password (or user:password)."""
    file: str = ""
    """Or a file that holds it (its text, stripped); commands cannot read it."""
    location: Literal["", "header", "query"] = Field(default="", alias="in")
    """api_key: sent in a header or a query parameter (default: the document's scheme's, else header)."""
    name: str = ""
    """api_key: the header or query parameter's name (default: the document's scheme's, else X-API-Key)."""
    username: str = ""
    """basic: the user name (empty: the secret is user:password)."""


class OpenAPISource(Section):
    """One web API described by an OpenAPI 3.0 or 3.1 document (docs/openapi.md)."""

    spec: str
    """The document: a file (JSON or YAML) or an http(s) URL; its $refs to other files and URLs are followed."""
    name: str = ""
    """What CALL_API's `api` calls it (letters, digits, - and _); default: from the document's title."""
    base_url: str = ""
    """Where calls go (scheme, host, port and base path; nothing else is reached); default: the document's first
    server."""
    auth: OpenAPIAuth = Field(default_factory=OpenAPIAuth)
    """How calls are signed (none unless `env` or `file` names a secret)."""
    operations: list[str] = Field(default_factory=list)
    """The operations offered: globs on the operationId or on "METHOD /path" (`re:PATTERN` for a regular
    expression); empty: all."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra headers sent with every call; their values are treated as secrets."""
    timeout: float = Field(default=30, gt=0)
    """Seconds one attempt may take."""
    retries: int = Field(default=2, ge=0, le=10)
    """Attempts after the first on a 429, a 5xx or a dropped connection (waiting as Retry-After asks, up to 60 s),
    for idempotent methods only (GET, HEAD, OPTIONS, PUT, DELETE) unless `retry_non_idempotent`."""
    retry_non_idempotent: bool = False
    """Retry POST and PATCH too (safe only where the API makes them idempotent, e.g. with an idempotency key)."""

    @field_validator("name")
    @classmethod
    def _is_a_name(cls, name: str) -> str:
        if name and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"must be letters, digits, - and _ (at most 64), got {name!r}")
        return name

    @field_validator("spec")
    @classmethod
    def _is_given(cls, spec: str) -> str:
        if not spec.strip():
            raise ValueError("must name a file or a URL")
        return spec


class ToolsConfig(Section):
    """Tools anges offers the model beside commands: web APIs from their OpenAPI documents."""

    openapi: list[OpenAPISource] = Field(default_factory=list)
    """The web APIs CALL_API reaches (`--openapi SPEC` adds one)."""
    openapi_index_chars: int = Field(default=40_000, ge=1_000)
    """The most characters the operations' index in the prompt takes, every source together: past it, operations
    are listed without their parameters, then by name only (DESCRIBE_API_OPERATION gives one's whole schema)."""


class MimeReaderConfig(Section):
    """Reading images and PDFs."""

    model: str = "gemini:gemini-3.8-flash"
    max_file_bytes: int = 20_000_000


HOOK_EVENTS = ("run_start", "request", "before_action", "after_action", "before_complete", "run_end",
               "approval_needed")
"""The points of a run a hook acts at (docs/hooks.md)."""
BLOCKING_EVENTS = ("request", "before_action", "before_complete")
"""The events whose hooks can stop what comes next (and may fail closed)."""


class HookMatch(Section):
    """Which occurrences of its event a hook runs for."""

    action: str = "*"
    """An action type (RUN_SHELL_CMD, EDIT_FILE, TASK_COMPLETE, ...), several joined by `|`, or * for any."""
    pattern: str = ""
    """A regular expression searched in the subject: the command, the file path, server.tool, the request, the
    answer; empty matches all."""

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return pattern


class HookConfig(Section):
    """One command hook: a shell command run outside the sandbox, with your rights, at an event of a run."""

    event: Literal["run_start", "request", "before_action", "after_action", "before_complete", "run_end",
                   "approval_needed"]
    command: str
    """Run by your shell ($SHELL, else /bin/sh) in the working directory, the event as JSON on its stdin."""
    match: HookMatch = Field(default_factory=HookMatch)
    timeout: float = Field(default=60, gt=0, le=3600)
    """Seconds it may take; then it is ended, with its children, and the run goes on."""
    fail_closed: bool = False
    """A request, before_action or before_complete hook that fails (an error, a timeout, an answer anges cannot
    read) blocks; by default a failure is recorded and the run goes on."""
    name: str = ""
    """What views call it (default: its command)."""

    @model_validator(mode="after")
    def _consistent(self) -> HookConfig:
        if not self.command.strip():
            raise ValueError("a hook's command must not be empty")
        if self.fail_closed and self.event not in BLOCKING_EVENTS:
            raise ValueError(f"fail_closed applies to {', '.join(BLOCKING_EVENTS)} hooks, not {self.event}")
        return self
