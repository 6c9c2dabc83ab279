"""Web APIs from their OpenAPI 3.0 and 3.1 documents: each source's operations, offered to the model by CALL_API,
called by anges itself (the credential never reaches the model), within the source's base URL.

`documents.py` reads and checks a document and its `$ref`s, `operations.py` its operations and what the model reads
of them, `calls.py` checks a call against its schema and builds the request, `client.py` sends it, `sources.py`
holds a run's APIs. Nothing here is imported until a source is configured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anges.tools.openapi.sources import APIs

__all__ = ["APIs"]


def __getattr__(name: str):
    if name == "APIs":
        from anges.tools.openapi.sources import APIs

        return APIs
    raise AttributeError(f"module 'anges.tools.openapi' has no attribute {name!r}")
