"""READ_MIME_FILES: ask a multimodal model about images, PDFs or links, optionally saving the answer to a file."""

from __future__ import annotations

import time

from anges.actions.base import Action, ActionContext
from anges.prompt.parsing import Param
from anges.store.events import Event
from anges.store.results import took


class ReadMimeFiles(Action):
    """Sends local images/PDFs (or URLs) and a question to the model of `mime_reader.model`; records its answer."""

    type = "READ_MIME_FILES"
    guide_template = "actions/read_mime_files.j2"
    params = {
        "question": Param(str, non_empty=True, description="what to find out from the inputs"),
        "inputs": Param(list, description="file paths (relative to the working directory) or URLs"),
        "output": Param(str, required=False, description="a file to write the answer to"),
    }

    def __init__(self) -> None:
        super().__init__()
        self._readers: dict[str, object] = {}

    def may_change_files(self, args: dict) -> bool:
        return bool(str(args.get("output") or "").strip())

    def run(self, ctx: ActionContext, args: dict) -> Event:
        from anges.exceptions import ModelError
        from anges.tools.mime import MimeError, load_inputs, local_path, write_answer

        config = ctx.app_config
        question, output = args["question"].strip(), (args.get("output") or "").strip()
        # "model" and "usage" are the agent's own (the call that chose this action): these are the reader's.
        facts = {"action_type": self.type, "question": question, "inputs": [],
                 "mime_model": config.mime_reader.model, "output": output or None}
        started = time.monotonic()
        try:
            if output:
                local_path(output, ctx.cwd)  # text no file name can hold fails before the model is asked
            inputs = load_inputs(args.get("inputs"), ctx.cwd, config.mime_reader.max_file_bytes, ctx.checked_paths)
            facts["inputs"] = [item.describe() for item in inputs]
            answer = self._reader(config).ask(question, inputs)
        except (MimeError, ModelError, OSError) as exc:
            return _error(facts, str(exc), "model" if isinstance(exc, ModelError) else "input", started)
        facts.update(mime_model=getattr(answer, "model", "") or facts["mime_model"],
                     duration=round(time.monotonic() - started, 3))
        usage = getattr(answer, "usage", None)
        if usage is not None:
            facts["mime_usage"] = usage.to_dict()
        cost = ctx.charge(usage, facts["mime_model"])
        if cost is not None:
            facts["mime_cost"] = cost
        text = str(answer).strip()
        if output:
            try:
                path = write_answer(output, ctx.cwd, text, ctx.checked_paths)
            except OSError as exc:
                return _error(facts, f"the answer could not be written to {output}: {exc.strerror or exc}", "output",
                              started, answer=text)
            facts["output_path"] = str(path)
        names = ", ".join(item["source"] for item in facts["inputs"])
        head = f"ANSWER after {took(facts['duration'])}" + (f" (also written to {output})" if output else "")
        return Event(type="action", content=f"READ_MIME_FILES {names}\n{head}:\n{text}",
                     message=f"read {names}" + (f" -> {output}" if output else ""), data={**facts, "is_error": False})

    def _reader(self, config):
        from anges.tools.mime import MimeReader

        name = config.mime_reader.model
        if name not in self._readers:
            self._readers[name] = MimeReader(config)
        return self._readers[name]


def _error(facts: dict, message: str, kind: str, started: float, answer: str = "") -> Event:
    names = ", ".join(str(i.get("source")) for i in facts["inputs"]) or "(no inputs read)"
    content = f"READ_MIME_FILES {names}: FAILED\n{message}"
    if answer:
        content += f"\nANSWER:\n{answer}"
    return Event(type="action", content=content, message=f"READ_MIME_FILES failed: {message.splitlines()[0]}",
                 data={**facts, "is_error": True, "error": kind, "duration": round(time.monotonic() - started, 3)})
