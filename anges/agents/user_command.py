"""A command the user runs themselves (`!make test` in the terminal session): in the working directory, in the
sandbox and under the policy the agent's commands get, recorded on the stream as a `user_command` event the model
reads at its next step.

The user typed it, so no one is asked: typing it and pressing Enter is the approval an `ask` would want. The
policy's deny rules still hold, and it never leaves the sandbox (there is no one to ask for more than the user
already said; they can run it in their own shell).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from anges.agents.live import LiveOutput
from anges.agents.record import cap_event, mask_event, masked_title
from anges.exceptions import ConfigError, UsageError
from anges.store.events import Event, EventStream
from anges.store.results import RESULT_FORMAT, ShellRun

if TYPE_CHECKING:
    from anges.agents import BaseAgent


def run_user_command(agent: BaseAgent, command: str, stop: Callable[[], bool] = lambda: False) -> Event:
    """Run `command` for the user and record it on the agent's stream; UsageError when a deny rule forbids it
    (nothing runs, nothing is recorded); StreamBusy while a run holds the stream."""
    from anges.prompt.templates import render_template
    from anges.safety.places import untrusted_configuration
    from anges.safety.run_safety import RunSafety, run_secrets
    from anges.safety.shell import run_command

    config, limits = agent.config, agent.agent_config
    safety = RunSafety(config.safety, agent.cmd_init_dir, approval="deny")
    refused = untrusted_configuration(config, safety.settings.untrusted)
    if refused:
        raise ConfigError(refused)
    verdict = safety.policy.decide("RUN_SHELL_CMD", {"command": command})
    if verdict.decision == "deny":
        raise UsageError(f"not run: {verdict.reason or 'a deny rule of the policy forbids it'}")
    secrets, env = run_secrets(config, limits, agent.mcp, agent.apis, agent.cmd_init_dir)
    stream = agent.event_stream or EventStream(uid=agent.uid, agent_type=agent.agent_type)
    tag = {"agent_id": agent.uid, "agent_type": agent.agent_type, "parent_ids": tuple(agent.parent_ids), "call": 0}
    sink = LiveOutput(agent.delta_handlers, tag, secrets, command) if agent.delta_handlers else None
    with agent.store.run_lock(stream.uid):
        runner = safety.runners.get(sandboxed=safety.sandboxed)
        try:
            result = run_command(command, cwd=agent.cmd_init_dir, prefix_cmd=agent.prefix_cmd,
                                 timeout=max(min(limits.shell_cmd_timeout, limits.max_shell_cmd_timeout), 1), env=env,
                                 output_cap=limits.shell_output_cap, interrupt_check=stop, secrets=secrets,
                                 runner=runner, log_cap=config.safety.background_log_cap,
                                 output_dir=runner.scratch if runner is not None else None, watch=sink)
        finally:
            safety.runners.close()  # a user's command leaves nothing running behind it
        if sink is not None:
            sink.flush()
        facts = {**result.to_data(), "stdout": result.stdout, "stderr": result.stderr, "by": "user",
                 "sandbox": runner.settings.mode if runner is not None and runner.settings else "none",
                 "approval": {"decision": "allow", "by": "user", "reason": "the user typed it"},
                 "result_format": RESULT_FORMAT}
        if not safety.sandboxed:
            facts["unsandboxed"] = safety.unsandboxed_reason
        event = Event("user_command", message=f"you ran `{command}`", data=facts)
        run = ShellRun.of(event)
        event.content = render_template("user_command.j2", config.prompt.template_dir,
                                        result=run.text() if run is not None else "").strip()
        mask_event(event, secrets)
        cap_event(event, limits.event_text_cap)
        if not stream.events_list and stream.title == stream.uid:
            stream.title = masked_title(f"! {command}", secrets)
        stream.update_settings({"cmd_init_dir": agent.cmd_init_dir, "agent_type": agent.agent_type})
        stream.add_event(event)
        agent.store.sync(stream)
        agent.event_stream = stream
    return event
