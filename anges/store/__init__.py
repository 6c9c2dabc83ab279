"""The record: events and streams, their append-only JSON-Lines files, run locks, and exports.

`EventStore` (the default store) and `Store` (the protocol any store meets) load on first use.
"""

from importlib import import_module

_EXPORTS = dict.fromkeys(("EventStore", "Store", "Cursor"), "anges.store.event_store")
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'anges.store' has no attribute {name!r}")
    return getattr(import_module(module), name)
