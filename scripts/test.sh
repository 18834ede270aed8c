#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: unit tests, a smoke run of
# every chapter, the book build and the browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MEMLAB_CACHE="${MEMLAB_CACHE:-$PWD/data/cache/test-models}"
exec .venv/bin/python -m pytest tests "$@"
