"""Shared fixtures: every test runs with its own ANGES_HOME and no provider credentials."""

import pytest

CREDENTIALS = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
    "DEEPSEEK_API_KEY", "OPENROUTER_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "ANGES_CONFIG", "ANGES_UI_PASSWORD",
)


@pytest.fixture(autouse=True)
def anges_home(tmp_path_factory, monkeypatch):
    """Point ANGES_HOME at a fresh temp dir and hide any real credentials."""
    home = tmp_path_factory.mktemp("anges_home")
    monkeypatch.setenv("ANGES_HOME", str(home))
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    return home
