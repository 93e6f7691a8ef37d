#!/usr/bin/env bash
# Everything a short GPU session should measure, in one command that fits ~9 minutes on an
# H100: install, CUDA equivalence tests (Triton compiled, graphs on), kernel benchmarks,
# and the issue's engine table (games/s at N = 100, G = 256: shipped oracle and random
# 816K / 3.3M transformers, CUDA graphs on and off, oracle share of device time, the run
# against the oracle forward alone). Each step has its own time limit and a failing step
# does not stop the others. Results go to $OUT (default runs/gpu_session), at most 8 files:
#
#   env.txt       card, driver, versions, commit           tests.log   pytest -m "gpu or interpreter"
#   bench.json    kernel benchmarks (pytest-benchmark)     bench.log   their output
#   profile.log   every profile_run table                  profile.json  the runs' summaries (a list)
#   summary.txt   the one-line-per-run table for benchmarks/RESULTS.md
#
# Usage (repository root, a CUDA build of torch and triton installed):
#   EQFAST_COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_session.sh
# A dry run of the script itself on a CPU-only machine (tiny shapes, no graphs):
#   PROFILE_ARGS="--device cpu --games 2 --n-samples 4 --pipeline fast --backend reference" \
#   TEST_LIMIT=1 BENCH_LIMIT=1 bash benchmarks/gpu_session.sh
# On a machine without network access, wheels of missing packages (the `nvtx` package) in
# .whl/ are installed first (see benchmarks/RESULTS.md, "Running the GPU session").
set -uo pipefail
OUT=${OUT:-runs/gpu_session}
RUNS=$(mktemp -d)                       # per-run JSON, traces, install log: not sent back
PROFILE_ARGS=${PROFILE_ARGS:---device cuda --games 256 --n-samples 100}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET                 # kernels must compile for the device
PY=${PYTHON:-python3}
T0=$(date +%s)
step() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }

step "install"
if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/eqfast-site .whl/*.whl \
        && export PYTHONPATH=/tmp/eqfast-site${PYTHONPATH:+:$PYTHONPATH}
fi
$PY -m pip install -q --no-build-isolation --no-deps -e . > "$RUNS/install.log" 2>&1 \
    || { cat "$RUNS/install.log"; exit 1; }

step "environment"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)   commit: ${EQFAST_COMMIT:-unknown}"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    $PY -c "import torch, triton, eqfast; print('python', __import__('sys').version.split()[0], \
'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, \
'eqfast', eqfast.__version__, 'device', torch.cuda.get_device_name())"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step "CUDA equivalence tests (limit ${TEST_LIMIT:-180} s)"
timeout "${TEST_LIMIT:-180}" $PY -m pytest -q -m "gpu or interpreter" tests -x -p no:cacheprovider \
    > "$OUT/tests.log" 2>&1
echo "tests exit $?"; tail -3 "$OUT/tests.log"

step "kernel benchmarks (limit ${BENCH_LIMIT:-120} s)"
timeout "${BENCH_LIMIT:-120}" $PY -m pytest -q benchmarks/test_bench_sampling.py benchmarks/test_bench_tokenize.py \
    benchmarks/test_bench_moments.py benchmarks/test_bench_oracle.py --benchmark-enable \
    --benchmark-json "$OUT/bench.json" -p no:cacheprovider > "$OUT/bench.log" 2>&1
echo "benchmarks exit $?"; tail -3 "$OUT/bench.log"

# the engine table: one profile_run per row, each limited to 75 s
i=0
profile() {
    i=$((i + 1))
    step "profile_run $*"
    # shellcheck disable=SC2086
    timeout 75 $PY profiling/profile_run.py $PROFILE_ARGS --warmup 1 --batches 2 \
        --json "$RUNS/run$i.json" "$@" >> "$OUT/profile.log" 2>&1
    echo "exit $?" >> "$OUT/profile.log"
}
for oracle in default random:transformer816k random:transformer3m; do
    profile --oracle "$oracle" --oracle-alone                          # graphs on
    profile --oracle "$oracle" --no-graphs --oracle-alone --count-ops  # graphs off
    profile --oracle "$oracle" --no-graphs --batches 1 --top 0 \
        --torch-profiler "$RUNS/trace$i.json"                     # device time by stage
done
profile --oracle default --posterior                                   # posterior K = 8

step "summary"
$PY - "$OUT" "$RUNS" <<'EOF' | tee "$OUT/summary.txt"
import json, pathlib, sys
out, runs_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
runs = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("run*.json"),
                                                    key=lambda p: int(p.stem[3:]))]
(out / "profile.json").write_text(json.dumps(runs, indent=1))
print(f"{'oracle':<26}{'pipeline':<18}{'post':<6}{'games/s':>9}{'rows/s':>12}"
      f"{'alone%':>8}{'oracle dev%':>12}{'ops/step':>9}")
for r in runs:
    dev = r.get("device_share", {}).get("by_stage", {}).get("oracle")
    ops = r.get("device_ops_per_decision")
    print(f"{r['oracle']:<26}{r['pipeline']:<18}{str(r['posterior']):<6}{r['games_per_s']:>9.1f}"
          f"{r['oracle_rows_per_s']:>12,.0f}"
          f"{100 * r['oracle_alone_share'] if 'oracle_alone_share' in r else float('nan'):>8.1f}"
          f"{100 * dev if dev is not None else float('nan'):>12.1f}"
          f"{sum(ops.values()) if ops else float('nan'):>9.0f}")
EOF
step "done"
