"""A run's safety: the sandbox its commands run in, the policy, the approval gate; shared with its child agents."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from anges.exceptions import ConfigError
from anges.prompt.agents_md import project_directories
from anges.safety.approval import MODES, Asker, Decision, Gate, Permit
from anges.safety.command_runner import CommandRunner, Job
from anges.safety.places import untrusted_configuration
from anges.safety.policy import Policy, Verdict
from anges.safety.sandbox import SandboxSettings, availability, working_bwrap
from anges.store.events import action_input
from anges.store.outputs import tree_folder
from anges.util.clipping import shorten

if TYPE_CHECKING:
    from anges.config.types import AgentConfig, Config, SafetyConfig
    from anges.tools.openapi import APIs


def approval_mode(configured: str, approval: Callable | str | None) -> tuple[str, Callable | None]:
    """The approval mode and channel. `approval` (from code) is a mode, or a channel used unless the configured
    mode (`safety.approval`, --approval) is auto or deny.

    With no mode configured it is `ask`: a channel answers, or, without one, every request is declined at once
    ("no one can answer here"), never left hanging.
    """
    if isinstance(approval, str):  # given in code: it wins over the config
        if approval not in MODES:
            raise ConfigError(f"approval must be one of {', '.join(MODES)} or a callable, got {approval!r}")
        return approval, None
    if approval is not None and not callable(approval):
        raise ConfigError(f"approval must be one of {', '.join(MODES)} or a callable, got {type(approval).__name__}")
    return configured or "ask", approval


ENDED_JOBS_SHOWN = 5
"""Background jobs that ended stay in the prompt's list this many at a time (the newest); running ones always."""

class ReadOnlyPermit(Permit):
    """A command of a read-only shell, let through: it runs in the read-only sandbox."""


class Runners:
    """The run's runner processes, started on first use: one in the sandbox, one for commands let out of it, and one
    in the read-only sandbox (an orchestrator's commands)."""

    def __init__(self, cwd: str, settings: SandboxSettings, bwrap: str, log_cap: int, contain: bool = False,
                 visible: tuple[str, ...] = ()):
        self.cwd = cwd
        self.settings = settings
        self.bwrap = bwrap
        self.log_cap = log_cap
        self.contain = contain
        self.visible = visible
        """Directories every sandbox of the run shows read-only (the tree's folder of outputs)."""
        self._runners: dict[bool | str, CommandRunner] = {}
        self._lock = threading.Lock()

    def get(self, sandboxed: bool) -> CommandRunner | None:
        """The runner for sandboxed or unsandboxed commands; None off Linux, where this process runs them itself."""
        if not sys.platform.startswith("linux"):
            return None
        with self._lock:  # child agents may ask at the same moment
            if sandboxed not in self._runners:
                settings = self.settings if sandboxed else None
                self._runners[sandboxed] = CommandRunner(self.cwd, settings, self.bwrap, self.log_cap,
                                                         contain=self.contain and not sandboxed,
                                                         places=self.settings.untrusted, visible=self.visible)
            return self._runners[sandboxed]

    def read_only(self, find_bwrap: Callable[[], str]) -> CommandRunner:
        """The runner whose commands see everything read-only but a private /tmp (`find_bwrap()`, asked once, gives
        a bwrap that works)."""
        with self._lock:
            if "read-only" not in self._runners:
                settings = replace(self.settings, mode="read-only", writable=(), protected=())
                self._runners["read-only"] = CommandRunner(self.cwd, settings, find_bwrap(), self.log_cap,
                                                           places=self.settings.untrusted, visible=self.visible)
            return self._runners["read-only"]

    def jobs(self) -> list[Job]:
        """Every background job of the run."""
        return [job for runner in self._runners.values() for job in runner.jobs]

    def end(self, keep_jobs: bool) -> bool:
        """End the run's processes; with `keep_jobs`, running background jobs stay (True when some did)."""
        if keep_jobs and any(job.status() == "running" for job in self.jobs()):
            for runner in self._runners.values():
                runner.end_processes(keep_jobs=True)
            return True
        self.close()
        return False

    def close(self) -> None:
        """End every process of the run and the runners; remove their scratch files."""
        with self._lock:
            runners, self._runners = list(self._runners.values()), {}
        for runner in runners:
            runner.close()


