#!/usr/bin/env bash
# Run scripts/gpu-evidence.sh on a GPU machine without network access, from what
# scripts/gpu-offline-pack.sh put in .gpu-pack/ (see there). Arguments go to gpu-evidence.
# The wheels install into a temporary folder put first on PYTHONPATH, the data unpacks into a
# temporary folder that MEMLAB_DATA_ROOT then names; nothing is installed into the machine's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .gpu-pack/wheels ] && [ -f .gpu-pack/data.tar.xz ] \
  || { echo "gpu-offline-run: no .gpu-pack/ here; run scripts/gpu-offline-pack.sh where there is a network" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$TMP/site" .gpu-pack/wheels/*.whl
mkdir -p "$TMP/data" "$TMP/bin"
tar xJf .gpu-pack/data.tar.xz -C "$TMP/data"
# gpu-evidence starts each chapter as `memlab run`: the console script a pip install would make
printf '#!/bin/sh\nexec %s -m memlab.cli "$@"\n' "$(command -v python3)" > "$TMP/bin/memlab"
chmod +x "$TMP/bin/memlab"
export PATH="$TMP/bin:$PATH" PYTHONPATH="$TMP/site:$PWD/lib${PYTHONPATH:+:$PYTHONPATH}" \
  MEMLAB_DATA_ROOT="$TMP/data" PYTHONUNBUFFERED=1
python3 -c "import torch; print('gpu-offline-run: torch', torch.__version__, 'CUDA', torch.cuda.is_available())"
python3 -m memlab.run.gpu_evidence "$@"
