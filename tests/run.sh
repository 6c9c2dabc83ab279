#!/usr/bin/env bash
# Runs the whole test suite from a checkout: makes .venv, installs anges with its dev extras and a
# headless Chromium for the browser tests, then runs pytest. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
.venv/bin/python -m pip install -q -e ".[dev]"

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "tests/run.sh: the browser tests need Chromium: install your distribution's 'chromium' package" >&2
    exit 1
  fi
fi

.venv/bin/python -m ruff check anges web tests benchmarks examples setup.py

status=0
.venv/bin/python -m pytest -q -p no:cacheprovider "$@" || status=$?
if [ "$status" = 5 ]; then
  echo "tests/run.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
