#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA device and its own Python and CUDA build of torch (no network), runs the
# tests marked `cuda` and benchmarks/bench_gpu.py, and writes gpu-check.json and gpu-check.md into $OUT (default
# ./gpu-check-out); about 5 minutes on one H100/H200. See scripts/gpu_check.py.
#
#   scripts/gpu-check.sh              # on the GPU machine, from a checkout of this repository
#   scripts/gpu-check.sh --dry-run    # anywhere: every part on the CPU with tiny counts (the default test run does it)
#
# tracktrain goes onto that machine's torch without its dependencies (its own are all there: torch, fsspec, tqdm,
# numpy); a Python package the machine lacks can come along as wheels in ./.whl (made beforehand where pip can
# download: see the README's "On a GPU"), installed first with --no-index. PYTHON picks the interpreter (default:
# python3 on the GPU machine, this checkout's .venv in a dry run).
set -uo pipefail
cd "$(dirname "$0")/.."

dry_run=""
if [[ "${1:-}" == "--dry-run" ]]; then
    dry_run="--dry-run"
elif [[ $# -gt 0 ]]; then
    echo "usage: scripts/gpu-check.sh [--dry-run]" >&2
    exit 2
fi
if [[ -n "$dry_run" && -x .venv/bin/python ]]; then
    python="${PYTHON:-.venv/bin/python}"
else
    python="${PYTHON:-python3}"
fi

if [[ -z "$dry_run" ]]; then
    if compgen -G ".whl/*.whl" >/dev/null; then
        "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-check-site .whl/*.whl \
            && export PYTHONPATH="/tmp/gpu-check-site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    # the project itself, on the machine's own torch; if pip cannot build it there, the source tree serves as well
    if "$python" -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/gpu-check-install.log 2>&1; then
        echo "tracktrain installed (editable, no dependencies) into $("$python" -c 'import sys; print(sys.prefix)')"
    else
        echo "pip could not install tracktrain here (see /tmp/gpu-check-install.log); using the source tree"
        export PYTHONPATH="$PWD:$PWD/integrations${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi
export PYTHONUNBUFFERED=1
exec "$python" scripts/gpu_check.py $dry_run
