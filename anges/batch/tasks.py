"""Task files: JSON Lines or YAML, one task each; checked field by field, every error naming file, line and field."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from anges.exceptions import BatchError
from anges.registry import agent_types
from anges.store.events import is_valid_id

MAX_TASKS = 100_000
MAX_TASK_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class TaskSpec:
    """One task of a batch, with the defaults from the command line filled in."""

    id: str
    task: str
    path: str | None = None
    """Work in this existing directory (in place)."""
    template: str | None = None
    """Work in a fresh copy of this directory; neither `path` nor `template` = a fresh empty directory."""
    agent: str = "default"
    model: str | None = None
    """None = the configured model."""
    setup: str | None = None
    """A shell command run in the fresh work directory before the agent starts."""
    timeout: float | None = None
    """Seconds for the whole run (the agent stops itself); None = the configured limit."""
    max_steps: int | None = None
    check: str | None = None
    """A shell command run in the work directory after the agent finishes: exit 0 = the task passed."""
    check_timeout: float | None = None
    """Seconds the check may take; None = the agent's `shell_cmd_timeout`."""
    actions: tuple[str, ...] = ()
    """More actions the agent offers (like `anges --action`): registered names or module:Class paths."""

    def to_dict(self) -> dict:
        return {**asdict(self), "actions": list(self.actions)}

    @classmethod
    def from_dict(cls, data: dict) -> TaskSpec:
        return cls(**{**data, "actions": tuple(data.get("actions") or ())})


FIELDS = tuple(f.name for f in fields(TaskSpec))
DEFAULTABLE = ("path", "template", "agent", "model", "setup", "timeout", "max_steps", "check", "check_timeout",
               "actions")
"""Fields a command-line flag can give a default for."""


def load_tasks(path: str | os.PathLike, defaults: dict | None = None) -> list[TaskSpec]:
    """The tasks of a `.jsonl` or `.yaml`/`.yml` file; BatchError naming file, line and field for any fault.

    Relative `path`, `template` and `scripted:`/`replay:` model files are relative to the task file's folder;
    relative defaults (from flags) to the current directory.
    """
    file = Path(path).expanduser()
    raw = _read(file)
    entries = _yaml_entries(raw, file) if file.suffix.lower() in (".yaml", ".yml") else _jsonl_entries(raw, file)
    if not entries:
        raise BatchError(f"{file}: no tasks in the file")
    base = _check_defaults(defaults or {})
    seen: dict[str, int] = {}
    specs = []
    for line, entry in entries:
        spec = _spec(entry, base, file, line)
        if spec.id in seen:
            raise BatchError(f"{file}:{line}: field 'id': {spec.id!r} is already the id of the task on line "
                             f"{seen[spec.id]}")
        seen[spec.id] = line
        specs.append(spec)
    return specs


def batch_id_for(path: str | os.PathLike) -> str:
    """The batch id a task file gets when none is given: its name and a hash of its absolute path."""
    file = Path(path).expanduser().resolve()
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", file.stem).strip("-")[:40] or "batch"
    return f"{stem}-{hashlib.sha256(str(file).encode()).hexdigest()[:8]}"


# --- reading ------------------------------------------------------------------------------------------------


