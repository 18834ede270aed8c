#!/usr/bin/env bash
# Pack what a GPU machine WITHOUT network access needs to run scripts/gpu-evidence.sh there.
#
# For a machine (a cluster node, a lent GPU box) whose Python already has torch, torchvision,
# numpy, scipy, scikit-learn, pandas, matplotlib, transformers, tokenizers, safetensors, tqdm and
# pyyaml, but not the notebook stack the chapters run in. Writes, in .gpu-pack/ (git-ignored):
#   wheels/        papermill, ipykernel, nbformat, myst-nb (for its glue) and what they need,
#                  built for that machine's Python (PYTHON_VERSION, default 3.12, x86-64 Linux)
#   data.tar.xz    CIFAR-10 (cifar10-jpeg/, ImageFolder JPEGs) and WikiText-2 (wikitext-2/) from
#                  MEMLAB_DATA_ROOT, about 19 MB
# Copy the repository with .gpu-pack/ to the machine and run there, from the repository root:
#   bash scripts/gpu-offline-run.sh [the arguments of scripts/gpu-evidence.sh]
# Verified on an H200 image with Python 3.12 and torch 2.11 (benchmarks/results/gpu.json's run).
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=${PYTHON_VERSION:-3.12}
: "${MEMLAB_DATA_ROOT:?set MEMLAB_DATA_ROOT to the folder holding cifar10-jpeg/ and wikitext-2/}"
for d in cifar10-jpeg wikitext-2; do
  [ -d "$MEMLAB_DATA_ROOT/$d" ] || { echo "gpu-offline-pack: $MEMLAB_DATA_ROOT/$d is missing" >&2; exit 2; }
done
# The notebook stack at the versions the book pins (pyproject.toml) and what they need, each pinned
# to the version tested with them; nothing the scientific image above already has.
WHEELS=(papermill==2.7.0 ipykernel==7.4.0 nbformat==5.11.1 nbclient==0.11.0 myst-nb==1.4.0
  jupytext==1.19.6 jupyter-client==8.10.0 jupyter-core==5.9.1 traitlets==5.16.1 pyzmq==27.3.0
  tornado==6.6.1 comm==0.2.3 debugpy==1.8.22 ipython==9.18.1 ipython-pygments-lexers==1.1.1
  matplotlib-inline==0.2.2 nest-asyncio2==1.7.4 jedi==0.20.1 parso==0.8.7 prompt-toolkit==3.0.53
  pexpect==4.9.0 ptyprocess==0.7.0 stack-data==0.6.3 executing==2.3.0 asttokens==3.0.2
  pure-eval==0.2.4 wcwidth==0.9.4 fastjsonschema==2.22.3 jsonschema==4.26.0
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 platformdirs==4.14.9
  tenacity==9.2.1 entrypoints==0.4.2 docutils==0.22.4 mdit-py-plugins==0.7.0 psutil==7.2.2
  typing-extensions==4.16.0)
rm -rf .gpu-pack.tmp && mkdir -p .gpu-pack.tmp/wheels
trap 'rm -rf .gpu-pack.tmp' EXIT  # a failed download leaves no half-made pack
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d .gpu-pack.tmp/wheels "${WHEELS[@]}"
tar cf - -C "$MEMLAB_DATA_ROOT" cifar10-jpeg wikitext-2 | xz -T0 -6 > .gpu-pack.tmp/data.tar.xz
rm -rf .gpu-pack && mv .gpu-pack.tmp .gpu-pack
echo "gpu-offline-pack: .gpu-pack/ holds $(ls .gpu-pack/wheels | wc -l) wheels and the data ($(du -sh .gpu-pack | cut -f1))"