class RunSafety:
    """The sandbox, policy and approval gate of one run (its child agents use the same)."""

    def __init__(self, safety: SafetyConfig, cwd: str, approval: Callable | str | None = None,
                 runners: Runners | None = None, apis: APIs | None = None, outputs: str | None = None):
        self.config = safety
        self.outputs = outputs
        """The agent tree's folder of files its history points to, shown read-only to its commands (None: none)."""
        self.settings = SandboxSettings.for_run(safety, cwd)
        found = availability(safety.bwrap, self.settings.untrusted) if self.settings.enabled else None
        self.sandboxed = found is not None and found.ok
        if found is None:
            self.unsandboxed_reason = "the sandbox is off (safety.sandbox: off)"
        else:
            self.unsandboxed_reason = "" if found.ok else f"the sandbox is not available: {found.reason}"
        self.policy = Policy(safety, self.settings, cwd, self.sandboxed, self.unsandboxed_reason, apis)
        mode, channel = approval_mode(safety.approval, approval)
        self.gate = Gate(self.policy, mode, channel, auto_escalate=safety.auto_escalate)
        bwrap = found.bwrap if found is not None and found.ok else self._containing_bwrap()
        self.runners = runners or Runners(cwd, self.settings, bwrap, safety.background_log_cap,
                                          contain=safety.contain_unsandboxed, visible=(outputs,) if outputs else ())

    def _containing_bwrap(self) -> str:
        """The bwrap that gives commands run without the sandbox a PID namespace of their own; "" when none works
        (or the sandbox did not: then it cannot either)."""
        if not self.config.contain_unsandboxed or self.settings.enabled:
            return ""
        return working_bwrap(self.config.bwrap, self.settings.untrusted)

    def permit(self, ctx: Asker, action_type: str, args: dict, remaining: int = 0,
               readonly_shell: bool = False) -> Permit | None:
        """The gate's answer for one action; a declined action (or an approval) is recorded, with the reason.

        None when it is declined: the model reads why and plans again; `remaining` actions of the reply are skipped.
        A command of a `readonly_shell` runs in the read-only sandbox: only a deny rule stops it, no one is asked,
        and it never leaves the sandbox.
        """
        if readonly_shell and action_type == "RUN_SHELL_CMD":
            permit = self._read_only_permit(action_type, args)
        else:
            permit = self.gate.check(ctx, action_type, args)
        if not permit.allowed or permit.request_id is not None:  # other approvals are facts on the action's event
            event = self.gate.decided_event(ctx, action_type, permit, skipped=0 if permit.allowed else remaining)
            if not permit.allowed:  # the declined action's only event: the step's thoughts and what it asked
                if ctx.reply is not None:
                    event.reasoning, event.analysis = ctx.reply.reasoning, ctx.reply.analysis
                event.data["input"] = action_input(args)
            ctx.record(event)
        return permit if permit.allowed else None

    def _read_only_permit(self, action_type: str, args: dict) -> Permit:
        verdict = self.policy.decide(action_type, {key: value for key, value in args.items() if key != "escalate"})
        if verdict.decision == "deny":
            return Permit(False, verdict, Decision("deny", by="rule"))
        return ReadOnlyPermit(True, Verdict("allow", subject=verdict.subject))

    def equipment(self, permit: Permit) -> dict[str, Any]:
        """What a permitted action runs with (fields of its `ActionContext`): the sandbox's runner, or the unsandboxed
        one if it escalated (the read-only sandbox's for a read-only shell's command), and the paths the policy
        judged."""
        if isinstance(permit, ReadOnlyPermit):
            reader = self.runners.read_only(lambda: working_bwrap(self.config.bwrap, self.settings.untrusted))
            return {"runner": reader, "sandbox": reader.settings, "escalated": False, "checked_paths": None,
                    "output_dir": None, "can_escalate": False, "outputs": self.outputs}
        runner = self.runners.get(sandboxed=self.sandboxed and not permit.escalate)
        inside = self.runners.get(sandboxed=True) if permit.escalate and self.sandboxed else None
        return {"runner": runner, "sandbox": runner.settings if runner is not None else None,
                "escalated": permit.escalate, "checked_paths": permit.verdict.paths,
                "output_dir": inside.scratch if inside is not None else None, "can_escalate": self.can_escalate,
                "outputs": self.outputs}

    def end(self) -> Runners | None:
        """End the run's processes; returns the runners when background jobs are kept running."""
        return self.runners if self.runners.end(keep_jobs=self.config.keep_background) else None

    @property
    def approval(self) -> str:
        """What an action that needs approval gets in this session: ask, auto or deny (ask without a channel)."""
        return self.gate.mode if self.gate.mode != "ask" or self.gate.channel else "deny"

    @property
    def can_escalate(self) -> bool:
        """Whether a command may ask to leave the sandbox and be let out."""
        return self.approval == "ask" or (self.approval == "auto" and self.gate.auto_escalate)

    def facts(self, read_only: bool = False) -> dict:
        """What the prompt's Environment section says about the sandbox (a `read_only` shell's: the read-only one)."""
        if read_only:
            return {"mode": "read-only", "sandboxed": True, "writable": [], "network": self.settings.network,
                    "reason": "", "approval": self.approval, "can_escalate": False, "repository": "",
                    "keep_background": self.config.keep_background, "commands_allowed": True}
        return {"mode": self.settings.mode, "sandboxed": self.sandboxed, "writable": list(self.settings.writable),
                "network": self.settings.network, "reason": self.unsandboxed_reason, "approval": self.approval,
                "can_escalate": self.can_escalate, "repository": self._read_only_repository(),
                "keep_background": self.config.keep_background,
                # a rule may allow commands without the sandbox (a batch run with --sandbox off adds one)
                "commands_allowed": self.policy.decide("RUN_SHELL_CMD", {"command": ""}).decision == "allow"}

    def _read_only_repository(self) -> str:
        """The `.git` of the repository the working directory is in, when commands may write the working directory
        but not it ("" otherwise)."""
        settings = self.settings
        if not self.sandboxed or not settings.can_write(settings.workdir):
            return ""
        git = os.path.join(project_directories(settings.workdir)[0], ".git")
        return git if os.path.exists(git) and not settings.can_write(git) else ""

    def job_lines(self) -> tuple[list[dict], int]:
        """The background jobs as the prompt lists them on every step: the running ones and the newest that ended
        (`ENDED_JOBS_SHOWN`); and how many older ended ones were left out."""
        lines = []
        for job in self.runners.jobs():
            try:
                size = os.path.getsize(job.log_path)
            except OSError:
                size = 0
            command = " ".join(job.command.split())
            lines.append({"pid": job.pid, "command": command if len(command) <= 120 else command[:119] + "…",
                          "status": job.status(), "log_path": job.log_path, "log_bytes": size})
        ended = [n for n, line in enumerate(lines) if line["status"] != "running"]
        left_out = set(ended[:-ENDED_JOBS_SHOWN])
        return [line for n, line in enumerate(lines) if n not in left_out], len(left_out)


