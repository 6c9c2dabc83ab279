#!/usr/bin/env bash
# Runs the whole test suite from a checkout: makes .venv, installs anges with its dev extras and, where they
# are missing and it can (as root, with apt-get), Debian's chromium (browser tests) and bubblewrap (sandbox
# tests); then ruff, mypy (tests/mypy.ini) and pytest. Tests whose tools are missing or do not work here are
# skipped with the reason; ANGES_TEST_SKIP=browser,sandbox skips those groups on purpose. Exits non-zero on
# any failure (a type error included).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "tests/run.sh: $*" >&2; }

if [ ! -x .venv/bin/python ]; then
  say "making .venv"
  python3 -m venv .venv
fi
say "installing anges and its dev dependencies into .venv (the whole output goes to .venv/install.log)"
log=.venv/install.log
# Progress: pip's Collecting/Downloading/Installing lines as they come; everything, if it fails.
if ! { .venv/bin/python -m pip install --upgrade pip setuptools wheel \
       && .venv/bin/python -m pip install -e ".[dev]"; } 2>&1 | tee "$log" \
     | awk '/^(Collecting|Downloading|Installing collected|Successfully installed)/ { print "  " $0; fflush() }' >&2
then
  cat "$log" >&2
  say "installing failed (the output is above and in $log)"
  exit 1
fi

skipped=",${ANGES_TEST_SKIP:-},"
skipped="${skipped// /}"
missing=()
if [[ $skipped != *,browser,* ]] && ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
if [[ $skipped != *,sandbox,* ]] && ! command -v bwrap >/dev/null 2>&1; then missing+=(bubblewrap); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]} with apt-get for the browser and sandbox tests (this can take a few minutes)"
    if ! { apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get -q install -y "${missing[@]}"; } >&2; then
      say "could not install ${missing[*]}: the tests that need it are skipped (reasons at the end)"
    fi
  else
    say "${missing[*]} not installed, and installing needs root and apt-get: the tests that need it are" \
        "skipped (reasons at the end). Install your distribution's ${missing[*]} to run them."
  fi
fi

say "ruff"
.venv/bin/python -m ruff check anges web tests benchmarks examples docs setup.py

say "mypy (tests/mypy.ini; its cache is .venv/mypy_cache)"
started=$SECONDS
.venv/bin/python -m mypy --config-file tests/mypy.ini
say "mypy took $((SECONDS - started)) s"

say "pytest"
status=0
# Three workers (ANGES_TEST_WORKERS; 0 runs in this process): most tests wait on processes, servers and a browser
# rather than compute. The tests of one Ray cluster, or of the browser, stay on one worker (xdist_group).
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${ANGES_TEST_WORKERS:-3}" --dist loadgroup "$@" || status=$?
if [ "$status" = 5 ]; then
  say "pytest collected no tests"
  exit 1
fi
exit "$status"
