"""EDIT_FILE: create and change files, showing a diff."""

from __future__ import annotations

from anges.actions.base import Action, ActionContext
from anges.prompt.parsing import Param
from anges.store.events import Event
from anges.store.results import RESULT_FORMAT, FileEdit


class EditFile(Action):
    """Applies one edit directive and records the unified diff (or the error the model must fix)."""

    type = "EDIT_FILE"
    guide_template = "actions/edit_file.j2"
    params = {
        "directive_line": Param(str, non_empty=True),
        "content": Param(str, required=False),
        "old_text": Param(str, required=False),
    }

    def run(self, ctx: ActionContext, args: dict) -> Event:
        from anges.tools.fileedit import EditError, apply_edit

        directive = args["directive_line"].strip()
        resolved = ctx.checked_paths[0] if ctx.checked_paths else None
        try:
            result = apply_edit(directive, args.get("content") or "", base_dir=ctx.cwd, old_text=args.get("old_text"),
                                resolved=resolved)
        except EditError as exc:
            event = Event("edit_file", message=f"could not edit: {directive}",
                          data={"directive": directive, "error": str(exc)})
        else:
            verb = "created" if result.created else "edited"
            event = Event("edit_file", message=f"{verb} `{result.path}`",
                          data={**result.to_data(), "directive": directive, "diff": result.diff,
                                "result_format": RESULT_FORMAT})
        edit = FileEdit.of(event)  # the model reads the facts; the store keeps them once
        event.content = edit.text() if edit is not None else ""
        return event
