#!/usr/bin/env bash
# The paper-scale runs that only a GPU can make, each sized to fit within 9 minutes on one H200;
# --parallel runs the three at once on the one GPU.
#
# What it decides (claims the cpu book leaves "outside the paper's regime"):
#   05_capacity     the capacity law (~3.6 bits per parameter, its alpha, bf16 against fp32) for
#                   GPT-2 models up to ~1M parameters on V = 2048, S = 64 uniform data   ~8 min
#   01_bn_illusion  the BN-illusion claims on ResNet-18 width 64, all of CIFAR-10's training
#                   images, the nine methods, 50 relearning epochs                        ~7 min
#   02_sde          the SDE claims with width-64 models on all of CIFAR-10, 50 targets, subsets
#                   a quarter of the paper's size                                        ~7 min
# The minutes are estimates (no GPU has been lent to measure them); every part has a hard
# limit of 10 minutes, and a part that hits it publishes nothing and is recorded as stopped.
# Sizes live in lib/memlab/gpu_evidence.py (PARTS), one declaration each.
#
# Usage: bash scripts/gpu-evidence.sh [--toy] [--out DIR] [--only CHAPTER] [--limit-s N] [--parallel]
#   --toy     the same parts at smoke sizes on any machine (what tests/test_gpu_evidence.py runs)
#   --parallel  every part at once on the one GPU, each with its share of the CPU cores and its
#             output in OUT/logs/CHAPTER.log (a status line every 30 s)
#   --out     results folder (default book/gpu); `memlab render` shows book/gpu as an
#             "At paper scale (GPU)" section at the end of each chapter
# Needs the environment of scripts/setup.sh and CIFAR-10 under MEMLAB_DATA_ROOT.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" -m memlab.gpu_evidence "$@"
