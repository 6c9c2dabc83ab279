"""`/status`: what the session runs with — the model and its window, the sandbox and approvals, where it works,
the stream, the project's AGENTS.md files, MCP servers, hooks and custom commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from anges.util.printable import printable

if TYPE_CHECKING:
    from anges.cli.commands import Interactive


def status_lines(session: Interactive) -> list[tuple[str, str]]:
    """(what, value) pairs, one a line."""
    agent, config, status = session.session.agent, session.setup.config, session.status
    stream = agent.event_stream
    lines = [("model", status.model or "?"), ("window", _window(status)), *_sandbox(agent, config.safety),
             ("approvals", f"{config.safety.approval or 'ask'}" + ("" if status.approval != "auto" else
                                                                  " (leaving the sandbox is still declined)")),
             ("directory", agent.cmd_init_dir)]
    if stream is not None:
        saved = f"{len(stream.events_list)} events" if stream.events_list else "new: nothing recorded yet"
        lines.append(("stream", f"{stream.uid} ({saved})"))
    lines += [("AGENTS.md", _agents_md(agent, config)), ("MCP servers", _mcp(agent)),
              ("hooks", _hooks(config, agent.cmd_init_dir)), ("commands", _commands(session))]
    totals = status.session.parts()
    lines.append(("this session", " · ".join(totals)))
    return [(what, printable(value)) for what, value in lines]


def _window(status) -> str:
    from anges.agents.sizing import SOURCES

    window = status.window
    tokens = window.get("context_window")
    if not tokens:
        return "not known yet (a request's first model call tells it)"
    source = window.get("context_window_source", "?")
    text = f"{tokens:,} tokens ({SOURCES.get(source, source)}"
    text += f": {window['context_window_detail']})" if window.get("context_window_detail") else ")"
    if window.get("token_count"):
        text += ", prompts counted by its server's tokenizer" if window["token_count"] == "server" else \
            ", prompts' tokens estimated"
    if status.fill is not None:
        text += f"; the last prompt took {status.prompt_tokens:,} tokens, {status.fill:.0%} of it"
    return text


def _sandbox(agent, safety) -> list[tuple[str, str]]:
    mode = safety.sandbox
    run = agent.run_safety
    if run is None:
        return [("sandbox", f"{mode} (checked when the first request runs)")]
    if run.sandboxed:
        return [("sandbox", f"{mode}: commands write only {', '.join(run.settings.writable) or 'a private /tmp'}")]
    return [("sandbox", f"{mode}: commands run without one: {run.unsandboxed_reason}")]


def _agents_md(agent, config) -> str:
    from anges.prompt.agents_md import read_agents_md
    from anges.safety.sandbox import SandboxSettings

    if not config.prompt.agents_md:
        return "not read (prompt.agents_md is off)"
    hidden = SandboxSettings.for_run(config.safety, agent.cmd_init_dir).is_hidden
    files = read_agents_md(agent.cmd_init_dir, config.prompt.max_agents_md_chars, [], hidden)
    if not files:
        return "none in this folder or above it (up to the repository's root)"
    return "; ".join(f"{file.path}" + (f" (not read: {file.error})" if file.error else
                                       " (cut at the limit)" if file.cut else f" ({len(file.text):,} characters)")
                     for file in reversed(files))


def _mcp(agent) -> str:
    manager = agent.mcp
    if manager is None or not manager.specs:
        return "none"
    return ", ".join(f"{name} (failed: {manager.failures[name]})" if name in manager.failures else name
                     for name in manager.specs)


def _hooks(config, cwd: str) -> str:
    from anges.config.trust import TrustStore, load_project
    from anges.exceptions import ConfigError
    from anges.safety.sandbox import SandboxSettings

    parts = [f"{hook.event}: {hook.name or hook.command}" for hook in config.hooks]
    parts += [f"plug-in {name}" for name in config.plugin_hooks]
    try:
        project = load_project(cwd, SandboxSettings.for_run(config.safety, cwd).can_write)
    except ConfigError as exc:
        return ", ".join([*parts, f"the project's: not used ({exc})"])
    if project is not None and project.hooks:
        trusted = TrustStore().trusts(project.subject)
        parts += [f"{hook.event}: {hook.name or hook.command} (the project's" + (")" if trusted else
                  ", not trusted: not run)") for hook in project.hooks]
    return ", ".join(parts) or "none"


def _commands(session: Interactive) -> str:
    from anges.cli.commands import your_commands

    found = your_commands(session)
    return ", ".join(f"/{name}" for name in found) or "none (~/.anges/commands/NAME.md adds /NAME)"
