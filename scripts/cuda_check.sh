#!/usr/bin/env bash
# The CUDA backend's whole check on a machine with an NVIDIA GPU, in one command (DEVELOPERS.md, docs/cuda.md).
#
#   scripts/cuda_check.sh wheels         on a machine that reaches PyPI: download into .whl/ the pure-Python
#                                        wheels the GPU machine lacks (for its Python 3.12)
#   scripts/cuda_check.sh [REPORT_DIR]   on the GPU machine, with .whl/ beside this repository: install the
#                                        project, run `pytest -m cuda` and bench/cuda_*.py, write
#                                        REPORT_DIR/report.md (default: $OUT if set, else cuda-report)
#
# The GPU machine's Python must already hold cupy, llvmlite, numpy, torch (CUDA) and pytest, and CUDA's
# libdevice must be under $CUDA_HOME or /usr/local/cuda. Everything ends within about five minutes: each step
# has a time limit, and a step that fails is reported and the next one still runs. SKIP="cuda_training ..."
# leaves the steps it names out (a shorter check when the device time left is short).
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=(lark==1.3.1 pygls==2.1.1 lsprotocol==2025.0.0 cattrs==26.2.1 prompt_toolkit==3.0.53 wcwidth==0.9.4)
PYTHON=${PYTHON:-python3}

if [ "${1:-}" = wheels ]; then
    exec "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
fi

REPORT=${1:-${OUT:-cuda-report}}
mkdir -p "$REPORT"
REPORT=$(cd "$REPORT" && pwd)
SITE=$(mktemp -d /tmp/dl-site.XXXXXX)
summary="$REPORT/report.md"

step() {  # step NAME LIMIT_SECONDS COMMAND...: run, log to REPORT/NAME.log, note the outcome in the report
    local name=$1 limit=$2
    shift 2
    if [[ " ${SKIP:-} " == *" $name "* ]]; then
        echo "| $name | skipped (SKIP) | 0 s | |" >>"$summary"
        : >"$REPORT/$name.log"
        return 0
    fi
    local started=$SECONDS
    timeout "$limit" "$@" >"$REPORT/$name.log" 2>&1
    local status=$?
    local outcome="ok"
    [ $status -eq 124 ] && outcome="stopped after ${limit} s"
    [ $status -ne 0 ] && [ $status -ne 124 ] && outcome="failed (exit $status)"
    echo "| $name | $outcome | $((SECONDS - started)) s | $name.log |" >>"$summary"
    return 0
}

{
    echo "# CUDA check, $(date -Is)"
    echo
    echo '```text'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    "$PYTHON" -c "import sys, numpy, llvmlite, cupy, torch; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'llvmlite', llvmlite.__version__, 'cupy', cupy.__version__, 'torch', torch.__version__)" 2>&1
    git log -1 --format='commit %h %s' 2>/dev/null
    echo '```'
    echo
    echo "| step | outcome | time | log |"
    echo "|---|---|---|---|"
} >"$summary"

step install 60 bash -c "'$PYTHON' -m pip install -q --no-index --no-deps --no-compile --target '$SITE' .whl/*.whl \
    && '$PYTHON' -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target '$SITE' ."
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
step smoke 40 "$PYTHON" -m dl --backend cuda --explain-backend examples/train.dl quick
step cuda_elementwise 40 "$PYTHON" bench/cuda_elementwise.py --rounds 10
step cuda_mlp 60 "$PYTHON" bench/cuda_mlp.py --epochs 10
step cuda_training 120 "$PYTHON" bench/cuda_training.py
# the tests last: the benchmarks' GPU to themselves; several workers share the GPU (pytest-xdist, when installed)
workers=$("$PYTHON" -c "import xdist" 2>/dev/null && echo "-n 6")
step pytest-cuda 200 "$PYTHON" -m pytest -m cuda -q -rfEs --tb=short --durations=10 -p no:cacheprovider $workers \
    tests/test_cuda_gpu.py

{
    echo
    echo "## pytest -m cuda"
    echo '```text'
    tail -n 40 "$REPORT/pytest-cuda.log"
    echo '```'
    for bench in smoke cuda_elementwise cuda_mlp cuda_training; do
        echo
        echo "## $bench"
        echo
        cat "$REPORT/$bench.log"
    done
} >>"$summary"
rm -rf "$SITE"
echo "report: $summary"
