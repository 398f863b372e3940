#!/usr/bin/env bash
# Install Chromium from the distribution's packages when it is missing, so that report.html is tested in a real
# headless browser (tests/browser/chromium.py). Exit codes: tests/apt_install.sh.
set -euo pipefail
# shellcheck source=tests/apt_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt_install.sh"

have_chromium() {
  command -v chromium >/dev/null 2>&1
}

apt_install chromium have_chromium chromium
