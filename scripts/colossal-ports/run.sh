#!/bin/bash
# Run a ported Colossal-AI script on CPU/gloo under torchrun, with the stand-ins of torchvision, timm and titans
# (which do not install beside torch 2.13 here) on the path:  run.sh DIR NPROC SCRIPT [ARGS...]
# DIR holds the ported script and its ported config (port.py); STANDIN_SAMPLES sets the synthetic CIFAR-10's size.
# The stand-ins' sitecustomize makes .cuda() a no-op on a machine without CUDA (the scripts move data with .cuda()).
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=$1; n=$2; shift 2
cd "$dir" && DATA=${DATA:-./data} STANDIN_SAMPLES=${STANDIN_SAMPLES:-256} OMP_NUM_THREADS=1 TRACKTRAIN_DIST_TIMEOUT=120 \
    PYTHONPATH="$here/standins:." timeout 900 "$root/.venv/bin/torchrun" --standalone --nproc_per_node "$n" "$@"
