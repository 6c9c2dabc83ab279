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
    """The AGENTS.md files the stream's last request put into the prompt (and whether each changed since); before
    any, those the next request would read."""
    from anges.prompt.agents_md import changed, read_agents_md
    from anges.safety.sandbox import SandboxSettings

    read = last_read(agent.event_stream)
    if read is not None:
        if not read:
            return "none: the last request found none in this folder or above it (up to the repository's root)"
        return "; ".join(_read_file(file, changed(str(file.get("path")), file.get("stamp"))) for file in read)
    if not config.prompt.agents_md:
        return "not read (prompt.agents_md is off)"
    hidden = SandboxSettings.for_run(config.safety, agent.cmd_init_dir).is_hidden
    files = read_agents_md(agent.cmd_init_dir, config.prompt.max_agents_md_chars, [], hidden)
    if not files:
        return "none in this folder or above it (up to the repository's root)"
    return "no request has read them yet; the next reads " + "; ".join(
        _read_file(file.facts()) for file in files)


def last_read(stream) -> list[dict] | None:
    """The `agents_md` facts of the stream's last request that records them (None when none does)."""
    from anges.store.events import REQUEST_EVENT_TYPES

    for event in reversed(stream.events_list if stream is not None else []):
        if event.type in REQUEST_EVENT_TYPES and isinstance(event.data.get("agents_md"), list):
            return [file for file in event.data["agents_md"] if isinstance(file, dict)]
    return None


def _read_file(file: dict, change: str = "") -> str:
    text = str(file.get("path"))
    if file.get("error"):
        text += f" (not read: {file['error']})"
    else:
        text += f" ({int(file.get('chars') or 0):,} characters" + (", cut at the limit)" if file.get("cut") else ")")
    if change:
        text += " — changed since it was read: the next request reads it again" if change == "changed" else \
            " — gone since it was read"
    return text


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
