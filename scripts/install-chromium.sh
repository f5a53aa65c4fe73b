#!/usr/bin/env bash
# Debian's headless-capable Chromium, for the test that opens the MLflow UI (tests/template/test_end_to_end.py).
# Needs root (or sudo) and the Debian package mirrors; about 30 s on a 2-core machine. Without it that check skips (under CI=true it fails).
set -euo pipefail
if command -v chromium >/dev/null; then chromium --version; exit 0; fi
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
chromium --version
