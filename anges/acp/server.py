"""The ACP agent: initialize, session/new, session/load, session/prompt and session/cancel, served over stdio."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.schema import (
    AgentCapabilities,
    EmbeddedResourceContentBlock,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

from anges import __version__
from anges.acp.session import Session
from anges.acp.stdio import open_streams
from anges.acp.wire import Wire
from anges.exceptions import AngesError, InvalidStreamId, StreamNotFound

if TYPE_CHECKING:
    from acp.interfaces import Agent

log = logging.getLogger("anges.acp")

STDIO_LIMIT = 50 * 1024 * 1024
"""The longest protocol message read (a prompt with embedded files)."""
AUTH_REQUIRED = -32000
"""The protocol's error for a request that needs credentials the agent lacks."""


@dataclass(frozen=True)
class Options:
    """What `anges acp` was started with."""

    config: Any
    model: str | None = None
    agent_type: str = "default"


class AngesAgent:
    """anges as an ACP agent: each session is an anges stream in the store, worked on by one agent."""

    def __init__(self, options: Options, wire: Wire | None = None):
        from anges.store.event_store import EventStore

        self.options = options
        self.wire = wire or Wire()
        self.store = EventStore()
        self.sessions: dict[str, Session] = {}
        self.client = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._models: dict[str, Any] = {}

    def on_connect(self, conn) -> None:
        self.client = conn
        self.loop = asyncio.get_running_loop()
        self.wire.connection = getattr(conn, "_conn", None)  # the SDK's Connection (see Wire.void)

    async def initialize(self, protocol_version: int, client_capabilities=None, client_info=None,
                         **kwargs) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True, prompt_capabilities=PromptCapabilities(embedded_context=True),
                mcp_capabilities=McpCapabilities(http=True)),
            agent_info=Implementation(name="anges", title="anges", version=__version__))

    async def new_session(self, cwd: str, mcp_servers=None, **kwargs) -> NewSessionResponse:
        from anges.store.events import EventStream

        session = await asyncio.to_thread(self._open, EventStream(), cwd, mcp_servers)
        return NewSessionResponse(session_id=session.uid)

    async def load_session(self, cwd: str, session_id: str, mcp_servers=None, **kwargs) -> LoadSessionResponse:
        session = self.sessions.get(session_id)
        if session is None:
            stream = await asyncio.to_thread(self._load, session_id)
            session = await asyncio.to_thread(self._open, stream, cwd, mcp_servers)
        await asyncio.to_thread(session.replay, self.store)
        return LoadSessionResponse()

    async def prompt(self, prompt: list, session_id: str, **kwargs) -> PromptResponse:
        session = self._session(session_id)
        request = request_text(prompt, session.cwd)
        if not request:
            raise RequestError(-32602, "the prompt is empty")
        return PromptResponse(stop_reason=await asyncio.to_thread(session.run_turn, request))

    async def cancel(self, session_id: str, **kwargs) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel()

    async def authenticate(self, method_id: str, **kwargs) -> None:
        """Nothing to do: model credentials come from the environment and the config, as for the CLI."""

    def close(self) -> None:
        """Stop every running turn and end what the sessions started."""
        for session in list(self.sessions.values()):
            session.close()

    # -- sessions -------------------------------------------------------------------------------------------------

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError(-32602, f"no session {repr(session_id)[:80]} here: start one with session/new, or "
                                       "session/load a stored stream")
        return session

    def _load(self, uid: str):
        try:
            stream = self.store.load(uid)
        except (StreamNotFound, InvalidStreamId) as exc:
            raise RequestError(-32602, f"cannot load session {repr(uid)[:80]}: {exc}") from None
        if stream.parent_event_stream_uids:
            top = stream.parent_event_stream_uids[0]
            raise RequestError(-32602, f"{uid} is a child agent's stream; load its top-level stream {top}")
        return stream

    def _open(self, stream, cwd: str, mcp_servers) -> Session:
        """A session on `stream` working in `cwd`, with the client's MCP servers (plus the configured ones)."""
        from anges.agents import agent_class
        from anges.safety.run_safety import commands_may_write, run_secrets
        from anges.tools.mcp import manager_for

        if not os.path.isabs(cwd) or not os.path.isdir(cwd):
            raise RequestError(-32602, f"cwd must be an absolute path to a directory, got {cwd!r}")
        if self.loop is None:
            raise RequestError(-32603, "no client is connected")
        config = self.options.config
        agent_type = stream.agent_type or self.options.agent_type
        stream.agent_type = agent_type
        try:
            model = self._model(agent_type)
            mcp = manager_for(config, mcp_config(mcp_servers) if mcp_servers else None,
                              commands_may_write(config.safety, cwd))
        except AngesError as exc:
            raise RequestError(-32602, str(exc)) from None
        session = Session(stream.uid, self.client, self.loop, os.path.abspath(cwd), run_secrets(config, None, mcp)[0],
                          self.wire)
        try:
            agent = agent_class(agent_type)(
                inference_func=session.watch(model), event_stream=stream, cmd_init_dir=session.cwd, config=config,
                store=self.store, message_handlers=[session.on_message], mcp=mcp, approval=session.approval(),
                interrupt_check=session.cancelled)
        except AngesError as exc:
            if mcp is not None:
                mcp.close()
            raise RequestError(-32602, str(exc)) from None
        agent.delta_handlers.append(session.on_delta)
        session.attach(agent)
        self.sessions[session.uid] = session
        log.info("session %s (%s agent) in %s", session.uid, agent_type, session.cwd)
        return session

    def _model(self, agent_type: str):
        """One model per agent type, shared by the sessions (a scripted model's replies run on across them); the
        protocol's authentication-required error when its credentials are missing."""
        from anges.models import get_model

        if agent_type not in self._models:
            missing = missing_credentials(self.options.model, self.options.config, agent_type)
            if missing:
                raise RequestError(AUTH_REQUIRED, f"Authentication required: {missing}")
            self._models[agent_type] = get_model(self.options.model, self.options.config, agent_type)
        return self._models[agent_type]


