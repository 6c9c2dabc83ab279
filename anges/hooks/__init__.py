"""Hooks: the user's commands and the plug-ins' Python functions, run at the points of a run (docs/hooks.md).

The loop tells one dispatcher (`dispatch.Hooks`) of each point; it runs the hooks that match, in order, and turns
their answers (go on, block with a reason, add context) into events. A Python hook returns `Block(reason)`,
`Context(text)`, a dict as a command hook prints it, or None, and reads the run through a `RunView`.
"""

from anges.hooks.answers import Block, Context
from anges.hooks.python import RunView

__all__ = ["Block", "Context", "RunView"]