def _read(file: Path) -> str:
    try:
        if file.stat().st_size > MAX_TASK_FILE_BYTES:
            raise BatchError(f"{file}: larger than {MAX_TASK_FILE_BYTES // 2**20} MB; split it into several batches")
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BatchError(f"{file}: no such task file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchError(f"{file}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def _jsonl_entries(text: str, file: Path) -> list[tuple[int, Any]]:
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append((number, json.loads(line)))
        except ValueError as exc:  # a JSONDecodeError, or a number too long to convert
            where = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise BatchError(f"{file}:{number}: not valid JSON ({where}); "
                             "a .jsonl task file has one JSON object per line") from None
        _check_count(entries, file)
    return entries


def _yaml_entries(text: str, file: Path) -> list[tuple[int, Any]]:
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise BatchError(f"{file}{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if data is None or root is None:
        return []
    if isinstance(data, dict) and isinstance(data.get("tasks"), list):
        root = next(value for key, value in root.value if key.value == "tasks")
        data = data["tasks"]
    if not isinstance(data, list):
        raise BatchError(f"{file}:1: expected a list of tasks (or a mapping with a 'tasks' list), "
                         f"got {type(data).__name__}")
    entries = [(node.start_mark.line + 1, item) for node, item in zip(root.value, data)]
    _check_count(entries, file)
    return entries


def _check_count(entries: list, file: Path) -> None:
    if len(entries) > MAX_TASKS:
        raise BatchError(f"{file}: more than {MAX_TASKS} tasks; split it into several batches")


# --- checking -----------------------------------------------------------------------------------------------


def _check_defaults(defaults: dict) -> dict:
    """Flag defaults, checked like task fields (relative paths from the current directory)."""
    checked = {}
    for name, value in defaults.items():
        if name not in DEFAULTABLE:
            raise ValueError(f"no default for task field {name!r}")
        if value is not None:
            checked[name] = _field(name, value, Path.cwd(), lambda msg, n=name: BatchError(f"--{_flag(n)}: {msg}"))
    if "path" in checked and "template" in checked:
        raise BatchError("--path and --template exclude each other")
    return checked


def _spec(entry: Any, defaults: dict, file: Path, line: int) -> TaskSpec:
    def fault(message: str, name: str | None = None) -> BatchError:
        return BatchError(f"{file}:{line}: " + (f"field {name!r}: " if name else "") + message)

    if not isinstance(entry, dict):
        raise fault(f"expected an object with at least 'id' and 'task', got {_kind(entry)}")
    unknown = [name for name in entry if name not in FIELDS]
    if unknown:
        raise fault(f"unknown field {unknown[0]!r} (known: {', '.join(FIELDS)})")
    for name in ("id", "task"):
        if name not in entry:
            raise fault("missing (every task needs an 'id' and a 'task')", name)
    if "path" in entry and "template" in entry:
        raise fault("give 'path' or 'template', not both", "template")
    values = {name: _field(name, value, file.parent, lambda msg, n=name: fault(msg, n))
              for name, value in entry.items() if value is not None}
    if "path" in values or "template" in values:
        defaults = {k: v for k, v in defaults.items() if k not in ("path", "template")}
    if "actions" in values and "actions" in defaults:  # the flag's actions and the task's own
        values["actions"] = tuple(dict.fromkeys(defaults["actions"] + values["actions"]))
    return TaskSpec(**{**defaults, **values})


def _field(name: str, value: Any, base: Path, fault) -> Any:
    """One checked field value (paths made absolute against `base`)."""
    if name in ("timeout", "max_steps", "check_timeout"):
        number_type = int if name == "max_steps" else (int, float)
        if isinstance(value, bool) or not isinstance(value, number_type) or value <= 0:
            kind = "a whole number" if name == "max_steps" else "a number of seconds"
            raise fault(f"expected {kind} more than 0, got {json.dumps(value, default=str)}")
        return value if name == "max_steps" else float(value)
    if name == "actions":
        return _action_names(value, fault)
    if not isinstance(value, str):
        raise fault(f"expected a string, got {_kind(value)}")
    if name == "id" and not is_valid_id(value):
        raise fault(f"{value[:80]!r} is not a valid id: use 1-64 letters, digits, '-' or '_'")
    if name in ("task", "model", "check") and not value.strip():
        raise fault("is empty")
    if name == "agent" and value not in agent_types:
        raise fault(f"unknown agent type {value!r} (known: {', '.join(agent_types.names())})")
    if name in ("path", "template"):
        folder = Path(value).expanduser() if value.startswith("~") else base / value
        if not folder.is_dir():
            where = f" (looked for {str(folder)!r})" if folder != Path(value) else ""
            raise fault(f"{value!r} is not a directory{where}")
        return str(folder.resolve())
    if name == "model":
        return _model_name(value.strip(), base, fault)
    return value


def _action_names(value: Any, fault) -> tuple[str, ...]:
    """A list of action names (a single name too), each one a registered action or a module:Class path."""
    from anges.exceptions import ConfigError
    from anges.registry import actions

    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(name, str) and name.strip() for name in names):
        raise fault(f"expected a list of action names, got {json.dumps(value, default=str)[:80]}")
    for name in names:
        try:
            actions.get(name.strip())
        except ConfigError as exc:
            raise fault(str(exc)) from None
    return tuple(name.strip() for name in names)


def _model_name(name: str, base: Path, fault) -> str:
    """Model files of `scripted:` and `replay:` names made absolute, so any worker finds them."""
    scheme, _, rest = name.partition(":")
    if scheme not in ("scripted", "replay") or not rest:
        return name
    file = (base / rest).expanduser()
    if not file.is_file():
        raise fault(f"{scheme} file {rest!r} not found (looked for {str(file)!r})")
    return f"{scheme}:{file.resolve()}"


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), type(value).__name__)


def _flag(name: str) -> str:
    return "action" if name == "actions" else name.replace("_", "-")
