"""`anges models`: the model presets and their context windows."""

from __future__ import annotations

import argparse

from anges.util.printable import printable


def list_models(args: argparse.Namespace) -> int:
    """Print each preset: its provider, model and context window (where the window comes from)."""
    from anges.config.loading import load_config
    from anges.models import provider_class

    config = load_config(args.config)
    rows = [("PRESET", "PROVIDER", "MODEL", "CONTEXT WINDOW (tokens)")]
    for name, preset in config.models.items():
        rows.append((name, preset.provider, preset.model or "-", _window(preset, provider_class(preset.provider))))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        print(printable("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3]))
    print(f"\n(the model of a run: --model, or `model: {config.model}` in the config; see docs/models.md)")
    return 0


def _window(preset, cls) -> str:
    from anges.models.window import assumed_window, known_window

    if preset.context_window:
        return f"{preset.context_window:,} (preset)"
    known = known_window(preset.model)
    fallback = f"{known:,} (known)" if known else f"{assumed_window(preset.base_url).tokens:,} (assumed)"
    asks = getattr(cls, "asks_server", None)
    if asks is not None and asks(preset):
        server = "Ollama" if getattr(cls, "provider", "") == "ollama" else "the server"
        return f"asked of {server}, else {fallback}"
    return fallback
