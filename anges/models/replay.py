"""Record every model call to a JSON-lines file, and answer calls from such a file again."""

from __future__ import annotations

import difflib
import errno
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from anges.exceptions import ContextExceeded, ModelError, ModelReplyError, ModelSetupError
from anges.models.base import Completion, Model, Usage
from anges.models.streaming import replay_into_sink
from anges.models.window import window_of
from anges.util.paths import open_file

logger = logging.getLogger(__name__)
FORMAT_VERSION = 1
LENIENT = "lenient:"
"""After `replay:`, asks for a replay that goes on when a prompt differs from the recording."""
TOOK = re.compile(r"\bafter (?:\d+ min )?\d+(?:\.\d+)? s\b")
"""How long a command (a tool, a child) took, as its result says it: a replay never takes the same time."""


def redact(text: str) -> str:
    """Replace the values of secret environment variables (…_API_KEY, …_TOKEN, …) with their names."""
    from anges.util.masking import MIN_SECRET_LENGTH, is_secret_name

    for name, value in os.environ.items():
        if is_secret_name(name) and len(value) >= MIN_SECRET_LENGTH and value in text:
            text = text.replace(value, f"[{name}]")
    return text


class RecordingModel:
    """Wraps a model and appends one JSON line per call to `path`, flushed at once (usable after a crash)."""

    def __init__(self, inner: Model, path: str | os.PathLike):
        self.inner = inner
        self.path = Path(path)
        self.name = getattr(inner, "name", "") or getattr(inner, "__name__", type(inner).__name__)
        self._lock = threading.Lock()
        self._fd = -1
        try:
            self._fd = open_file(str(self.path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, parents=True)
        except OSError as exc:
            why = "it is a symbolic link (anges never writes through one)" if exc.errno == errno.ELOOP else \
                exc.strerror or str(exc)
            raise ModelSetupError(f"cannot record to {self.path}: {why}") from None

    def __call__(self, prompt: str, temperature: float | None = None) -> str:
        """The inner model's reply, recorded; a ModelError is recorded too, then raised."""
        start = time.monotonic()
        entry: dict = {"v": FORMAT_VERSION, "name": self.name, "temperature": temperature, "prompt": redact(prompt)}
        if facts := getattr(prompt, "local_facts", None):  # a replay in another folder reads its own in their place
            entry["facts"] = {name: redact(value) for name, value in facts.items()}
        if window := window_of(self.inner):  # the prompts were sized to it: a replay sizes them the same way
            entry["context_window"] = window.tokens
        try:
            reply = self.inner(prompt) if temperature is None else self.inner(prompt, temperature)
        except ModelError as exc:
            entry["error"] = {"type": type(exc).__name__, "message": redact(str(exc)), "kind": getattr(exc, "kind", "")}
            self._append(entry)
            raise
        usage = getattr(reply, "usage", None)
        entry.update(
            reply=redact(str(reply)),
            usage=usage.to_dict() if usage is not None else None,
            model=getattr(reply, "model", "") or self.name,
            finish_reason=getattr(reply, "finish_reason", "stop"),
            latency=round(getattr(reply, "latency", 0.0) or time.monotonic() - start, 3),
        )
        self._append(entry)
        return reply

    def _append(self, entry: dict) -> None:
        line = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8", errors="replace")
        with self._lock:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view):]

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)


@dataclass
class Divergence:
    """Where a replayed run first sent a prompt other than the recorded one."""

    index: int
    """0-based number of the call."""
    recorded: int
    """How many calls the recording holds."""
    diff: str
    """An excerpt of the unified diff, recorded prompt to actual prompt."""

    def __str__(self) -> str:
        return (f"call {self.index + 1} of {self.recorded} recorded: the prompt differs from the recording\n"
                f"{self.diff}")


