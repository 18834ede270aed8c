#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: unit tests, a smoke run of
# every chapter, the book build and the browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# One intra-op thread: see the note in memlab/cli.py (torch CPU backward crash with 2 threads).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export MEMLAB_CACHE="${MEMLAB_CACHE:-$PWD/data/cache/test-models}"
exec .venv/bin/python -m pytest tests "$@"
