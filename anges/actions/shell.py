"""RUN_SHELL_CMD: run a command on the machine."""

from __future__ import annotations

from anges.actions.base import Action, ActionContext
from anges.prompt.parsing import Param
from anges.store.events import Event
from anges.store.outputs import save, stream_folder
from anges.store.results import RESULT_FORMAT, WHOLE_COMMAND_CHARS, ShellRun
from anges.util.clipping import shorten
from anges.util.masking import mask_secrets


class RunShellCommand(Action):
    """Runs one shell command and records its exit code, outputs and duration."""

    type = "RUN_SHELL_CMD"
    guide_template = "actions/run_shell_cmd.j2"
    whole_command_chars = WHOLE_COMMAND_CHARS
    """A command up to this size comes back whole in its result (its guide says so)."""
    params = {
        "command": Param(str, non_empty=True),
        "shell_cmd_timeout": Param(int, required=False),
        "run_in_background": Param(bool, required=False),
        "background_after": Param(int, required=False,
                                  description="seconds after which a command still running goes on in the background"),
        "escalate": Param(str, required=False, description="why the command must run outside the sandbox"),
    }

    def run(self, ctx: ActionContext, args: dict) -> Event:
        from anges.safety.blocked import explain_block
        from anges.safety.shell import run_command

        command = args["command"]
        timeout = min(args.get("shell_cmd_timeout") or ctx.config.shell_cmd_timeout, ctx.config.max_shell_cmd_timeout)
        yield_after = args.get("background_after")
        yield_after = ctx.config.shell_background_after if yield_after is None else max(yield_after, 0)
        scratch = ctx.output_dir or (ctx.runner.scratch if ctx.runner is not None else None)
        folder = stream_folder(ctx.outputs, ctx.agent_id) if ctx.outputs else None
        sink = ctx.output_sink(command) if ctx.output_sink is not None else None
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
            log_cap=ctx.app_config.safety.background_log_cap,
            yield_after=yield_after,
            output_dir=folder or scratch,
            log_dir=scratch,
            watch=sink,
        )
        if sink is not None:
            sink.flush()
        blocked = explain_block(result, ctx.sandbox) if ctx.sandbox is not None else ""
        facts = {**result.to_data(), "action_type": self.type, "stdout": result.stdout, "stderr": result.stderr,
                 "sandbox": ctx.sandbox.mode if ctx.sandbox is not None else "none", "escalated": ctx.escalated,
                 "result_format": RESULT_FORMAT}
        facts.update(_kept_apart(command, result.output_path, folder, ctx.secrets))
        if blocked:
            facts["blocked"] = blocked
            if not ctx.can_escalate:
                facts["can_escalate"] = False
        outside = " outside the sandbox" if ctx.escalated else " without a sandbox" if ctx.sandbox is None else ""
        shown = f"`{shorten(command, 200)}`{outside}"
        message = f"left {shown} running in the background" if result.yielded else f"ran {shown}"
        event = Event("action", message=message, data=facts)
        run = ShellRun.of(event)  # the model reads the facts; the store keeps them once
        event.content = run.text() if run is not None else ""
        return event


def _kept_apart(command: str, output_path: str | None, folder: str | None, secrets: list[str]) -> dict:
    """The facts of what is kept apart from the result: the file that holds a command too long to repeat whole
    (its secrets masked), and whether the full output lasts only until the request ends (no folder kept it)."""
    facts: dict = {"temporary": True} if output_path and folder is None else {}
    if folder is not None and len(command) > WHOLE_COMMAND_CHARS:
        path = save(folder, "anges-command-", mask_secrets(command, secrets), ".sh")
        facts.update({"command_path": path} if path else {})
    return facts
