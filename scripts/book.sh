#!/usr/bin/env bash
# Set up (if needed), run every chapter at the given profile (default cpu),
# render the HTML book and print where it is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Without a local data copy, fetch what the chapters need once into data/ (checksummed);
# offline, the first chapter stops before any work with one line saying what to set.
download=()
if [ -z "${MEMLAB_DATA_ROOT:-}" ]; then download=(--allow-download); fi
.venv/bin/memlab book --profile "${1:-cpu}" ${download[@]+"${download[@]}"}
echo "Open $PWD/_build/html/index.html"