def read_only_bwrap(safety: SafetyConfig, cwd: str) -> str:
    """The bwrap that can run a read-only shell's commands in a run in `cwd` ("" where none works, or off Linux; never
    one the run's other commands could have written)."""
    return working_bwrap(safety.bwrap, SandboxSettings.for_run(safety, cwd).untrusted)


class SafetyShare:
    """An agent's part in run safety: a `RunSafety` of its own for each run (background jobs it keeps carry over
    to the next run), or, for a child agent, its parent's."""

    def __init__(self, config: Config, parent: RunSafety | None = None, apis: APIs | None = None, store: Any = None):
        self.config = config.safety
        self.app_config = config
        self.parent = parent
        self.apis = apis
        self.store = store
        """Where the agent's streams are kept: its tree's folder of outputs is beside them (`anges.store.outputs`)."""
        self.run: RunSafety | None = None
        """The current run's (the last begun)."""
        self._kept: Runners | None = None

    def begin(self, cwd: str, approval: Callable | str | None, top: str = "") -> RunSafety:
        """The safety of the run about to start, on the stream `top` (the top of an agent tree: a child shares its
        parent's run safety); ConfigError when the configuration names code that commands of a run (this one, or
        another of this process) could have written (`places.untrusted_configuration`)."""
        if self.parent is not None:
            run = self.parent
        else:
            folder = tree_folder(self.store, top) if self.store is not None and top else None
            run = RunSafety(self.config, cwd, approval, runners=self._kept, apis=self.apis, outputs=folder)
        refused = untrusted_configuration(self.app_config, run.settings.untrusted)
        if refused:
            raise ConfigError(refused)
        self.run = run
        return run

    def ending_jobs(self) -> list[dict]:
        """The background jobs still running that the end of the current run will end ([] for a child's run, which
        leaves them to its parent's, or when they are kept running)."""
        run = self.run
        if self.parent is not None or run is None or run.config.keep_background:
            return []
        return [{"pid": job.pid, "command": shorten(" ".join(job.command.split()), 200)} for job in run.runners.jobs()
                if job.status() == "running"]

    def end(self, run: RunSafety) -> None:
        """End the run's processes (a child leaves that to its parent's run)."""
        if self.parent is None:
            self._kept = run.end()

    def close(self) -> None:
        """End the background jobs kept running after a run."""
        kept, self._kept = self._kept, None
        if kept is not None:
            kept.close()


