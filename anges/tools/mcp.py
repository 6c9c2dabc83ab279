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
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TextIO, cast

from anges.exceptions import AngesError, ConfigError
from anges.tools.mcp_config import ServerSpec, load_mcp_servers, specs_from_config, untrusted_servers
from anges.util.masking import mask_secrets
from anges.util.waiting import future_done, wait_for

if TYPE_CHECKING:
    from mcp import ClientSession

    from anges.config.trust import Subject
    from anges.config.types import MCPConfig

__all__ = ["MCPCallError", "MCPManager", "ServerSpec", "ToolInfo", "ToolResult", "load_mcp_servers", "manager_for",
           "specs_from_config"]

logger = logging.getLogger("anges.tools.mcp")

INSTALL_HINT = 'MCP servers need the mcp package: pip install "anges[mcp]"'
DEFAULT_TOOL_TIMEOUT = 300.0
STDERR_TAIL_CHARS = 2000
# Extra seconds the caller waits beyond the SDK's own request timeout before giving up on the loop.
WAIT_MARGIN = 5.0


def manager_for(config, extra: str | os.PathLike | Mapping | None = None,
                writable: Callable[[str], bool] | None = None) -> MCPManager | None:
    """A manager of the configured MCP servers plus those of `extra`; None when there are none. `writable` says
    where the run's commands may write (`SandboxSettings.can_write`): see `MCPManager`."""
    if not (extra or config.mcp.config_file or config.mcp.servers):
        return None
    return MCPManager.from_config(config.mcp, extra, writable)


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
    """A tool call got no result: `kind` is unknown_server, unavailable, unknown_tool, timeout, server_died,
    interrupted or failed."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class _Server:
    """The live state of one server, owned by the event loop thread."""

    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.session: ClientSession | None = None
        self.tools: list[ToolInfo] = []
        self._ready: asyncio.Future | None = None
        self.stopping = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.errlog: IO[bytes] | None = None
        self.failed = ""

    @property
    def ready(self) -> asyncio.Future:
        """Resolved once the server is up or has failed (made on first use, on the event loop's thread)."""
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
        return self._ready


class MCPManager:
    """Connects to MCP servers once, keeps them connected until `close()`, and calls their tools.

    Thread-safe: an agent and its children (in other threads) share one manager. A server that fails to
    start or dies is logged once, recorded in `failures` (name -> reason) and its tools are left out.

    With `writable` (where the run's commands may write), a stdio server whose program or script lies there is not
    started until its exact content is trusted (`anges.config.trust`): it awaits trust (`awaiting_trust`) until the
    run asks (then `admit` starts it, or `refuse` leaves it out with the reason).
    """

    def __init__(self, specs: Mapping[str, ServerSpec], startup_timeout: float = 30.0,
                 tool_timeout: float = DEFAULT_TOOL_TIMEOUT, writable: Callable[[str], bool] | None = None):
        if specs:
            _require_sdk()
        self.specs = dict(specs)
        self.startup_timeout = startup_timeout
        self.tool_timeout = tool_timeout
        self.failures: dict[str, str] = {}
        self._writable = writable
        self._awaiting = untrusted_servers(self.specs, writable) if writable is not None else {}
        self._servers = {name: _Server(spec) for name, spec in self.specs.items() if name not in self._awaiting}
        self._lock = threading.Lock()
        self._state = "new"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._startup: concurrent.futures.Future | None = None

    @classmethod
    def from_config(cls, config: MCPConfig, extra: str | os.PathLike | Mapping | None = None,
                    writable: Callable[[str], bool] | None = None) -> MCPManager:
        """A manager for the servers of the `mcp` config section plus `extra` (the --mcp-config file)."""
        return cls(specs_from_config(config, extra), startup_timeout=config.startup_timeout,
                   tool_timeout=config.tool_timeout, writable=writable)

    @property
    def secrets(self) -> list[str]:
        """Every env and header value of every server (to mask)."""
        return [s for spec in self.specs.values() for s in spec.secrets]

    def mask(self, text: str, extra: Iterable[str] = ()) -> str:
        """`text` with every server secret (and `extra`) replaced by [REDACTED]."""
        return mask_secrets(text, [*self.secrets, *extra])

    # -- trust ----------------------------------------------------------------------------------------------

    def awaiting_trust(self) -> dict[str, Subject]:
        """The servers not started until their content is trusted, with what to trust."""
        with self._lock:
            return dict(self._awaiting)

    def admit(self, name: str) -> None:
        """Start a server that awaited trust (its content is trusted now)."""
        with self._lock:
            self._awaiting.pop(name)
            server = self._servers[name] = _Server(self.specs[name])
            running = self._state == "running"
            if running:
                self._run_loop()
        if running and self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._start_one(server), self._loop).result()
            if server.failed:
                self._report(server, server.failed)

    def refuse(self, name: str, reason: str) -> None:
        """Leave out a server that awaited trust, with the reason."""
        with self._lock:
            self._awaiting.pop(name, None)
        self._report(_Server(self.specs[name]), reason)

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> MCPManager:
        """Start every server (in parallel) and list its tools; later calls wait for that once. Returns self. A server
        awaiting trust is not started (`admit` starts it)."""
        with self._lock:
            if self._state == "new":
                self._state = "running"
                if self._servers:
                    self._run_loop()
                    assert self._loop is not None
                    self._startup = asyncio.run_coroutine_threadsafe(self._start_all(), self._loop)
            startup = self._startup
        if startup is not None:
            startup.result()
            for server in self._servers.values():
                if server.failed:
                    self._report(server, server.failed)
        return self

    def _run_loop(self) -> None:
        """Start the event loop's thread (once; called holding the lock)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="anges-mcp", daemon=True)
            self._thread.start()
            atexit.register(self.close)

    def close(self) -> None:
        """Shut every server down (stdio processes are stopped, HTTP sessions ended) and stop the loop."""
        with self._lock:
            if self._state == "closed":
                return
            was_running, self._state = self._state == "running", "closed"
            loop, thread = self._loop, self._thread
        atexit.unregister(self.close)
        if not was_running or loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop_all(), loop).result(timeout=30)
        except concurrent.futures.TimeoutError:
            logger.warning("MCP servers did not shut down within 30 s")
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            if not thread.is_alive():
                loop.close()
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

    def find_tool(self, server: str, name: str) -> ToolInfo:
        """Tool `name` of `server`; MCPCallError (unknown_server, unavailable or unknown_tool) with what the model
        can do instead when there is none (starts the servers on first use)."""
        tools = self.tools()
        if server not in tools:
            known = self._servers.get(server)
            if known is None:
                names = ", ".join(tools) or "none"
                raise MCPCallError(f"There is no MCP server named '{server}'. Connected servers: {names}.",
                                   "unknown_server")
            reason = known.failed or self.failures.get(server) or "it is not connected"
            raise MCPCallError(f"MCP server '{server}' is not available: {reason.splitlines()[0]}", "unavailable")
        for tool in tools[server]:
            if tool.name == name:
                return tool
        names = ", ".join(t.name for t in tools[server]) or "none"
        raise MCPCallError(f"MCP server '{server}' has no tool named '{name}'. Its tools: {names}.", "unknown_tool")

    def call(self, server: str, tool: str, args: dict | None = None, timeout: float | None = None,
             interrupt_check: Callable[[], bool] | None = None) -> ToolResult:
        """Call one tool and wait for its result; raises MCPCallError when there is no result to show."""
        self.find_tool(server, tool)
        live = self._servers[server]
        session, loop = live.session, self._loop
        if session is None or loop is None:  # it stopped since
            raise MCPCallError(f"MCP server '{server}' is not available: {live.failed or 'it is not connected'}",
                               "unavailable")
        timeout = timeout or self.tool_timeout
        future = asyncio.run_coroutine_threadsafe(
            session.call_tool(tool, args or {}, read_timeout_seconds=timeout), loop)
        ended = wait_for(future_done(future), interrupt_check or (lambda: False), timeout + WAIT_MARGIN)
        if ended != "done":
            future.cancel()
            if ended == "stopped":
                raise MCPCallError(f"the call of {server}.{tool} was interrupted", "interrupted")
            raise MCPCallError(f"{server}.{tool} gave no result within {timeout:g} s", "timeout")
        try:
            result = future.result()
        except concurrent.futures.CancelledError:
            raise MCPCallError(f"the call of {server}.{tool} was cancelled", "interrupted") from None
        except Exception as exc:  # noqa: BLE001 - every SDK or transport failure becomes an MCPCallError
            raise self._call_error(live, tool, timeout, exc) from None
        return self._result(result)

    # -- internals (event loop thread) ----------------------------------------------------------------------

    async def _start_all(self) -> None:
        await asyncio.gather(*(self._start_one(server) for server in list(self._servers.values())))

    async def _start_one(self, server: _Server) -> None:
        if self._writable is not None and untrusted_servers({server.spec.name: server.spec}, self._writable):
            # read again right before the start: what lies where commands may write changed since it was judged
            server.failed = "not started: what it runs changed since it was trusted (or a file it names appeared " \
                            "where commands may write): the next run asks about it"
            server.ready.set_result(None)
            return
        server.task = asyncio.create_task(self._serve(server), name=f"mcp:{server.spec.name}")
        await asyncio.wait([server.ready], timeout=self.startup_timeout)
        if not server.ready.done():
            # The server's own task cancels its connection at the same deadline, in the background.
            server.failed = self._failure_text(server, f"no answer within {self.startup_timeout:g} s")
            server.ready.set_result(None)

    async def _stop_all(self) -> None:
        for server in self._servers.values():
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
        # The SDK makes it the process's stderr: any file with a descriptor does, a binary one included.
        return stdio_client(params, errlog=cast(TextIO, server.errlog))

    # -- internals (caller thread) --------------------------------------------------------------------------

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
    while isinstance(inner := getattr(exc, "exceptions", None), tuple) and inner:  # an exception group
        exc = next((e for e in inner if not isinstance(e, asyncio.CancelledError)), inner[0])
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
