"""Shared fixtures: every test runs with its own ANGES_HOME and no provider credentials.

Tests marked `browser` or `sandbox` are skipped, with the reason, where the machine cannot run them or
when `ANGES_TEST_SKIP` names their group (see `optional_groups.py`); where the sandbox group is skipped,
the other tests run their commands without it (`optional_groups.home_config`).
"""

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

pytest_plugins = ["wire_servers", "optional_groups", "openapi_servers"]

@pytest.fixture
def work(tmp_path):
    """An empty working directory."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def outside():
    """A directory outside /tmp (the sandbox has its own /tmp, so paths there are invisible rather than read-only)."""
    path = Path(tempfile.mkdtemp(prefix="anges-test-outside-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path)


OTHER_SECRETS = ("GOOGLE_APPLICATION_CREDENTIALS", "ANGES_CONFIG", "ANGES_UI_PASSWORD", "ANGES_UI_TOKEN")


@pytest.fixture(autouse=True)
def anges_home(tmp_path_factory, monkeypatch, request):
    """Point ANGES_HOME at a fresh temp dir (with the config this machine needs) and hide any real credentials."""
    from optional_groups import home_config  # plugins, loaded by now
    from wire_servers import MODEL_ENV

    home = tmp_path_factory.mktemp("anges_home")
    monkeypatch.setenv("ANGES_HOME", str(home))
    config = home_config(request.node)
    if config:
        (home / "config.yaml").write_text(yaml.safe_dump(config))
    for name in (*MODEL_ENV, *OTHER_SECRETS):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(autouse=True)
def fresh_process_memory(monkeypatch):
    """Each test starts as a new process would: no places noted as model-writable by an earlier test's runs (a worker
    runs many tests, and one that worked in a shared parent folder would make every later test's tools there refused)."""
    from anges.util import trust

    monkeypatch.setattr(trust, "_noted", {})
