#!/usr/bin/env bash
# Headless Chromium and its WebDriver from Debian, for the browser test of the `alignir serve`
# page (tests/test_serve_page.py drives them through Selenium, installed by setup.sh's dev extra).
# Idempotent: does nothing when both are installed. Needs root (apt-get).
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
chromium --version
