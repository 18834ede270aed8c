#!/usr/bin/env bash
# The paper-scale runs that only a GPU can make, one after another on one GPU.
#
# What it decides (claims the cpu book leaves "outside the paper's regime"):
#   05_capacity     the capacity law (~3.6 bits per parameter, its alpha, bf16 against fp32) for
#                   GPT-2 models up to ~1M parameters on V = 2048, S = 64 uniform data  ~34 min
#   01_bn_illusion  the BN-illusion claims on ResNet-18 width 64, all of CIFAR-10's training
#                   images, the nine methods, 50 relearning epochs                        ~8 min
#   02_sde          the SDE claims with width-64 models on all of CIFAR-10, 50 targets, subsets
#                   a quarter of the paper's size                                        ~9 min
# The minutes are estimated from step rates measured one loop at a time on one H200
# (benchmarks/bench_gpu.py -> benchmarks/results/gpu.json); each part has a hard limit above its
# estimate, and a part that hits it publishes nothing and is recorded as stopped, with the last
# line its output reached (each part's output also goes to OUT/logs/CHAPTER.log).
# Sizes live in lib/memlab/report/gpu_section.py (PARTS), one declaration each.
#
# Usage: bash scripts/gpu-evidence.sh [--toy] [--out DIR] [--only CHAPTER] [--limit-s N] [--set CHAPTER.NAME=VALUE] [--parallel]
#   --toy     the same parts at smoke sizes on any machine (what tests/test_gpu_evidence.py runs)
#   --set CHAPTER.NAME=VALUE  change one setting of a part for this run (e.g. 02_sde.epochs=12)
#   --parallel  every part at once on the one GPU, each with its share of the CPU cores, its
#             output only in its log (a status line every 30 s); measured slower than one
#             after another: time-sharing cut each training loop to ~28 steps/s from 62-77
#   --out     results folder (default book/gpu); `memlab render` shows book/gpu as an
#             "At paper scale (GPU)" section at the end of each chapter
# Needs the environment of scripts/setup.sh and CIFAR-10 under MEMLAB_DATA_ROOT.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" -m memlab.run.gpu_evidence "$@"
