#!/usr/bin/env bash
# Run the XLA tests (tests/xla) on the real torch_xla runtime, on the CPU (PJRT_DEVICE=CPU).
# torch_xla exists only for its own torch release (torch_xla 2.9.0 needs torch 2.9.0), so it lives in its own virtual
# environment, outside the clone: $TRACKTRAIN_CACHE (default ~/.cache/tracktrain)/xla-<hash of requirements-xla.txt>.
# The first run builds it (about 2 minutes and 7 GB: torch 2.9's only wheel here is the CUDA build); later runs
# reuse it. tracktrain comes from this checkout, so the core is tested on torch 2.9 here.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${TRACKTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tracktrain}"
key=$(sha256sum requirements-xla.txt | cut -c1-16)
env_dir="$cache/xla-$key"
if [ ! -x "$env_dir/bin/python" ]; then
  mkdir -p "$cache"
  building="$env_dir.building.$$"
  rm -rf "$building"
  python3 -m venv "$building"
  "$building/bin/pip" install --quiet -r requirements-xla.txt
  # the venv's scripts name their own path; it is only ever run through "$env_dir/bin/python"
  mv "$building" "$env_dir"  # complete or absent: an interrupted build is never reused
fi
export PJRT_DEVICE=CPU
# the XLA tests, and the Trainer's and Engine's own tests on torch 2.9 (the core must run on torch_xla's torch too)
# the project's addopts are replaced: they spread the main environment's run over pytest-xdist, which this one lacks
PYTHONPATH="$PWD:$PWD/integrations${PYTHONPATH:+:$PYTHONPATH}" "$env_dir/bin/python" -m pytest -o addopts="-ra --strict-markers" \
  tests/xla tests/trainer tests/engine/test_engine.py tests/engine/test_model_engine.py -m "not distributed" "$@"
