#!/usr/bin/env bash
# What the test suite needs beyond set-up (run by `make test`, so by .ci/run): a headless browser for the gaps
# report's screenshot test (tests/test_gaps.py). Debian's chromium, installed once; skipped with a note where
# apt-get cannot run (not root): that test then checks the HTML's structure only.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  printf '[test-deps] installing chromium (headless browser for the gaps report test)\n'
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  printf '[test-deps] chromium missing and apt-get not available as root: the report screenshot test skips\n'
fi
