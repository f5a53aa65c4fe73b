#!/usr/bin/env bash
# Create ./.venv (if missing) and install tracktrain with the given extras, pinned by constraints.txt.
# Usage: scripts/setup-venv.sh EXTRAS      e.g. scripts/setup-venv.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-examples}"
python3 -m venv .venv
# torch is named with its pin in the same command as everything that depends on it
.venv/bin/pip install --quiet -c constraints.txt "torch==2.13.0" -e ".[${extras}]"
