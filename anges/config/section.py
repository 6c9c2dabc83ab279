"""The base of every config section."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: exact types (no '80' for a port), no unknown keys, and frozen once built."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    def __init__(self, *args: Any, **values: Any):
        """Fields by keyword, or positionally in their order: `ModelPreset("openai", "gpt-4.1")` (type checkers
        read pydantic's keyword-only signature)."""
        super().__init__(**dict(zip(type(self).model_fields, args)), **values)
