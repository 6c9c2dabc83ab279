"""RUN_SHELL_CMD: run a command on the machine."""

from __future__ import annotations

from anges.actions.base import Action, ActionContext
from anges.events import Event
from anges.parsing import Param


class RunShellCommand(Action):
    """Runs one shell command and records its exit code, outputs and duration."""

    type = "RUN_SHELL_CMD"
    guide_template = "actions/run_shell_cmd.j2"
    params = {
        "command": Param(str, non_empty=True),
        "shell_cmd_timeout": Param(int, required=False),
        "run_in_background": Param(bool, required=False),
        "escalate": Param(str, required=False, description="why the command must run outside the sandbox"),
    }

    def run(self, ctx: ActionContext, args: dict) -> Event:
        from anges.sandbox import explain_block
        from anges.shell import run_command

        command = args["command"]
        timeout = min(args.get("shell_cmd_timeout") or ctx.config.shell_cmd_timeout, ctx.config.max_shell_cmd_timeout)
        result = run_command(
            command,
            cwd=ctx.cwd,
            prefix_cmd=ctx.prefix_cmd,
            timeout=max(timeout, 1),
            background=bool(args.get("run_in_background")),
            env=ctx.env,
            output_cap=ctx.config.shell_output_cap,
            interrupt_check=ctx.interrupt_check,
            secrets=ctx.secrets,
            runner=ctx.runner,
            log_cap=ctx.agent.config.safety.background_log_cap,
        )
        shown = command if len(command) <= 200 else command[:200] + "..."
        blocked = explain_block(result, ctx.sandbox) if ctx.sandbox is not None else ""
        facts = {"sandbox": ctx.sandbox.mode if ctx.sandbox is not None else "none", "escalated": ctx.escalated}
        if blocked:
            facts["blocked"] = blocked
        return Event(
            type="action",
            content=format_result(result, blocked),
            message=f"ran `{shown}`" + (" outside the sandbox" if ctx.escalated else
                                         " without a sandbox" if ctx.sandbox is None else ""),
            data={**result.to_data(), "action_type": self.type, "stdout": result.stdout, "stderr": result.stderr,
                  **facts},
        )


def format_result(result, blocked: str = "") -> str:
    """The command's result as the model reads it; `blocked` says how the sandbox likely caused a failure."""
    if result.pid is not None and result.exit_code is None and not (result.timed_out or result.interrupted):
        return (f"COMMAND: {result.command}\nStarted in the background: pid {result.pid}, "
                f"output in {result.log_path}")
    if result.timed_out:
        status = f"KILLED after the timeout ({result.duration:.0f} s)"
    elif result.interrupted:
        status = "KILLED: the run was interrupted"
    else:
        status = f"EXIT CODE: {result.exit_code}"
    parts = [f"COMMAND: {result.command}", status]
    if result.stdout:
        parts.append(f"STDOUT:\n{result.stdout}")
    if result.stderr:
        parts.append(f"STDERR:\n{result.stderr}")
    if not result.stdout and not result.stderr:
        parts.append("(no output)")
    if blocked:
        parts.append(f"SANDBOX: {blocked}. If the task needs this, run the command again with `escalate` set to "
                     "a one-line reason (a person decides); do not retry it unchanged.")
    return "\n".join(parts)
