"""MCP server configuration: the `{"mcpServers": {...}}` files and the `mcp` config section, read into ServerSpecs."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anges.exceptions import ConfigError
from anges.util.masking import MIN_SECRET_LENGTH, REDACTED

if TYPE_CHECKING:
    from anges.config.trust import Subject
    from anges.config.types import MCPConfig

HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamablehttp")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


# -- configuration ----------------------------------------------------------------------------------------------


@dataclass
class ServerSpec:
    """How to reach one MCP server: a command to run (stdio) or a URL (streamable HTTP)."""

    name: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    """Extra environment variables for the server process; their values are secrets."""
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """HTTP headers sent with every request; their values are secrets."""

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    @property
    def secrets(self) -> list[str]:
        """Values to mask wherever text from or about this server is shown or stored."""
        values = []
        for value in [*self.env.values(), *self.headers.values()]:
            values.append(value)
            # "Bearer <token>": the server may echo the token alone.
            values.extend(value.split()[1:] if " " in value.strip() else [])
        return [v for v in values if len(v) >= MIN_SECRET_LENGTH]

    def describe(self) -> str:
        """The command line or URL, for messages (never the env or headers)."""
        if self.url:
            return self.url
        return " ".join([self.command, *self.args])

    def redacted(self) -> dict:
        """The spec as JSON-able data with every env and header value replaced: safe to store and show."""
        data: dict[str, Any] = {"url": self.url} if self.url else {"command": self.command, "args": list(self.args)}
        if self.cwd:
            data["cwd"] = self.cwd
        if self.env:
            data["env"] = {key: REDACTED for key in self.env}
        if self.headers:
            data["headers"] = {key: REDACTED for key in self.headers}
        return data


def load_mcp_servers(source: str | os.PathLike | Mapping) -> dict[str, ServerSpec]:
    """Server specs from a JSON file path or a mapping, in the `{"mcpServers": {...}}` or bare `{name: {...}}` format.

    Entries with `"disabled": true` are skipped; `${VAR}` and `${VAR:-default}` are expanded from the
    environment in every string value; keys this module does not use (e.g. `autoApprove`) are ignored.
    """
    if isinstance(source, (str, os.PathLike)):
        where = str(source)
        raw = _read_json(Path(source).expanduser())
    else:
        where = "MCP server config"
        raw = source
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a JSON object of MCP servers, got {type(raw).__name__}")
    servers = raw.get("mcpServers", raw)
    if not isinstance(servers, Mapping):
        raise ConfigError(f"{where}: 'mcpServers' must be an object mapping server names to their settings")
    specs = {}
    for name, entry in servers.items():
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: server '{name}': expected an object with 'command' or 'url', "
                              f"got {type(entry).__name__}")
        if entry.get("disabled") is True:
            continue
        specs[str(name)] = _spec(str(name), entry, where)
    return specs


def specs_from_config(config: MCPConfig, extra: str | os.PathLike | Mapping | None = None) -> dict[str, ServerSpec]:
    """The servers of the `mcp` config section (its file, then inline servers), then `extra` (e.g. --mcp-config)."""
    specs: dict[str, ServerSpec] = {}
    for source in (config.config_file or None, config.servers or None, extra):
        if source:
            specs.update(load_mcp_servers(source))
    return specs


def untrusted_servers(specs: Mapping[str, ServerSpec], writable: Callable[[str], bool],
                      cwd: str | None = None) -> dict[str, Subject]:
    """The stdio servers whose program or script lies where commands may write (`writable`) and whose exact content
    the user has not trusted, with what to trust. A server without a `cwd` of its own starts in `cwd` (default:
    this process's)."""
    from anges.config.trust import TrustStore, command_subject

    store, found = TrustStore(), {}
    for name, spec in specs.items():
        if spec.url:
            continue
        start = os.path.realpath(os.path.expanduser(spec.cwd or cwd or "."))
        argv = [spec.command, *spec.args]
        subject = command_subject("mcp_server", f"{name} in {start}", f"MCP server `{name}`", [argv], start, writable,
                                  shlex.join(argv))
        if subject is not None and not store.trusts(subject):
            found[name] = subject
    return found


def _read_json(path: Path) -> Any:
    from anges.util.masking import note_secret_file

    note_secret_file(path)  # its env and headers hold secrets: commands do not see it
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: MCP config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the MCP config file: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None


def _spec(name: str, entry: Mapping, where: str) -> ServerSpec:
    at = f"{where}: server '{name}'"
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    if kind == "sse":
        raise ConfigError(f"{at}: the legacy SSE transport is not supported; use the server's streamable HTTP "
                          "endpoint ('url') or run it over stdio ('command')")
    command, url = entry.get("command"), entry.get("url") or entry.get("serverUrl")
    if command and url:
        raise ConfigError(f"{at}: give either 'command' (stdio) or 'url' (streamable HTTP), not both")
    if not command and not url:
        raise ConfigError(f"{at}: needs 'command' (a program to run over stdio) or 'url' (a streamable HTTP endpoint)")
    if kind and kind not in ("stdio", *HTTP_TYPES):
        raise ConfigError(f"{at}: unknown transport type {kind!r} (use 'stdio' or 'http')")
    if url:
        written = _string(url, at, "url")
        url = _expand(written, at, "url")
        if not url.startswith(("http://", "https://")):  # quote what the file says: ${VAR} may hold a secret
            raise ConfigError(f"{at}: 'url' must start with http:// or https://, got {written!r}")
        return ServerSpec(name, url=url, headers=_strings(entry.get("headers"), at, "headers"))
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise ConfigError(f"{at}: 'args' must be a list of strings")
    cwd = entry.get("cwd") or ""
    return ServerSpec(
        name,
        command=_expand(_string(command, at, "command"), at, "command"),
        args=[_expand(str(a), at, "args") for a in args],
        env=_strings(entry.get("env"), at, "env"),
        cwd=_expand(_string(cwd, at, "cwd"), at, "cwd") if cwd else "",
    )


def _string(value: Any, at: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{at}: '{key}' must be a non-empty string, got {value!r}")
    return value


def _strings(value: Any, at: str, key: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{at}: '{key}' must be an object of names to string values")
    result = {}
    for name, item in value.items():
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            # The value itself is a secret: name the key only.
            raise ConfigError(f"{at}: '{key}.{name}' must be a string")
        result[str(name)] = _expand(str(item), at, f"{key}.{name}")
    return result


def _expand(text: str, at: str, key: str) -> str:
    def value(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{at}: '{key}' uses ${{{name}}}, which is not set in the environment")

    return _VARIABLE.sub(value, text)
