"""Every command of the session: the built-in ones of `anges.cli.commands` and those the modules about one concern
add to its registry (imported here so that they do)."""

from anges.cli import context_commands, rewind  # noqa: F401  (their commands join the registry)
from anges.cli.commands import completions, is_command, run_command

__all__ = ["completions", "is_command", "run_command"]
