"""MCP servers: read their configuration, keep them connected for a run, list and call their tools.

The `mcp` SDK is asynchronous; the agent is not. `MCPManager` runs one asyncio event loop in a background
thread, keeps one task per server that holds the connection open, and submits tool calls to that loop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import logging
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anges.exceptions import AngesError, ConfigError
from anges.shell import MIN_SECRET_LENGTH, REDACTED, mask_secrets

if TYPE_CHECKING:
    from anges.config import MCPConfig

logger = logging.getLogger("anges.mcp")

INSTALL_HINT = 'MCP servers need the mcp package: pip install "anges[mcp]"'
DEFAULT_TOOL_TIMEOUT = 300.0
STDERR_TAIL_CHARS = 2000
# Extra seconds the caller waits beyond the SDK's own request timeout before giving up on the loop.
WAIT_MARGIN = 5.0
POLL_INTERVAL = 0.1
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


def manager_for(config, extra: str | os.PathLike | Mapping | None = None) -> MCPManager | None:
    """A manager of the configured MCP servers plus those of `extra`; None when there are none."""
    if not (extra or config.mcp.config_file or config.mcp.servers):
        return None
    return MCPManager.from_config(config.mcp, extra)


def specs_from_config(config: MCPConfig, extra: str | os.PathLike | Mapping | None = None) -> dict[str, ServerSpec]:
    """The servers of the `mcp` config section (its file, then inline servers), then `extra` (e.g. --mcp-config)."""
    specs: dict[str, ServerSpec] = {}
    for source in (config.config_file or None, config.servers or None, extra):
        if source:
            specs.update(load_mcp_servers(source))
    return specs


def _read_json(path: Path) -> Any:
    from anges.sandbox import hide_secret_file

    hide_secret_file(path)  # its env and headers hold secrets: commands do not see it
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


# -- the manager ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolInfo:
    """One tool a server offers."""

    name: str
    description: str
    input_schema: dict


@dataclass
class ToolResult:
    """What a tool call returned: its text, its structured content (or None) and whether it is an error."""

    text: str
    structured: Any = None
    is_error: bool = False


class MCPCallError(AngesError):
    """A tool call got no result: `kind` is unavailable, unknown_tool, timeout, server_died, interrupted or failed."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class _Server:
    """The live state of one server, owned by the event loop thread."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.session = None
        self.tools: list[ToolInfo] = []
        self.ready: asyncio.Future | None = None
        self.stopping: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.errlog = None
        self.failed = ""


class MCPManager:
    """Connects to MCP servers once, keeps them connected until `close()`, and calls their tools.

    Thread-safe: an agent and its children (in other threads) share one manager. A server that fails to
    start or dies is logged once, recorded in `failures` (name -> reason) and its tools are left out.
    """

    def __init__(self, specs: Mapping[str, ServerSpec], startup_timeout: float = 30.0,
                 tool_timeout: float = DEFAULT_TOOL_TIMEOUT):
        if specs:
            _require_sdk()
        self.specs = dict(specs)
        self.startup_timeout = startup_timeout
        self.tool_timeout = tool_timeout
        self.failures: dict[str, str] = {}
        self._servers = {name: _Server(spec) for name, spec in self.specs.items()}
        self._lock = threading.Lock()
        self._state = "new"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._startup: concurrent.futures.Future | None = None

    @classmethod
    def from_config(cls, config: MCPConfig, extra: str | os.PathLike | Mapping | None = None) -> MCPManager:
        """A manager for the servers of the `mcp` config section plus `extra` (the --mcp-config file)."""
        return cls(specs_from_config(config, extra), startup_timeout=config.startup_timeout,
                   tool_timeout=config.tool_timeout)

    @property
    def secrets(self) -> list[str]:
        """Every env and header value of every server (to mask)."""
        return [s for spec in self.specs.values() for s in spec.secrets]

    def mask(self, text: str, extra: Iterable[str] = ()) -> str:
        """`text` with every server secret (and `extra`) replaced by [REDACTED]."""
        return mask_secrets(text, [*self.secrets, *extra])

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> MCPManager:
        """Start every server (in parallel) and list its tools; later calls wait for that once. Returns self."""
        with self._lock:
            if self._state == "new":
                self._state = "running"
                if self._servers:
                    self._loop = asyncio.new_event_loop()
                    self._thread = threading.Thread(target=self._loop.run_forever, name="anges-mcp", daemon=True)
                    self._thread.start()
                    atexit.register(self.close)
                    self._startup = asyncio.run_coroutine_threadsafe(self._start_all(), self._loop)
            startup = self._startup
        if startup is not None:
            startup.result()
            for server in self._servers.values():
                if server.failed:
                    self._report(server, server.failed)
        return self

    def close(self) -> None:
        """Shut every server down (stdio processes are stopped, HTTP sessions ended) and stop the loop."""
        with self._lock:
            if self._state == "closed":
                return
            was_running, self._state = self._state == "running" and self._loop is not None, "closed"
        atexit.unregister(self.close)
        if not was_running:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop_all(), self._loop).result(timeout=30)
        except concurrent.futures.TimeoutError:
            logger.warning("MCP servers did not shut down within 30 s")
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()
            for server in self._servers.values():
                if server.errlog is not None:
                    server.errlog.close()

    def __enter__(self) -> MCPManager:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- tools ----------------------------------------------------------------------------------------------

    def tools(self) -> dict[str, list[ToolInfo]]:
        """The tools of every server that is up, by server name (starts the servers on first use)."""
        self.start()
        return {name: list(s.tools) for name, s in self._servers.items() if s.session is not None and not s.failed}

    def call(self, server: str, tool: str, args: dict | None = None, timeout: float | None = None,
             interrupt_check: Callable[[], bool] | None = None) -> ToolResult:
        """Call one tool and wait for its result; raises MCPCallError when there is no result to show."""
        self.start()
        live = self._live(server)
        if tool not in {t.name for t in live.tools}:
            names = ", ".join(t.name for t in live.tools) or "none"
            raise MCPCallError(f"server '{server}' has no tool '{tool}' (its tools: {names})", "unknown_tool")
        timeout = timeout or self.tool_timeout
        future = asyncio.run_coroutine_threadsafe(
            live.session.call_tool(tool, args or {}, read_timeout_seconds=timeout), self._loop)
        deadline = time.monotonic() + timeout + WAIT_MARGIN
        while True:
            try:
                result = future.result(timeout=POLL_INTERVAL)
                break
            except concurrent.futures.TimeoutError:
                if interrupt_check is not None and interrupt_check():
                    future.cancel()
                    raise MCPCallError(f"the call of {server}.{tool} was interrupted", "interrupted") from None
                if time.monotonic() > deadline:
                    future.cancel()
                    raise MCPCallError(f"{server}.{tool} gave no result within {timeout:g} s", "timeout") from None
            except concurrent.futures.CancelledError:
                raise MCPCallError(f"the call of {server}.{tool} was cancelled", "interrupted") from None
            except Exception as exc:  # noqa: BLE001 - every SDK or transport failure becomes an MCPCallError
                raise self._call_error(live, tool, timeout, exc) from None
        return self._result(result)

    # -- internals (event loop thread) ----------------------------------------------------------------------

    async def _start_all(self) -> None:
        for server in self._servers.values():
            server.ready = asyncio.get_running_loop().create_future()
            server.stopping = asyncio.Event()
            server.task = asyncio.create_task(self._serve(server), name=f"mcp:{server.spec.name}")
        readies = [s.ready for s in self._servers.values()]
        await asyncio.wait(readies, timeout=self.startup_timeout)
        for server in self._servers.values():
            if not server.ready.done():
                # The server's own task cancels its connection at the same deadline, in the background.
                server.failed = self._failure_text(server, f"no answer within {self.startup_timeout:g} s")
                server.ready.set_result(None)

    async def _stop_all(self) -> None:
        for server in self._servers.values():
            if server.stopping is not None:
                server.stopping.set()
        tasks = [s.task for s in self._servers.values() if s.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, server: _Server) -> None:
        """Open the connection, list the tools, then hold the connection until asked to stop."""
        import anyio

        error = ""
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.startup_timeout) as scope:
                try:
                    await self._connect_and_hold(server, scope)
                except Exception as exc:  # noqa: BLE001 - a server that fails is reported; the run goes on
                    error = _describe_exception(exc, starting=not server.ready.done())
            if scope.cancelled_caught and not server.ready.done():
                error = error or f"no answer within {self.startup_timeout:g} s"
        finally:
            server.session = None
            reason = error or "the connection closed"
            if not server.ready.done():
                server.failed = self._failure_text(server, reason)
                server.ready.set_result(None)
            elif not server.stopping.is_set() and not server.failed:
                self._mark_dead(server, reason)

    async def _connect_and_hold(self, server: _Server, scope) -> None:
        from contextlib import AsyncExitStack

        from mcp import ClientSession
        from mcp.types import Implementation

        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport(server, stack))
            session = await stack.enter_async_context(
                ClientSession(read, write, client_info=Implementation(name="anges", version=_version())))
            await session.initialize()
            tools = await _list_tools(session)
            if server.ready.done():
                return  # start() gave up on this server already
            server.tools, server.session = tools, session
            scope.deadline = math.inf
            server.ready.set_result(None)
            await server.stopping.wait()

    def _transport(self, server: _Server, stack):
        spec = server.spec
        if spec.url:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            client = httpx2.AsyncClient(headers=spec.headers, timeout=httpx2.Timeout(30.0, read=300.0))
            stack.push_async_callback(client.aclose)
            return streamable_http_client(spec.url, http_client=client)
        from mcp import StdioServerParameters, stdio_client

        # Append mode: the child writes at the end whatever our own file offset is.
        server.errlog = tempfile.TemporaryFile(mode="a+b", prefix="anges-mcp-")  # noqa: SIM115 - closed in close()
        params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None,
                                       cwd=spec.cwd or None)
        return stdio_client(params, errlog=server.errlog)

    # -- internals (caller thread) --------------------------------------------------------------------------

    def _live(self, name: str) -> _Server:
        server = self._servers.get(name)
        if server is None:
            names = ", ".join(self.tools()) or "none"
            raise MCPCallError(f"there is no MCP server named '{name}' (available: {names})", "unavailable")
        if server.failed or server.session is None:
            reason = server.failed or self.failures.get(name, "it is not connected")
            raise MCPCallError(f"MCP server '{name}' is not available: {reason}", "unavailable")
        return server

    def _call_error(self, server: _Server, tool: str, timeout: float, exc: Exception) -> MCPCallError:
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        name = server.spec.name
        code = getattr(exc, "code", None) if isinstance(exc, MCPError) else None
        if code == REQUEST_TIMEOUT:
            return MCPCallError(f"{name}.{tool} gave no result within {timeout:g} s", "timeout")
        if code == CONNECTION_CLOSED or server.task is None or server.task.done():
            reason = self._mark_dead(server, f"the connection closed when calling {tool} ({exc})")
            return MCPCallError(f"MCP server '{name}' stopped: {reason}; its tools are no longer available",
                                "server_died")
        return MCPCallError(self.mask(f"{name}.{tool} failed: {_describe_exception(exc)}"), "failed")

    def _mark_dead(self, server: _Server, reason: str) -> str:
        if not server.failed:
            server.failed = self._failure_text(server, reason)
        self._report(server, server.failed)
        return server.failed

    def _report(self, server: _Server, reason: str) -> None:
        name = server.spec.name
        with self._lock:
            if name in self.failures or self._state == "closed":
                return
            self.failures[name] = reason
        logger.warning("MCP server '%s' is unavailable: %s", name, reason)

    def _failure_text(self, server: _Server, reason: str) -> str:
        text = reason
        tail = _tail(server.errlog)
        if tail:
            text += f"; its stderr ends with:\n{tail}"
        return self.mask(text)

    def _result(self, result) -> ToolResult:
        parts = [_content_text(block) for block in result.content]
        structured = result.structured_content
        if structured is not None:
            structured = json.loads(self.mask(json.dumps(structured, ensure_ascii=False, default=str)))
        return ToolResult(text=self.mask("\n".join(p for p in parts if p)), structured=structured,
                          is_error=bool(result.is_error))


async def _list_tools(session) -> list[ToolInfo]:
    tools, cursor = [], None
    for _ in range(100):
        if cursor is None:
            page = await session.list_tools()
        else:
            from mcp.types import PaginatedRequestParams

            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        tools += [ToolInfo(t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _content_text(block) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        size = len(block.data) * 3 // 4
        return f"[{kind}: {block.mime_type}, about {size} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource link: {block.uri}{' (' + block.name + ')' if getattr(block, 'name', '') else ''}]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return f"[resource {resource.uri}]\n{text}"
        return f"[resource {resource.uri}: {getattr(resource, 'mime_type', None) or 'binary'}, not shown]"
    return f"[{kind or 'unknown'} content, not shown]"


def _describe_exception(exc: BaseException, starting: bool = False) -> str:
    """The innermost meaningful message of an exception (or exception group)."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # an exception group
        exc = next((e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)), exc.exceptions[0])
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if starting and getattr(exc, "code", None) == -32000:  # CONNECTION_CLOSED
        return "the server closed the connection during startup (did it exit?)"
    text = str(exc) or type(exc).__name__
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


def _tail(errlog) -> str:
    if errlog is None or errlog.closed:
        return ""
    try:
        fd = errlog.fileno()
        size = os.fstat(fd).st_size
        start = max(size - STDERR_TAIL_CHARS * 4, 0)
        data = os.pread(fd, size - start, start)
    except (OSError, ValueError):
        return ""
    return data.decode("utf-8", errors="replace").strip()[-STDERR_TAIL_CHARS:]


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("anges")
    except PackageNotFoundError:
        return "0"
