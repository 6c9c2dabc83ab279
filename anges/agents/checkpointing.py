"""The loop's checkpoints: the covered folders snapshotted before each step that can change files and when a run
ends; the step's event names its checkpoint and says what was left out (docs/checkpoints.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from anges.actions import ActionContext, is_builtin_style
from anges.checkpoints.git import CheckpointsOff, Interrupted
from anges.checkpoints.store import CheckpointStore
from anges.config.loading import anges_home
from anges.exceptions import CheckpointError, RunStopped
from anges.util.clipping import one_line

if TYPE_CHECKING:
    from anges.actions import Action
    from anges.checkpoints.timeline import Entry
    from anges.config.types import CheckpointsConfig
    from anges.safety.sandbox import SandboxSettings
    from anges.store.events import Event

log = logging.getLogger("anges.checkpoints")
SUBJECT_PARAMS = ("command", "directive_line", "directive", "output")
SHOWN_LEFT_OUT = 10
"""Paths of each kind a step's record names of what its checkpoint left out."""
PROCESS_BUILTINS = ("RUN_SHELL_CMD", "EDIT_FILE", "READ_MIME_FILES", "CALL_CHILD_AGENT", "WAIT_FOR_CHILDREN")
"""Built-in actions whose writes the sandbox's rules hold (in the sandbox, or judged by its path rules)."""


@dataclass
class _Run:
    store: CheckpointStore
    uid: str
    roots: list[str]
    excludes: list[str]
    taken: bool = False


class StepCheckpoints:
    """Checkpoints of one agent's runs; a failure is recorded on the step, never ends the run."""

    def __init__(self, config: CheckpointsConfig):
        self.config = config
        self._run: _Run | None = None
        self._pending: dict | None = None

    def begin(self, uid: str, parent_ids: list[str], settings: SandboxSettings, stop: Callable[[], bool]) -> None:
        """A run starts: its folders are the writable ones (the working directory first)."""
        self._pending = None
        if not self.config.enabled:
            self._run = None
            return
        roots = list(dict.fromkeys([settings.workdir, *settings.writable]))
        store = CheckpointStore(parent_ids[0] if parent_ids else uid, self.config, interrupt=stop)
        self._run = _Run(store, uid, roots, [str(anges_home().resolve()), *settings.hidden])

    def before(self, action: Action, args: dict, ctx: ActionContext, number: int) -> None:
        """Snapshot the folders before `action` runs, if it can change files; `number` is its event's."""
        run = self._run
        read_only = action.type == "RUN_SHELL_CMD" and ctx.sandbox is not None and not ctx.sandbox.writable
        if run is None or read_only or not action.may_change_files(args):  # a read-only sandbox's command writes none
            return
        try:
            entry = run.store.take(run.uid, "step", run.roots, run.excludes, watch=True, event=number,
                                   action=action.type,
                                   subject=_subject(args), outside=_outside(action, ctx, run.roots))
        except Interrupted:
            raise RunStopped("interrupt", "the run was interrupted") from None
        except CheckpointsOff as exc:
            log.warning("no checkpoint before %s: %s", action.type, exc)
            self._pending, self._run = {"error": f"no checkpoint: {exc}; checkpoints are off for this run"}, None
            run.store.stop_watching(run.roots)
            return
        except CheckpointError as exc:  # this step goes without one; the next tries again
            log.warning("no checkpoint before %s: %s", action.type, exc)
            self._pending = {"error": f"no checkpoint: {exc}"}
            return
        run.taken = True
        self._pending = {"id": entry.id, **_left_out(entry), **({"error": entry.error} if entry.error else {})}

    def attach(self, event: Event) -> None:
        """Put the checkpoint taken last on the first event recorded after it (the step's)."""
        if self._pending is not None:
            event.data.setdefault("checkpoint", self._pending)
            self._pending = None

    def end(self) -> None:
        """The run ended: snapshot what its steps left, so later changes read as someone else's."""
        run, self._run = self._run, None
        if run is None:
            return
        try:
            if run.taken:
                run.store.take(run.uid, "end", run.roots, run.excludes)
        except CheckpointError as exc:
            log.warning("no checkpoint at the end of the run: %s", exc)
        finally:
            run.store.stop_watching(run.roots)


def _outside(action: Action, ctx: ActionContext, roots: list[str]) -> bool:
    """Whether the step could write beyond the covered folders: a command run outside the sandbox, an edit of a
    path outside them, an MCP tool, a web API call or a plug-in's action (which run with your rights)."""
    if action.type not in PROCESS_BUILTINS or not is_builtin_style(action):
        return True
    if action.type in ("EDIT_FILE", "READ_MIME_FILES") and ctx.checked_paths is not None:
        return not all(any(f"{path}/".startswith(f"{root.rstrip('/')}/") for root in roots)
                       for path in ctx.checked_paths)
    return ctx.escalated or ctx.sandbox is None


def _subject(args: dict) -> str:
    if args.get("mcp_server_name"):
        return f"{args['mcp_server_name']}.{args.get('tool_name', '')}"
    if args.get("action_type") == "CALL_API":
        return one_line(f"{args.get('api') or ''} {args.get('operation') or ''}".strip(), 200)
    for name in SUBJECT_PARAMS:
        if isinstance(args.get(name), str) and args[name].strip():
            return one_line(args[name], 200)
    return ""


def _left_out(entry: Entry) -> dict:
    """What the checkpoint left out, as the step's record says it: a few paths of each kind, and how many."""
    if not entry.left_out:  # the common case: nothing (it holds only the folders where something was)
        return {}
    shown: dict = {}
    for root in entry.roots:
        left = entry.left_out_of(root)
        prefix = "" if root == next(iter(entry.roots)) else root.rstrip("/") + "/"
        for kind, paths in (("ignored", left.ignored), ("too_big", [path for path, _ in left.too_big]),
                            ("repos", left.repos), ("unreadable", left.unreadable), ("special", left.special)):
            shown.setdefault(kind, []).extend(prefix + path for path in paths)
        shown["more"] = shown.get("more", 0) + left.more
    if not any(shown.values()):
        return {}
    more = shown.pop("more") + sum(max(len(paths) - SHOWN_LEFT_OUT, 0) for paths in shown.values())
    facts = {kind: paths[:SHOWN_LEFT_OUT] for kind, paths in shown.items() if paths}
    return {"left_out": {**facts, **({"more": more} if more else {})}}
