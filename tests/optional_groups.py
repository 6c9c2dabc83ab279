"""Test groups that need something of the machine: `browser` (Chromium driven by Playwright) and `sandbox`
(bubblewrap). A group is skipped, with the reason, where it cannot run, and on request with
`ANGES_TEST_SKIP=browser,sandbox`. Each probe runs once per session (the browser probe only when a browser
test is selected).

Where the sandbox group is skipped, every other test would see the fallback (each command needs an
approval no one gives): `home_config` then lets commands run without the sandbox and unasked, except in
tests marked `packaged_safety`, which test the safety machinery itself and keep the packaged settings.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

SKIP_VARIABLE = "ANGES_TEST_SKIP"
WITHOUT_SANDBOX = {"safety": {"sandbox": "off", "approval": "auto", "auto_escalate": True}}
"""The ANGES_HOME config of tests where the sandbox group cannot run (deny rules still hold; edits outside the
working directory are approved as the sandbox's absence allows commands)."""


def chromium_path() -> str:
    """The Chromium the browser tests drive: `$ANGES_CHROMIUM`, else `chromium` on the PATH ("" if none)."""
    return os.environ.get("ANGES_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser") or ""


@functools.cache
def browser_problem() -> str | None:
    """Why the browser tests cannot run on this machine, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[dev]')"
    path = chromium_path()
    if not path:
        return "Chromium is not installed (Debian: apt-get install chromium; or set ANGES_CHROMIUM to its path)"
    return _fails([path, "--headless", "--no-sandbox", "--version"], f"Chromium ({path}) does not start")


@functools.cache
def sandbox_problem() -> str | None:
    """Why the sandbox tests cannot run on this machine, or None when they can."""
    path = shutil.which("bwrap")
    if not path:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    return _fails([path, "--ro-bind", "/", "/", "true"],
                  "bwrap cannot make a sandbox here (are unprivileged user namespaces turned off?)")


PROBES = {"browser": browser_problem, "sandbox": sandbox_problem}


def _fails(argv: list[str], problem: str) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{problem}: {exc}"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        return f"{problem}: exit {done.returncode}" + (f", {detail[-1][:200]}" if detail else "")
    return None


def sandbox_skipped() -> bool:
    """True when the sandbox tests are skipped: bwrap cannot work here, or ANGES_TEST_SKIP names `sandbox`."""
    return "sandbox" in skipped_on_request() or sandbox_problem() is not None


def home_config(item) -> dict:
    """The config a test's ANGES_HOME starts with: empty, or WITHOUT_SANDBOX where the sandbox group is skipped."""
    if item.get_closest_marker("packaged_safety") or not sandbox_skipped():
        return {}
    return WITHOUT_SANDBOX


def skipped_on_request() -> set[str]:
    """The groups `ANGES_TEST_SKIP` names; an unknown name is an error, not a silent no-op."""
    names = {name.strip() for name in os.environ.get(SKIP_VARIABLE, "").split(",") if name.strip()}
    unknown = names - set(PROBES)
    if unknown:
        raise pytest.UsageError(f"{SKIP_VARIABLE}: unknown test group {', '.join(sorted(unknown))} "
                                f"(known: {', '.join(PROBES)})")
    return names


def pytest_collection_modifyitems(config, items):
    on_request = skipped_on_request()
    reasons: dict[str, str | None] = {}
    for item in items:
        for group, probe in PROBES.items():
            if item.get_closest_marker(group) is None:
                continue
            if group not in reasons:
                reasons[group] = f"skipped on request ({SKIP_VARIABLE})" if group in on_request else probe()
            if reasons[group]:
                item.add_marker(pytest.mark.skip(reason=f"{group} tests: {reasons[group]}"))
