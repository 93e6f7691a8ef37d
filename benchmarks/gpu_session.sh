#!/usr/bin/env bash
# One GPU session: everything a short lease on an H100/H200 should measure, in one command
# that ends before its deadline and leaves its results behind even when killed.
#
# Usage (repository root, on the GPU machine; the machine's python3 holds CUDA torch):
#   OUT=$OUT bash benchmarks/gpu_session.sh              # deadline 540 s (DEADLINE_S)
#   bash benchmarks/gpu_session.sh --dry-run             # this script on a CPU-only machine
#
# Steps, most informative first; each has a time estimate and a limit, starts only if its
# estimate fits before the deadline, and is cut at the deadline otherwise:
#   preflight   nvidia-smi, torch/triton/eqfast import, CUDA present: stops at once if not
#   install     pip install -e . (no index, no deps; wheels in .whl/ first if carried)
#   headline    games/s, shipped oracle, G = 256, N = 100, CUDA graphs, 8 timed batches
#   tests       pytest -m "gpu or interpreter" (kernels compiled, graphs on/off/reference)
#   engine      benchmarks/gpu_engine_table.py rows (oracles x graphs x precision x G)
#   kernels     benchmarks/gpu_kernels.py: every stage vs its reference, GB/s
#   moments-tune  benchmarks/gpu_moments_tune.py: the reduction's launch configurations
#   ncu         Nsight Compute counters of the reduction and the sampler
#   sanitizer   compute-sanitizer memcheck over the kernel tests
#   bench       the pytest-benchmark suites (kernels, oracle), if time is left
#
# Results: every step appends to files in $STATE/results, and after every step they are
# copied to $OUT with a fresh summary.txt (at most 8 files):
#   env.txt  steps.txt  summary.txt  runs.jsonl  run.log  tests.log  sanitizer.log  bench.json
# $STATE (default .gpu_state, git-ignored) also holds a done-marker per finished step and the
# Triton cache: a second call on the same (warm) machine, or on a fresh one with .gpu_state
# carried, skips what is done and goes on with the rest.
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
DEADLINE=${DEADLINE_S:-540}
STATE=${EQFAST_GPU_STATE:-.gpu_state}
RES=$STATE/results
OUT=${OUT:-runs/gpu_session}
PY=${PYTHON:-python3}
mkdir -p "$RES" "$STATE/done" "$STATE/tmp" "$OUT"
export TRITON_CACHE_DIR=$PWD/$STATE/triton PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
export TRITON_DEFAULT_FP_FUSION=1
if [ $DRY = 1 ]; then
    export TRITON_INTERPRET=1
else
    unset TRITON_INTERPRET                 # kernels must compile for the device
fi
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
echo "--- session start $(date -u +%Y-%m-%dT%H:%M:%SZ) deadline ${DEADLINE} s dry-run ${DRY}" >> "$RES/steps.txt"