def missing_credentials(name: str | None, config: Any, agent_type: str) -> str:
    """What the model needs that the environment lacks ("" when nothing: a key is set, or none is needed)."""
    from anges.exceptions import ModelSetupError
    from anges.models import find_preset
    from anges.models.provider import credential_hint, has_credentials

    name = (name or config.model_for(agent_type)).strip()
    if name.partition(":")[0] in ("scripted", "replay"):
        return ""
    try:
        _, preset = find_preset(name, config)
    except ModelSetupError as exc:
        return str(exc) if name == "auto" else ""  # `auto` fails only for want of credentials; the rest is said later
    if has_credentials(preset):
        return ""
    return (f"model {name!r} needs {credential_hint(preset) or 'its credentials'} set in the environment the editor "
            "starts anges acp with (its `env` setting), or another --model")


def mcp_config(servers: list) -> dict:
    """The client's MCP servers in the `{"mcpServers": ...}` form `--mcp-config` files use."""
    from anges.exceptions import ConfigError

    entries = {}
    for server in servers:
        kind = getattr(server, "type", "stdio")
        if kind == "stdio":
            entries[server.name] = {"command": server.command, "args": list(server.args),
                                    "env": {item.name: item.value for item in server.env}}
        elif kind in ("http", "sse"):  # anges explains that it does not speak the legacy SSE transport
            entries[server.name] = {"type": kind, "url": server.url,
                                    "headers": {item.name: item.value for item in server.headers}}
        else:
            raise ConfigError(f"MCP server {server.name!r}: the {kind!r} transport is not supported (use stdio or "
                              "http)")
    return {"mcpServers": entries}


def request_text(blocks: list, cwd: str) -> str:
    """The request a prompt's content blocks make: the text, mentioned files as paths, embedded files appended."""
    parts: list[tuple[str, bool]] = []  # (text, is a mention)
    attached = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append((block.text, False))
        elif isinstance(block, ResourceContentBlock):
            parts.append((_path(block.uri, cwd), True))
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            parts.append((_path(resource.uri, cwd), True))
            if isinstance(resource, TextResourceContents):
                attached.append(f"Contents of {_path(resource.uri, cwd)}:\n```\n{resource.text}\n```")
        else:
            kind = str(getattr(block, "type", "") or "content")
            article = "an" if kind[:1] in "aeiou" else "a"
            parts.append((f"[{article} {kind} block anges cannot read was left out]", True))
    text = ""
    for index, (part, mention) in enumerate(parts):
        apart = index and (mention or parts[index - 1][1])
        text += " " + part if apart and not text[-1:].isspace() and not part[:1].isspace() else part
    return "\n\n".join([text.strip(), *attached]).strip()


def _path(uri: str, cwd: str) -> str:
    if not uri.startswith("file://"):
        return uri
    from urllib.parse import unquote, urlparse

    path = unquote(urlparse(uri).path)
    relative = os.path.relpath(path, cwd)
    return path if relative.startswith(os.pardir) else relative


async def serve(options: Options, protocol_in, protocol_out) -> None:
    """Serve ACP on the given binary pipes (or files) until the client closes them or a stop signal comes."""
    loop = asyncio.get_running_loop()
    wire = Wire()
    reader, writer, feeding = await open_streams(protocol_in, protocol_out, wire, STDIO_LIMIT)
    agent = AngesAgent(options, wire)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    # acp's router calls only the methods an agent has (by name, with keywords): ours has no list or fork of sessions
    serving = asyncio.ensure_future(run_agent(cast("Agent", agent), writer, reader, observers=[wire]))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await asyncio.to_thread(agent.close)
        tasks = [task for task in (serving, stopping, feeding) if task is not None]
        for task in tasks:
            task.cancel()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.error("the connection failed: %s", outcome)
