#!/usr/bin/env bash
# Set up (if needed), run every chapter at the given profile (default cpu),
# render the HTML book and print where it is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/memlab book --profile "${1:-cpu}"
echo "Open $PWD/_build/html/index.html"
