"""JSON schemas as the model reads them: one line, without the noise generators add."""

from __future__ import annotations

import json
from typing import Any

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
"""JSON Schema keywords whose value maps names to schemas (so a property named "title" is not a keyword)."""


def compact_schema(schema: Any) -> str:
    """A schema as one line of JSON, without the `title` noise SDKs add to every field."""
    return json.dumps(_strip_titles(schema), ensure_ascii=False, separators=(",", ":"))


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            result[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            result[key] = _strip_titles(value)
    return result
