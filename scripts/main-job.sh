#!/usr/bin/env bash
# The new user's path in one command: generate a project from the cookiecutter template, install it, train it on
# the embedded defaults (MLflow on a local sqlite file, checkpoints on local disk), print the final metrics and the
# command that opens the run in the MLflow UI.
#
# Usage: scripts/main-job.sh [SCRATCH_DIR]     (default: a new folder under /tmp; EPOCHS=5 by default)
# Running it again with the same SCRATCH_DIR resumes the run there (from its newest checkpoint) instead of
# generating a new project.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mkdir -p "${1:-$(mktemp -d /tmp/tracktrain-main-job.XXXXXX)}" && cd "${1:-$_}" && pwd)"
epochs="${EPOCHS:-5}"
slug=digits_classifier
python="$repo/.venv/bin/python"

# installed once per version of the pins and the package list: a later run starts training at once
stamp="$repo/.venv/.main-job-installed"
wanted="$(cat "$repo/constraints.txt" "$repo/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    echo "== installing tracktrain (MLflow, scikit-learn, jsonargparse) and cookiecutter into $repo/.venv"
    [ -x "$python" ] || python3 -m venv "$repo/.venv"
    # torch is named with its pin in the same command as everything that depends on it
    "$python" -m pip install --quiet -c "$repo/constraints.txt" "torch==2.13.0" cookiecutter -e "$repo[mlflow,examples,cli]"
    echo "$wanted" > "$stamp"
fi

if [ ! -d "$scratch/$slug" ]; then
    echo "== generating $scratch/$slug from $repo/templates/project"
    "$python" -m cookiecutter "$repo" --no-input -o "$scratch" \
        project_name="Digits Classifier" tracker=mlflow tracktrain_requirement="tracktrain @ file://$repo"
    # its dependencies are installed above, from this checkout; --no-deps keeps pip from replacing the editable
    # tracktrain with a copy of the same checkout
    "$python" -m pip install --quiet --no-deps --no-build-isolation -e "$scratch/$slug"
fi

echo "== training $slug for $epochs epochs (python -m $slug.train --trainer.max_epochs $epochs)"
cd "$scratch/$slug"
"$python" -m "$slug.train" --trainer.max_epochs "$epochs"  # a bar on a terminal, plain progress lines in a log
