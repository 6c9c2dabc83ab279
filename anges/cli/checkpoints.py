"""`anges diff` and `anges undo`, and the words both (and the terminal session's /diff and /undo) show."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from anges.config.arguments import positive
from anges.exceptions import UsageError
from anges.util.clipping import one_line
from anges.util.printable import printable

if TYPE_CHECKING:
    from anges.checkpoints import Checkpoints, Diff, Step, UndoPlan


def add_parsers(commands, parents: list) -> None:
    """The `diff` and `undo` subcommands."""
    diff = commands.add_parser("diff", parents=parents, help="what a run (or one step) changed in the files")
    diff.add_argument("id", metavar="ID")
    diff.add_argument("--step", metavar="N", type=positive(int), help="only step N (see --list)")
    diff.add_argument("--list", action="store_true", help="the steps with a checkpoint, one per line")
    undo = commands.add_parser("undo", parents=parents, help="put the files back as they were before a step")
    undo.add_argument("id", metavar="ID")
    undo.add_argument("--to", metavar="STEP", type=positive(int),
                      help="restore to before step STEP (default: the last step still in effect that changed "
                           "files; see diff --list)")
    undo.add_argument("-y", "--yes", action="store_true", help="do not ask")
    undo.add_argument("--overwrite", action="store_true",
                      help="also replace files someone other than the agent changed after the checkpoint")


def diff_command(args: argparse.Namespace) -> int:
    """anges diff ID [--step N | --list]"""
    checkpoints = open_checkpoints(args.id)
    if args.list:
        steps = checkpoints.steps()
        print("\n".join(step_lines(steps)) if steps else f"stream {args.id} has no checkpoints")
        return 0
    diff = checkpoints.diff(args.step)
    if not diff.files:
        print("no changes", file=sys.stderr)
    else:
        write_diff(diff, sys.stdout)
    for line in not_covered_lines(diff):
        print(line, file=sys.stderr)
    return 0


def undo_command(args: argparse.Namespace) -> int:
    """anges undo ID [--to STEP] [--yes] [--overwrite]"""
    checkpoints = open_checkpoints(args.id)
    plan = checkpoints.plan_undo(args.to)
    if not plan.diff.files:
        print(f"nothing to undo: the files are as they were before step {plan.to.number}", file=sys.stderr)
        return 0
    write_diff(plan.diff, sys.stdout)
    print("\n".join(plan_lines(plan)), file=sys.stderr)
    if plan.conflicts and not args.overwrite:
        raise UsageError("not undone: someone other than the agent changed the files above after the checkpoint "
                         "(or what they hold now is not saved); --overwrite replaces them")
    if not args.yes and not confirm("Put these files back? [y/N] "):
        print("not undone", file=sys.stderr)
        return 0
    done = checkpoints.undo(plan.to.number, overwrite=args.overwrite, expect=plan.token, by="cli")
    print(f"undone: {done.diff.stat_line}; the stream records it (resume it and the agent knows)", file=sys.stderr)
    return 0


def open_checkpoints(uid: str) -> Checkpoints:
    """The checkpoints of stream `uid` in the default store."""
    from anges.checkpoints import Checkpoints
    from anges.config.loading import load_config
    from anges.store.event_store import EventStore

    config = load_config()
    store = EventStore()
    return Checkpoints(store.load(uid), store, config.checkpoints, config.prompt.template_dir)


def write_diff(diff: Diff, out) -> None:
    """The stat and the diff: raw bytes into a pipe or a file (`git apply` reads them), on a terminal made
    printable and drawn as the session draws it (coloured, the code highlighted, long lines wrapped)."""
    if out.isatty():
        from anges.cli.render import files_diff
        from anges.cli.terminal import Display

        display = Display.of(out)
        display.write(files_diff(diff.text, display.styled, limit=sys.maxsize))
    else:
        out.flush()
        out.buffer.write(diff.text.encode(errors="surrogateescape"))
        out.buffer.flush()


SHOWN_NOT_COVERED = 20


def not_covered_lines(diff: Diff) -> list[str]:
    """What the diff cannot show: the files the checkpoints left out (ignored, repositories of their own, unreadable,
    FIFOs, over the size limit), a few of each reason."""
    if not diff.not_covered:
        return []
    lines = ["not covered by the checkpoints (changes there are not in this diff, nor taken back by an undo):"]
    lines += [printable(f"  {path} ({why})") for path, why in diff.not_covered[:SHOWN_NOT_COVERED]]
    if len(diff.not_covered) > SHOWN_NOT_COVERED:
        lines.append(f"  and {len(diff.not_covered) - SHOWN_NOT_COVERED} more")
    return lines


def step_lines(steps: list[Step]) -> list[str]:
    """One line per step that changed files (as its checkpoints saw it), runs still, or could change files beyond
    them, and per undo: its number, what it did, and whether it was undone; then how many changed nothing."""
    shown = [step for step in steps if step.changed is not False or step.entry.outside or step.entry.kind == "undo"]
    lines = []
    if shown:
        width = max(len(str(step.number)) for step in shown)
        lines = [printable(f"{step.number:>{width}}  {step.label}" + ("  (undone)" if step.undone else "")
                           + ("  (could change files elsewhere)" if step.entry.outside else "")) for step in shown]
    quiet = [step for step in steps if step not in shown]
    if quiet:
        lines.append(f"({len(quiet)} more step{'s' if len(quiet) != 1 else ''} with a checkpoint changed no file, "
                     f"e.g. {printable(one_line(quiet[0].label, 60))})")
    return lines


def plan_lines(plan: UndoPlan) -> list[str]:
    """What an undo does, beyond its diff: what it takes back, leaves alone, cannot reach, and would overwrite."""
    numbers = ", ".join(str(step.number) for step in plan.steps)
    lines = [f"undo: back to before step {plan.to.number} ({plan.to.label}), taking back step"
             f"{'s' if len(plan.steps) != 1 else ''} {numbers}: {plan.diff.stat_line}"]
    lines += [f"  left as it is: {item.path} ({item.why})" for item in plan.left_alone]
    if plan.outside:
        shown = ", ".join(str(step.number) for step in plan.outside)
        lines.append(f"  step {shown} could change files outside the folders checkpoints cover (run outside the "
                     "sandbox, an MCP tool, a web API call or a plug-in): those changes stay")
    lines += [f"  CONFLICT {item.path}: {item.why}" for item in plan.conflicts]
    return [printable(line) for line in lines]


def confirm(question: str) -> bool:
    """Ask on the terminal; no terminal to ask on is a usage error (pass --yes)."""
    if not sys.stdin.isatty():
        raise UsageError("no terminal to ask on: pass --yes to undo without asking")
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")
