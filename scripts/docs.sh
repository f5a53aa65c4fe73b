#!/usr/bin/env bash
# The docs site (MkDocs + Material + mkdocstrings; mkdocs.yml, pages under docs/), from the venv that
# `scripts/setup-venv.sh dev` (or `docs`) makes.
# Usage: scripts/docs.sh build    strict build into site/: a broken link, reference or missing page fails it
#        scripts/docs.sh serve    local preview at http://127.0.0.1:8000, rebuilt on every edit
set -euo pipefail
cd "$(dirname "$0")/.."
mkdocs=.venv/bin/mkdocs
if [ ! -x "$mkdocs" ]; then
    echo "no $mkdocs: run scripts/setup-venv.sh dev (or scripts/setup-venv.sh docs) first" >&2
    exit 1
fi
export NO_MKDOCS_2_WARNING=1  # Material's banner about its successor, printed on every build
case "${1:-build}" in
    build) exec "$mkdocs" build --strict --site-dir site ;;
    serve) exec "$mkdocs" serve --strict --dev-addr 127.0.0.1:8000 ;;
    *) echo "usage: scripts/docs.sh build|serve" >&2; exit 2 ;;
esac