publish() {
    $PY benchmarks/gpu_summary.py "$RES" > "$RES/summary.txt" 2>&1
    cp "$RES"/* "$OUT"/ 2>/dev/null
}

# step NAME EST_S LIMIT_S LOG COMMAND...: run COMMAND (output appended to $RES/LOG) if its
# estimate fits, for at most min(LIMIT_S, time left); record the outcome; publish.
step() {
    local name=$1 est=$2 limit=$3 log=$4
    shift 4
    if [ -e "$STATE/done/$name" ]; then
        echo "$name  done-earlier" >> "$RES/steps.txt"
        return 0
    fi
    local left=$(( DEADLINE - $(elapsed) ))
    if (( est > left )); then
        echo "$name  skipped (needs ~${est} s, ${left} s left)" >> "$RES/steps.txt"
        echo "== [$(elapsed) s] $name skipped (needs ~${est} s, ${left} s left)"
        publish
        return 0
    fi
    (( limit > left )) && limit=$left
    echo "== [$(elapsed) s] $name (limit ${limit} s)"
    echo "===== $name $(date -u +%H:%M:%S)" >> "$RES/$log"
    local start rc
    start=$(date +%s)
    if declare -F "$1" >/dev/null; then      # this script's own functions: no timeout
        "$@" >> "$RES/$log" 2>&1
    else
        timeout -k 5 "$limit" "$@" >> "$RES/$log" 2>&1
    fi
    rc=$?
    local took=$(( $(date +%s) - start ))
    if (( rc == 0 )); then
        touch "$STATE/done/$name"
        echo "$name  ok  ${took}" >> "$RES/steps.txt"
    elif (( rc == 124 || rc == 137 )); then
        echo "$name  TIMEOUT after ${took} s (limit ${limit})" >> "$RES/steps.txt"
    else
        echo "$name  FAILED exit ${rc}  ${took}" >> "$RES/steps.txt"
    fi
    echo "   $name: exit $rc in ${took} s"
    tail -n 3 "$RES/$log"
    publish
    return $rc
}

preflight() {
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%MZ)   commit: ${EQFAST_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
        if [ $DRY = 0 ]; then
            nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || exit 1
        fi
        $PY - <<EOF || exit 1
import sys, torch, triton
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "triton", triton.__version__)
if $DRY == 0:
    assert torch.cuda.is_available(), "CUDA not available to torch"
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "SMs", p.multi_processor_count, "memory GiB", round(p.total_memory / 2**30, 1))
EOF
        command -v compute-sanitizer >/dev/null && echo "compute-sanitizer: $(command -v compute-sanitizer)" \
            || echo "compute-sanitizer: not found"
        $PY -c "import pytest_timeout" 2>/dev/null && echo "pytest-timeout: yes" || echo "pytest-timeout: no"
    } > "$RES/env.txt" 2>&1
}

install() {
    if ls .whl/*.whl >/dev/null 2>&1; then
        $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/eqfast-site .whl/*.whl || return 1
    fi
    $PY -m pip install -q --no-build-isolation --no-deps --no-index -e . || return 1
    $PY -c "import eqfast, eqfast.kernels; print('eqfast', eqfast.__version__)"
}
[ -d /tmp/eqfast-site ] && export PYTHONPATH=/tmp/eqfast-site${PYTHONPATH:+:$PYTHONPATH}

TIMEOUT_FLAG=""
$PY -c "import pytest_timeout" 2>/dev/null && TIMEOUT_FLAG="--timeout=120"

if ! step preflight 10 60 run.log preflight; then
    echo "preflight failed: see env.txt"; cat "$RES/env.txt"; publish; exit 1
fi
cat "$RES/env.txt"
if [ $DRY = 0 ]; then
    step install 20 120 run.log install || { echo "install failed: see run.log"; exit 1; }
fi

if [ $DRY = 1 ]; then
    HEADLINE=(--device cpu --games 2 --n-samples 4 --pipeline fast --backend reference --warmup 0 --batches 1)
    TESTS=(-m "not slow" tests/test_fast_engine.py -k "graph_cache or cuda")
    KERNELS=(--device cpu --games 4 --worlds 8 --window 2 --big-games 16)
    TUNE=(--device cpu --games 8 --worlds 20)
    DRY_FLAG=--dry-run
else
    HEADLINE=(--device cuda --games 256 --n-samples 100 --warmup 1 --batches 8 --oracle-alone)
    TESTS=(-m "gpu or interpreter" tests)
    KERNELS=(--device cuda)
    TUNE=(--device cuda)
    DRY_FLAG=
fi

step headline 45 120 run.log $PY profiling/profile_run.py "${HEADLINE[@]}" \
    --label headline-shipped-g256-graphs-fp32 --jsonl "$RES/runs.jsonl"
step tests 100 170 tests.log $PY -m pytest -q "${TESTS[@]}" \
    -p no:cacheprovider --maxfail=10 $TIMEOUT_FLAG -rfEs
# the engine table stops starting rows 100 s before the deadline: kernels and sanitizer next
step engine 40 400 run.log $PY benchmarks/gpu_engine_table.py --jsonl "$RES/runs.jsonl" \
    --stop-at $(( T0 + DEADLINE - 100 )) --tmp "$STATE/tmp" $DRY_FLAG
step kernels 30 80 run.log $PY benchmarks/gpu_kernels.py "${KERNELS[@]}" --out "$RES/runs.jsonl"
step moments-tune 25 60 run.log $PY benchmarks/gpu_moments_tune.py "${TUNE[@]}" --out "$RES/runs.jsonl"
if [ $DRY = 0 ] && command -v ncu >/dev/null; then
    # hardware counters of the reduction far beyond L2 and of the sampler at the engine's
    # size: DRAM throughput, memory workload, occupancy (clocks left alone)
    step ncu 40 90 run.log ncu --clock-control none --kernel-name regex:"weighted_moments|sample_worlds" \
        --launch-skip 1 --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats $PY benchmarks/gpu_ncu_targets.py
else
    echo "ncu  skipped (dry run or no ncu)" >> "$RES/steps.txt"
fi
if [ $DRY = 0 ] && command -v compute-sanitizer >/dev/null; then
    # one cudaMalloc per tensor (no caching allocator) so an out-of-bounds access leaves
    # its allocation and memcheck sees it
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 step sanitizer 60 120 sanitizer.log \
        compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
        $PY -m pytest -q tests/test_kernel_advance.py tests/test_kernel_public.py \
        tests/test_kernel_sampling.py tests/test_kernel_tokenize.py tests/test_kernel_moments.py \
        tests/test_kernel_posterior.py -p no:cacheprovider -x -k "not compiles"
else
    echo "sanitizer  skipped (dry run or no compute-sanitizer)" >> "$RES/steps.txt"
fi
step bench 60 120 run.log $PY -m pytest -q benchmarks/test_bench_sampling.py \
    benchmarks/test_bench_tokenize.py benchmarks/test_bench_moments.py --benchmark-enable \
    --benchmark-json "$RES/bench.json" -p no:cacheprovider
echo "--- session end after $(elapsed) s" >> "$RES/steps.txt"
publish
cat "$RES/summary.txt"
