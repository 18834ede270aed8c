#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: unit tests, a smoke run of
# every chapter, the book build and the browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export MEMLAB_CACHE="${MEMLAB_CACHE:-$PWD/data/cache/test-models}"
# Test files run side by side on up to 4 cores (pytest-xdist; MEMLAB_TEST_WORKERS=N chooses, 0 runs
# them in this process). Each test file stays on one worker (--dist loadfile), so its module
# fixtures (a trained model, a built bundle) are made once; every test of the smoke book, a session
# fixture that runs each chapter, lives in tests/test_chapters.py for the same reason. Each worker
# computes at one thread. (Not --dist loadgroup: pytest-xdist 3.8 drops its groups under pytest 9.2,
# whose node ids it can no longer rewrite, and deals the tests out one by one.)
workers=${MEMLAB_TEST_WORKERS:-$(.venv/bin/python -c 'from memlab.core.config import available_cores; print(min(4, available_cores()))')}
parallel=(-n "$workers" --dist loadfile)
if [ "$workers" -le 1 ]; then parallel=(-p no:xdist); fi
# The AVX2 leg: the vision training and unlearning tests again with oneDNN and ATen capped at
# AVX2, the path of AVX2-only CPUs (AMD EPYC, older Intel), whatever CPU runs the suite.
# benchmarks/repro_onednn_channels_last.py shows the defect this leg guards against.
echo "test: AVX2 leg (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)"
ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" \
  tests/test_models_train_metrics.py tests/test_unlearning_methods.py tests/test_bn.py tests/test_bn_illusion.py
# The ISA legs: every test that compares floats within a tolerance (tests/conftest.py marks them
# float_tolerance) again under each CPU kernel set this machine has (scripts/cpu_isas.py: no vector
# kernels, AVX2, AVX-512), so a tolerance fitted to one CPU's kernels fails here, not on a user's.
for leg in $(.venv/bin/python scripts/cpu_isas.py); do
  aten=${leg%%:*}
  onednn=${leg##*:}
  echo "test: ISA leg ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn (float-tolerance tests)"
  ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn .venv/bin/python -m pytest -q -p no:cacheprovider \
    -m "float_tolerance and not slow" tests --ignore=tests/test_exercises.py --ignore=tests/test_cpu_paths.py
done
# The course kit: every exercise master graded by otter's local runner (solved: 100%; untouched
# student stub: 0 on every autograded question; a deliberately wrong answer fails its question).
echo "test: course kit (tests/test_exercises.py: otter autograder proven both ways)"
kit_start=$(date +%s)
.venv/bin/python -m pytest -q -p no:cacheprovider tests/test_exercises.py
echo "test: course kit took $(( $(date +%s) - kit_start )) s"
echo "test: full suite on $workers worker(s) (native CPU path; tests/test_cpu_paths.py also runs the AVX2 path in subprocesses)"
exec .venv/bin/python -m pytest tests --ignore=tests/test_exercises.py "${parallel[@]}" "$@"