def terminal_approval(safety: SafetyConfig, cwd: str, channel: Callable | None = None
                      ) -> tuple[Callable | None, list[str]]:
    """The CLI's approval channel for a run in `cwd` when a person can answer on the terminal (None otherwise):
    `channel` (the live screen's question), or the line prompt; and what to tell them up front (no terminal to ask
    on; unsandboxed commands no one can approve)."""
    from anges.safety.terminal_prompt import TerminalPrompt

    chosen, notes = None, []
    if safety.approval in ("", "ask"):
        if sys.stdin.isatty() and sys.stderr.isatty():
            chosen = channel if channel is not None else TerminalPrompt(sys.stderr, sys.stdin.fileno())
        elif safety.approval == "ask":
            notes.append("--approval ask needs a terminal to ask on; actions that need approval will be declined")
    no_one_approves = safety.approval != "auto" and (chosen is None or safety.approval == "deny")
    if no_one_approves and (safety.sandbox == "off" or not sandbox_works(safety, cwd)):
        notes.append("commands run without a sandbox need approval, and none can be given here: add --approval auto "
                     "to run them")
    return chosen, notes


def commands_may_write(safety: SafetyConfig, cwd: str) -> Callable[[str], bool]:
    """Whether the commands of a run in `cwd` could write a path: what must not run outside the sandbox untrusted
    (an MCP server's program, a hook's script)."""
    return SandboxSettings.for_run(safety, cwd).can_write


def sandbox_works(safety: SafetyConfig, cwd: str) -> bool:
    """Whether the sandbox runs for a run in `cwd` (never trying a bwrap its commands could have written)."""
    return availability(safety.bwrap, SandboxSettings.for_run(safety, cwd).untrusted, quiet=True).ok


def run_secrets(config, agent_config: AgentConfig | None = None, mcp=None, apis: APIs | None = None, cwd: str = ""
                ) -> tuple[list[str], dict[str, str]]:
    """The secret values a run masks, and the environment its commands get: without any secret variable (see
    masking.is_secret_name), nor those the configuration names (each model's `api_key_env`, the variables given
    to MCP servers, those web APIs' credentials come from), unless the agent's `pass_env` lists them; and, for a
    run in `cwd`, without the virtualenv anges runs from unless it is the project's (`python_env`)."""
    from anges.safety.python_env import without_anges_venv
    from anges.safety.shell import scrubbed_environment
    from anges.util.masking import secret_values

    names = [preset.api_key_env for preset in config.models.values() if preset.api_key_env]
    if mcp is not None:
        names += [name for spec in mcp.specs.values() for name in spec.env]
    if apis is not None:
        names += apis.env_names
    secrets = secret_values(secret_names=names) + (mcp.secrets if mcp is not None else [])
    secrets += apis.secrets if apis is not None else []
    env = scrubbed_environment(agent_config.pass_env if agent_config else (), names)
    keep = agent_config is not None and agent_config.keep_anges_venv
    return secrets, without_anges_venv(env, cwd, keep) if cwd else env
