"""The agent a command line asks for, built again when a session changes stream, model, sandbox or approval."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from anges.config.arguments import config_overrides, with_openapi
from anges.exceptions import UsageError

if TYPE_CHECKING:
    from anges.agents import BaseAgent
    from anges.store.events import EventStream


class Setup:
    """The configuration, store, model and options of the arguments, and how to build an agent from them."""

    def __init__(self, args: argparse.Namespace):
        from anges.config.loading import load_config
        from anges.store.event_store import EventStore

        self.args = args
        self.config = with_openapi(load_config(args.config, config_overrides(args)), args.openapi)
        self.store = EventStore()
        self.model = args.model
        """The model name asked for (None: the configured one); `/model` changes it."""

    def stream(self, uid: str | None = None) -> EventStream:
        """The saved stream `uid`, or a new one."""
        from anges.store.events import EventStream

        return self.store.load(uid) if uid is not None else EventStream()

    def change_safety(self, **changes) -> None:
        """Run the next agents with these `safety` settings (sandbox, approval)."""
        safety = self.config.safety.model_copy(update=changes)
        self.config = self.config.model_copy(update={"safety": safety})

    def model_for(self, agent_type: str, name: str | None = None):
        """The model `name` stands for (default: the one asked for), recorded if --record says so."""
        from anges.models import get_model

        return get_model(name or self.model, self.config, agent_type, record=self.args.record)

    def agent(self, stream: EventStream, output, channel=None, model=None) -> BaseAgent:
        """An agent on `stream` with the configuration, model and MCP servers asked for, reporting to `output` and
        asking `channel` (the terminal's question, when a person can answer there); `model` (a previous agent's,
        as it was watched) carries on where that agent left it."""
        from anges.agents import agent_class
        from anges.safety.run_safety import commands_may_write, terminal_approval
        from anges.tools.mcp import manager_for

        args = self.args
        workdir = _workdir(args, stream)
        mcp_file = _mcp_file(args, stream)
        agent_type = args.agent or stream.agent_type or "default"
        stream.agent_type = stream.agent_type or agent_type
        model = model if model is not None else output.watch(self.model_for(agent_type))
        prefix = args.cmd_prefix if args.cmd_prefix is not None else stream.agent_settings.get("prefix_cmd", "")
        channel, warnings = terminal_approval(self.config.safety, workdir, channel)
        for warning in warnings:
            print(f"anges: {warning}", file=sys.stderr)
        agent = agent_class(agent_type)(
            inference_func=model, event_stream=stream, cmd_init_dir=workdir, prefix_cmd=prefix,
            config=self.config, store=self.store, notes=notes(args, self.config.safety, workdir),
            message_handlers=[output.on_message],
            mcp=manager_for(self.config, mcp_file, commands_may_write(self.config.safety, workdir)), approval=channel)
        agent.delta_handlers.append(output.on_delta)
        return agent


def close_agent(agent: BaseAgent | None) -> None:
    """End what the agent keeps: background jobs, MCP servers."""
    if agent is not None:
        agent.close()
        if agent.mcp is not None:
            agent.mcp.close()


def _mcp_file(args: argparse.Namespace, stream) -> str | None:
    """The --mcp-config file (or the resumed stream's), checked and remembered in the stream's settings."""
    given = args.mcp_config or stream.agent_settings.get("mcp_config")
    if not given:
        return None
    path = Path(given).expanduser()
    if not path.is_file():
        where = "--mcp-config" if args.mcp_config else "the stream's MCP config"
        raise UsageError(f"{where} {given}: no such file")
    stream.update_settings({"mcp_config": str(path.resolve())})
    return str(path.resolve())


def _workdir(args: argparse.Namespace, stream) -> str:
    saved = stream.agent_settings.get("cmd_init_dir")
    path = os.path.abspath(os.path.expanduser(args.path or saved or os.getcwd()))
    if not os.path.isdir(path):
        where = "--path" if args.path else "the stream's working directory"
        raise UsageError(f"{where} {path} is not a directory" + ("" if args.path else "; choose one with --path DIR"))
    return path


def notes(args: argparse.Namespace, safety, workdir: str) -> list[str]:
    """The notes of --notes and --notes-file."""
    return list(args.notes) + [read_file(path, safety, workdir) for path in args.notes_file]


def read_file(path: str, safety, workdir: str) -> str:
    """A file you named (-f, --notes-file), read by the sandbox's rules: a command of an earlier run may have made
    it a link, so one that leads into a place hidden from commands is not read, and no link swapped in after
    that check is followed."""
    from anges.safety.sandbox import SandboxSettings
    from anges.util.paths import open_nofollow, resolve

    named = os.path.abspath(os.path.expanduser(path))
    try:
        real = resolve(named)
        if real != named and SandboxSettings.for_run(safety, workdir).is_hidden(real):
            raise UsageError(f"cannot read {path}: it is a link into a place hidden from commands ({real}), which a "
                             "command may have made; not read")
        with os.fdopen(open_nofollow(real, os.O_RDONLY | os.O_NONBLOCK), encoding="utf-8") as stream:
            return stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
