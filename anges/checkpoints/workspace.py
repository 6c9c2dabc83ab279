"""A stream's checkpoints as people use them: its steps that could change files, what they changed (`diff`), and
taking them back (`plan_undo`, `undo`), which the stream records as a `workspace_restored` event."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from anges.checkpoints.diffs import Diff, FileChange, changes, diff_text
from anges.checkpoints.snapshot import Snapshot, not_covered
from anges.checkpoints.store import CheckpointStore
from anges.checkpoints.timeline import Entry
from anges.checkpoints.undo import Conflict, Restore, apply_restore, plan_diff, plan_restore, plan_token
from anges.exceptions import CheckpointError, UndoRefused
from anges.store.events import Event, EventStream
from anges.store.numbers import count_upto

if TYPE_CHECKING:
    from anges.config.types import CheckpointsConfig
    from anges.store.event_store import Store

LISTED = 50
"""File names an undo event lists of each kind (the model reads them); past it, how many more."""


@dataclass(frozen=True)
class Step:
    """A step that could change files, and the checkpoint taken just before it."""

    number: int
    """Its event's number, the one the model's history and every view give it (`anges.store.numbers`): what
    `--step` and `--to` take."""
    entry: Entry
    undone: bool = False
    """A later undo took it back (and nothing restored it since)."""
    changed: bool | None = None
    """Whether the files the checkpoints cover changed while it ran (None: it runs still, or its end was not
    checkpointed)."""

    @property
    def label(self) -> str:
        """What the step did, on one line: `RUN_SHELL_CMD make test`, `undo to before step 5`."""
        if self.entry.kind == "undo":
            return self.entry.subject or "undo"
        return f"{self.entry.action} {self.entry.subject}".strip()


@dataclass
class UndoPlan:
    """What an undo would do: the diff it applies, the files it leaves alone, and whose changes it would overwrite."""

    to: Step
    steps: list[Step]
    """The steps it takes back: those still in effect from `to` on."""
    diff: Diff
    conflicts: list[Conflict] = field(default_factory=list)
    left_alone: list[Conflict] = field(default_factory=list)
    """Files the undo keeps as they are, and why (ignored, over the size limit, or so at the checkpoint)."""
    outside: list[Step] = field(default_factory=list)
    """Steps taken back that could change files outside the covered folders: those changes stay."""
    token: str = ""
    """Pass it to `undo(expect=...)`: the undo then applies only if the files are as they were for this plan."""
    restores: list[Restore] = field(default_factory=list, repr=False)


class Checkpoints:
    """Diff and undo of one stream's work: `anges diff`, `anges undo`, `/diff` and `/undo`, the web chat's restore."""

    def __init__(self, stream: EventStream, store: Store, config: CheckpointsConfig | None = None,
                 template_dir: str = "", base: Path | None = None):
        from anges.config.types import CheckpointsConfig

        self.stream = stream
        self.store = store
        ids = stream.parent_event_stream_uids
        self.files = CheckpointStore(ids[0] if ids else stream.uid, config or CheckpointsConfig(), base=base)
        self.timeline = self.files.timeline(stream.uid)
        self.template_dir = template_dir
        self.cwd = str(stream.agent_settings.get("cmd_init_dir") or "")

    # -- reading ---------------------------------------------------------------------------------------------

    def steps(self) -> list[Step]:
        """Every checkpointed step (undos too), oldest first."""
        entries = self.timeline.entries()
        positions = self._event_positions()
        in_effect = _in_effect(entries)
        return [Step(self._number(positions.get(entry.id, entry.event)), entry, entry.id not in in_effect,
                     _changed(entry, entries[index + 1] if index + 1 < len(entries) else None))
                for index, entry in enumerate(entries) if entry.kind != "end"]

    def step(self, number: int) -> Step:
        """The step whose event is `number`; CheckpointError (naming those there are) when it has no checkpoint."""
        steps = self.steps()
        for step in steps:
            if step.number == number:
                return step
        known = ", ".join(str(step.number) for step in steps) or "none"
        raise CheckpointError(f"step {number} of stream {self.stream.uid} has no checkpoint (steps with one: {known})")

    def diff(self, step: int | None = None) -> Diff:
        """What the stream's steps changed (from before the first to after the last), or one step (to the next
        checkpoint); where no checkpoint follows yet, to the files as they are now."""
        entries = self.timeline.entries()
        if not entries:
            return Diff()
        if step is None:
            first, last = entries[0], entries[-1] if entries[-1].kind == "end" else None
        else:
            first = self.step(step).entry
            last = next((entry for entry in entries if entry.id > first.id), None)
        with self.files.lock():
            now = self._now(first.roots) if last is None else {}
            result = Diff()
            for root, before in first.roots.items():
                end = now[root].commit if last is None else last.roots.get(root, before)
                git = self.files.git(root)
                result.files += changes(git, before, end)
                result.text += diff_text(git, before, end, self.cwd)
                after = now[root].left_out if last is None else last.left_out_of(root)
                shown = self._shown(root)
                result.not_covered += [(shown(path), why) for path, why in not_covered(first.left_out_of(root),
                                                                                         after)]
        return result

    # -- undo ------------------------------------------------------------------------------------------------

    def plan_undo(self, to: int | None = None) -> UndoPlan:
        """What `undo(to)` would do now; `to` is a step number (default: the last step still in effect that changed
        files)."""
        with self.files.lock():
            return self._plan(to)

    def undo(self, to: int | None = None, overwrite: bool = False, expect: str | None = None,
             by: str = "library") -> UndoPlan:
        """Bring the files back to how they were before step `to` and record it on the stream; UndoRefused when
        someone else changed files it would overwrite (unless `overwrite`) or, with `expect` (a plan's token),
        when the files changed since that plan. StreamBusy while a run of the stream (or above it) is active."""
        with ExitStack() as held:
            for uid in (*self.stream.parent_event_stream_uids, self.stream.uid):
                held.enter_context(self.store.run_lock(uid))
            held.enter_context(self.files.lock())
            plan = self._plan(to)
            if expect is not None and expect != plan.token:
                raise UndoRefused("the files changed since this undo was planned: look at it again", [])
            if plan.conflicts and not overwrite:
                names = ", ".join(conflict.path for conflict in plan.conflicts[:20])
                raise UndoRefused(f"someone other than the agent changed {names} after the checkpoint (or what "
                                  "they hold now is not saved); undo again with overwrite to replace them",
                                  [conflict.path for conflict in plan.conflicts])
            position = len(self.stream.events_list) + 1
            entry = self.timeline.append("undo", {r.git.root: r.now for r in plan.restores}, event=position,
                                         action="UNDO", subject=f"undo to before step {plan.to.number}",
                                         to=plan.to.entry.id)
            failed = [f"{restore.git.root}/{line}" for restore in plan.restores for line in apply_restore(restore)]
            event = self._event(plan, entry, by, overwrite, failed)
            after, errors = self.files.snapshots([r.git.root for r in plan.restores])
            self.timeline.append("end", after, error="; ".join(errors))
            self.stream.add_event(event)
            self.store.sync(self.stream)
        return plan

    def _plan(self, to: int | None) -> UndoPlan:
        steps = self.steps()
        if not steps:
            raise CheckpointError(f"stream {self.stream.uid} has no checkpoints: nothing to undo")
        entries = self.timeline.entries()
        taken: dict[str, Snapshot] = {}

        def now_of(roots) -> dict[str, Snapshot]:  # each folder snapshotted at most once per plan
            missing = [root for root in roots if root not in taken]
            if missing:
                taken.update(self._now(missing))
            return {root: taken[root] for root in roots if root in taken}

        target = self.step(to) if to is not None else self._last_change(steps, entries, now_of)
        if target is None:
            raise CheckpointError("every step was undone already; name one with --to to restore to before it")
        later = [entry for entry in entries if entry.id > target.entry.id]
        now = now_of(target.entry.roots)
        restores = [plan_restore(self.files.git(root), target.entry, later, now[root]) for root in now]
        taken_back = [step for step in steps if step.entry.id >= target.entry.id and not step.undone]
        plan = UndoPlan(target, taken_back, plan_diff(restores, self.cwd), token=plan_token(restores),
                        restores=restores, outside=[step for step in taken_back if step.entry.outside])
        for restore in restores:
            shown = self._shown(restore.git.root)
            plan.conflicts += [Conflict(shown(name), why) for name, why in restore.conflicts]
            plan.left_alone += [Conflict(shown(name), why) for name, why in restore.left_alone]
        return plan

    def _last_change(self, steps: list[Step], entries: list[Entry],
                     now_of: Callable[[Iterable[str]], dict[str, Snapshot]]) -> Step | None:
        """The last step still in effect that changed files (a trailing `make test` changed none), else the last
        still in effect; None when every step was undone."""
        in_effect = [step for step in reversed(steps) if not step.undone and step.entry.kind == "step"]
        for step in in_effect:
            after = next((entry.roots for entry in entries if entry.id > step.entry.id), None)
            if after is None:
                after = {root: snapshot.commit for root, snapshot in now_of(step.entry.roots).items()}
            if any(after.get(root, commit) != commit for root, commit in step.entry.roots.items()):
                return step
        return in_effect[0] if in_effect else None

    def _now(self, roots) -> dict[str, Snapshot]:
        taken, _ = self.files.snapshots(list(roots))
        return taken

    def _event(self, plan: UndoPlan, entry: Entry, by: str, overwrite: bool, failed: list[str]) -> Event:
        """The undo as an event for the stream: the model reads what was taken back."""
        from anges.prompt.templates import render_template

        files: dict[str, list[str]] = {"modified": [], "deleted": [], "added": []}
        for change in plan.diff.files:
            files[change.status].append(change.shown(self.cwd))
        facts = {"to_step": plan.to.number, "to_label": plan.to.label,
                 "steps": [step.number for step in plan.steps], "outside": [step.number for step in plan.outside],
                 "files": {kind: names[:LISTED] for kind, names in files.items() if names},
                 "more": {kind: max(len(names) - LISTED, 0) for kind, names in files.items()},
                 "left_alone": [f"{item.path} ({item.why})" for item in plan.left_alone[:LISTED]]}
        content = render_template("workspace_restored.j2", self.template_dir, **facts).strip()
        count = len(plan.diff.files)
        message = f"Undone: the files are back as they were before step {plan.to.number} ({count} " \
                  f"file{'s' if count != 1 else ''} changed back)"
        if failed:
            message += f"; {len(failed)} could not be written back: {'; '.join(failed[:5])}"
        overwrote = [item.path for item in plan.conflicts] if overwrite else []
        return Event("workspace_restored", content=content, message=message, data={
            **facts, "checkpoint": {"id": entry.id}, "overwrote": overwrote[:LISTED], "by": by,
            "stat": plan.diff.stat_line, **({"failed": failed[:LISTED]} if failed else {})})

    def _event_positions(self) -> dict[int, int]:
        """Checkpoint id -> the position (1-based) in the stream of the event that recorded its step."""
        positions: dict[int, int] = {}
        for position, event in enumerate(self.stream.events_list, 1):
            mark = (event.data or {}).get("checkpoint")
            if isinstance(mark, dict) and isinstance(mark.get("id"), int):
                positions.setdefault(mark["id"], position)
        return positions

    def _number(self, position: int) -> int:
        """The number of the event at `position`; of one not recorded yet (the step running now), the number it
        gets (every step's event is numbered)."""
        recorded = len(self.stream.events_list)
        return count_upto(self.stream, min(position, recorded)) + max(position - recorded, 0)

    def _shown(self, root: str):
        return lambda name: FileChange(root, name, "").shown(self.cwd)


def _changed(entry: Entry, after: Entry | None) -> bool | None:
    """Whether the covered files differ between `entry` and the entry `after` it (None when none follows yet)."""
    if after is None:
        return None
    return any(after.roots.get(root, commit) != commit for root, commit in entry.roots.items())


def _in_effect(entries: list[Entry]) -> set[int]:
    """The ids of the steps (and undos) whose changes are still in effect after every entry."""
    effective: list[int] = []
    before: dict[int, list[int]] = {}
    for entry in entries:
        before[entry.id] = list(effective)
        if entry.kind == "step":
            effective.append(entry.id)
        elif entry.kind == "undo":
            effective = [*before.get(entry.to, effective), entry.id]
    return set(effective)
