"""Shared fixtures: every test runs with its own ANGES_HOME and no provider credentials.

Tests marked `browser` or `sandbox` are skipped, with the reason, where the machine cannot run them or
when `ANGES_TEST_SKIP` names their group (see `optional_groups.py`).
"""

import pytest

pytest_plugins = ["wire_servers", "optional_groups"]

OTHER_SECRETS = ("GOOGLE_APPLICATION_CREDENTIALS", "ANGES_CONFIG", "ANGES_UI_PASSWORD", "ANGES_UI_TOKEN")


@pytest.fixture(autouse=True)
def anges_home(tmp_path_factory, monkeypatch):
    """Point ANGES_HOME at a fresh temp dir and hide any real credentials."""
    home = tmp_path_factory.mktemp("anges_home")
    monkeypatch.setenv("ANGES_HOME", str(home))
    from wire_servers import MODEL_ENV

    for name in (*MODEL_ENV, *OTHER_SECRETS):
        monkeypatch.delenv(name, raising=False)
    return home