class ReplayModel:
    """Answers calls in order from a recording; refuses a prompt that differs (or, lenient, reports the first)."""

    def __init__(self, path: str | os.PathLike, strict: bool = True):
        self.path = Path(path)
        self.strict = strict
        self.name = f"replay:{path}"
        self.entries = _load(self.path)
        self.context_window = next((e["context_window"] for e in self.entries
                                    if isinstance(e.get("context_window"), int)), 0)
        """The window the recorded model had (0: none was known): a replayed run sizes its prompts to it too."""
        self.calls = 0
        self.divergence: Divergence | None = None
        """The first divergence seen, or None while every prompt matched."""
        self._lock = threading.Lock()

    def __call__(self, prompt: str, temperature: float | None = None) -> Completion:
        """The next recorded reply (or recorded error)."""
        with self._lock:
            index = self.calls
            if index >= len(self.entries):
                raise ModelError(f"{self.name}: the recording holds {len(self.entries)} replies; "
                                 f"call {index + 1} has none")
            self.calls += 1
        entry = self.entries[index]
        recorded = as_here(entry.get("prompt", ""), entry.get("facts"), getattr(prompt, "local_facts", {}))
        self._compare(index, redact(prompt), recorded)
        if "error" in entry:
            raise _error(entry["error"])
        usage = entry.get("usage")
        replay_into_sink(entry.get("reply", ""))  # streamed again, in a few pieces
        return Completion(entry.get("reply", ""), usage=Usage(**usage) if usage else None, model=self.name,
                          latency=entry.get("latency", 0.0), finish_reason=entry.get("finish_reason", "stop"))

    def _compare(self, index: int, actual: str, recorded: str) -> None:
        if actual == recorded:
            return
        actual, recorded = TOOK.sub("after … s", actual), TOOK.sub("after … s", recorded)
        if actual == recorded:
            return
        divergence = Divergence(index, len(self.entries), _diff(recorded, actual))  # what differs beyond durations
        with self._lock:
            first = self.divergence is None
            if first:
                self.divergence = divergence
        if self.strict:  # the run stops with it: its message says it all, once
            raise ModelError(f"{self.name}: {divergence}\n(to go on regardless, as in a demo: --model "
                             f"replay:{LENIENT}{self.path})")
        if first:
            logger.warning("%s: %s", self.name, divergence)


def as_here(recorded: str, then: dict | None, now: dict) -> str:
    """A recorded prompt as this run would state it: the facts of where it was recorded (its working directory,
    the `python3` of its commands) replaced by this run's, wherever they stand whole."""
    for name, value in sorted((then or {}).items(), key=lambda item: -len(str(item[1]))):
        here = now.get(name)
        if isinstance(value, str) and value and here and here != value:
            recorded = re.sub(re.escape(value) + r"(?![\w.-])", here.replace("\\", "\\\\"), recorded)
    return recorded


def replay_model(spec: str) -> ReplayModel:
    """The model of `replay:FILE` (a differing prompt is an error) or `replay:lenient:FILE` (only a warning)."""
    lenient = spec.startswith(LENIENT)
    path = spec[len(LENIENT):] if lenient else spec
    return ReplayModel(path, strict=not lenient)


def with_recording(model: Model, path: str | os.PathLike) -> RecordingModel:
    """`model`, with every call appended to the JSON-lines file at `path`."""
    return RecordingModel(model, path)


def _load(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ModelSetupError(f"replay: recording {path} not found") from None
    except OSError as exc:
        raise ModelSetupError(f"replay: cannot read {path}: {exc}") from None
    entries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # the line being written when the recording process died
                logger.warning("replay: %s: ignoring the incomplete last line %d", path, number)
                continue
            raise ModelSetupError(f"replay: {path}:{number}: not a JSON line") from None
        if not isinstance(entry, dict) or "prompt" not in entry:
            raise ModelSetupError(f"replay: {path}:{number}: not a recorded call (no prompt)")
        entries.append(entry)
    return entries


def _diff(recorded: str, actual: str, max_lines: int = 30, width: int = 200) -> str:
    lines = list(difflib.unified_diff(recorded.splitlines(), actual.splitlines(), "recorded", "actual", n=2,
                                      lineterm=""))
    excerpt = [line if len(line) <= width else line[:width] + "..." for line in lines[:max_lines]]
    if len(lines) > max_lines:
        excerpt.append(f"... ({len(lines) - max_lines} more diff lines)")
    return "\n".join(excerpt) or "(the prompts differ only in line endings or trailing whitespace)"


def _error(recorded: dict) -> ModelError:
    kinds = {"ModelReplyError": ModelReplyError, "ModelSetupError": ModelSetupError, "ContextExceeded": ContextExceeded}
    cls = kinds.get(recorded.get("type", ""), ModelError)
    message = recorded.get("message", "recorded model error")
    return ModelReplyError(message, recorded.get("kind") or "empty") if cls is ModelReplyError else cls(message)

