#!/usr/bin/env bash
# Create .venv (if needed) and install memlab with its pinned dependencies.
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch and torchvision first and alone, so pip resolves them from the pinned wheels (the pins are
# pyproject.toml's). scripts/torch_install.py decides what to install: nothing when both are already
# at their pinned versions, whatever the build (2.14.1, 2.14.1+cpu, 2.14.1+cu130 are all kept);
# otherwise PyPI's default build, or PyTorch's CPU-only build with MEMLAB_TORCH=cpu.
torch_plan=$(.venv/bin/python scripts/torch_install.py)
if [ -n "$torch_plan" ]; then
  mapfile -t torch_args <<<"$torch_plan"
  .venv/bin/python -m pip install --quiet "${torch_args[@]}"
fi
# The rest of the requirements, with torch and torchvision held to the builds now installed, so
# resolving them never swaps a CPU or CUDA build for another.
torch_constraints=$(mktemp)
trap 'rm -f "$torch_constraints"' EXIT
.venv/bin/python scripts/torch_install.py --constraints >"$torch_constraints"
.venv/bin/python -m pip install --quiet -c "$torch_constraints" -e ".[test]"
# The browser test drives Debian's Chromium; install it when we can (root on Debian).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's chromium for the browser test"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "setup: could not install chromium; the browser test will be skipped outside CI"
  else
    echo "setup: chromium not found; install it (e.g. apt-get install chromium) to run the browser test"
  fi
fi
# MathJax served from the built book, so math is typeset offline (memlab render uses it when present).
MATHJAX_VERSION=3.2.2
if [ ! -f .cache/mathjax/node_modules/mathjax/es5/tex-chtml.js ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "setup: installing mathjax@$MATHJAX_VERSION into .cache/mathjax"
    npm install --silent --no-audit --no-fund --prefix .cache/mathjax "mathjax@$MATHJAX_VERSION" \
      || echo "setup: could not install mathjax; the book will load MathJax from its CDN"
  else
    echo "setup: npm not found; the book will load MathJax from its CDN (math needs a network)"
  fi
fi
echo "setup: ready ($(.venv/bin/python -c 'import torch, memlab; print("torch", torch.__version__, "memlab", memlab.__version__)'))"
