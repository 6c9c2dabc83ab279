"""Data kept beside objects that do not hold it: a store's bookkeeping, the prompt's formatted history."""

from __future__ import annotations

import weakref
from typing import Generic, TypeVar

T = TypeVar("T")


class Attached(Generic[T]):
    """A value per object, looked up by identity (streams compare by value and cannot be dict keys); an entry
    goes away with its object."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, T]] = {}

    def get(self, owner: object) -> T | None:
        """The value attached to `owner`, or None."""
        entry = self._entries.get(id(owner))
        return entry[1] if entry is not None and entry[0]() is owner else None

    def set(self, owner: object, value: T) -> None:
        """Attach `value` to `owner`, replacing what was attached."""
        key = id(owner)
        self._entries[key] = (weakref.ref(owner, lambda ref: self._forget(key, ref)), value)

    def __len__(self) -> int:
        return len(self._entries)

    def _forget(self, key: int, ref: weakref.ref) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] is ref:
            del self._entries[key]
