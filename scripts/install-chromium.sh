#!/usr/bin/env bash
# Installs headless Chromium (Debian's `chromium` package) for the explorer's browser
# tests (issue 26, tests/e2e/explore.rs: issue26_*), which load kvcc's explorer page and
# assert on the DOM Chromium renders. A second run with it present does nothing.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(chromium --version 2>/dev/null | head -n 1)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: no chromium and no apt-get to install it; install Chromium and put \`chromium\` on PATH" >&2
    exit 1
fi
sudo=
if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
echo "installed $(chromium --version 2>/dev/null | head -n 1)"
