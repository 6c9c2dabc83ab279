"""The few domain errors of anges; converted to exit codes or HTTP statuses only at the edges."""

from typing import Any


class AngesError(Exception):
    """Base class of every error anges raises on purpose."""


class UsageError(AngesError):
    """The command line asks for something that cannot be done; the message says what to change."""


class ConfigError(AngesError):
    """A configuration file or value is invalid; the message names the file, the key and what was expected."""


class InvalidStreamId(AngesError, ValueError):
    """A stream id is not of the allowed form (letters, digits, '-' and '_', at most 64)."""


class StreamNotFound(AngesError, KeyError):
    """No stream with that id exists in the store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "stream not found"


class StreamExists(AngesError):
    """A stream with that id is already in the store (import refuses to overwrite it)."""


class StreamBusy(AngesError):
    """A run is already active on this stream: another process or thread holds its run lock."""


class ModelError(AngesError):
    """A model call failed for good (after the retry policy gave up, or at once for a non-retryable error)."""


class ModelSetupError(ModelError):
    """No usable model: missing credentials, unknown preset, rejected key. The message says what to set."""


class ModelCancelled(ModelError):
    """A model call was abandoned: its caller cancelled it (a stop, a time limit)."""


class ModelReplyError(ModelError):
    """The model answered, but with nothing usable: `kind` is "empty", "truncated" or "blocked"."""

    def __init__(self, message: str, kind: str, usage: Any = None):
        super().__init__(message)
        self.kind = kind
        self.usage = usage  # a `Usage`: what the refused reply still cost, when the provider said


class ContextExceeded(ModelError):
    """The prompt did not fit the model's context window. `kind`: the server refused it ("refused"), read less than
    was sent ("cut"), dropped its start while it answered ("shifted"), or ran out of window during the reply
    ("full"). `sent` is anges' count of the tokens sent, `kept` what the server said it read; `window` and
    `prompt_tokens` are the server's own numbers, where it said them."""

    def __init__(self, message: str, sent: int | None = None, kept: int | None = None, window: int | None = None,
                 prompt_tokens: int | None = None, kind: str = "refused"):
        super().__init__(message)
        self.sent = sent
        self.kept = kept
        self.window = window
        self.prompt_tokens = prompt_tokens
        self.kind = kind
        self.usage = None  # what the call still cost, when the server said


class FormatError(AngesError):
    """A model reply is not a valid action reply; `feedback` is the text sent back to the model."""

    def __init__(self, feedback: str):
        super().__init__(feedback)
        self.feedback = feedback


class BatchError(AngesError):
    """A batch cannot run as asked: a bad task file (the message names the file, line and field), a busy batch,
    or a missing engine."""


class RunStopped(AngesError):
    """A stop condition ended the run; `reason` is machine-readable (interrupt, event_limit, budget, ...)."""

    def __init__(self, reason: str, message: str, **details: Any):
        super().__init__(message)
        self.reason = reason
        self.details = details


class SandboxError(AngesError):
    """The run's command runner (or its sandbox) could not start or stopped answering."""


class CheckpointError(AngesError):
    """A checkpoint could not be taken, read or restored; the message says why (no git, a folder too large, ...)."""


class UndoRefused(CheckpointError):
    """An undo would overwrite files someone else changed since the checkpoint; `paths` names them."""

    def __init__(self, message: str, paths: list[str]):
        super().__init__(message)
        self.paths = paths
