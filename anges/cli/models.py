"""`anges models`: the model presets and their context windows, asked of each server that can tell."""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor, wait

from anges.util.printable import printable

ASK_SECONDS = 12.0
"""How long `anges models` waits for the servers, all asked at once."""


def list_models(args: argparse.Namespace) -> int:
    """Print each preset: its provider, model and context window (asked of its server, and where it came from)."""
    from anges.config.loading import load_config

    config = load_config(args.config)
    presets = list(config.models.items())
    models = [_model(name, preset, config.model_settings) for name, preset in presets]  # the SDKs load here
    pool = ThreadPoolExecutor(max_workers=max(len(presets), 1))
    asked = [pool.submit(_window, model, preset) for model, (_, preset) in zip(models, presets)]
    wait(asked, timeout=ASK_SECONDS)
    pool.shutdown(wait=False, cancel_futures=True)
    windows = [future.result() if future.done() else f"{_fallback(preset).describe()}; the server did not answer "
               f"within {ASK_SECONDS:g}s" for future, (_, preset) in zip(asked, presets)]
    rows = [("PRESET", "PROVIDER", "MODEL", "CONTEXT WINDOW")]
    rows += [(name, preset.provider, preset.model or "-", window) for (name, preset), window in zip(presets, windows)]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        print(printable("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3]))
    print(f"\n(the model of a run: --model, or `model: {config.model}` in the config; see docs/models.md)")
    return 0


def _model(name: str, preset, settings):
    """The preset's model, when its window is asked of its server; else (or when it cannot be made) why not."""
    from anges.exceptions import ModelError
    from anges.models import provider_class

    cls = provider_class(preset.provider)
    asks = getattr(cls, "asks_server", None)
    if asks is None or not asks(preset):
        return ""
    from anges.models.provider import credential_hint, has_credentials

    if not has_credentials(preset):
        return f"the server was not asked: no {credential_hint(preset)}"
    try:
        return cls(preset, settings, name=name)
    except ModelError as exc:
        return f"the server was not asked: {exc}"


def _window(model, preset) -> str:
    """`8,192 tokens (server: llama-server /props), counted by the server`, or what is known without asking."""
    if isinstance(model, str):
        return f"{_fallback(preset).describe()}{'; ' + model if model else ''}"
    window = model.window()
    counted = ", counted by the server" if model.tokenizer() is not None else ""
    said = "" if window.source == "server" or preset.context_window else "; the server did not say"
    return f"{window.describe()}{said}{counted}"


def _fallback(preset):
    """The window known without asking: the preset's, the known table's, or the assumed one."""
    from anges.models.window import Window, assumed_window, known_window

    if preset.context_window:
        return Window(preset.context_window, "preset")
    known = known_window(preset.model)
    return Window(known, "known") if known else assumed_window(preset.base_url)
