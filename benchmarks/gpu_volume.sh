#!/usr/bin/env bash
# Volume on one GPU lease: a million games of E[Q] labels from the fast pipeline, a Stage 2
# several times the shipped size trained on them in bf16, and the GPU test suite, the
# memory checker and the posterior kernel's counters beside the training, in one command
# that ends before its deadline and leaves its results in $OUT as they come.
#
# Usage (repository root, on the GPU machine; its python3 holds CUDA torch):
#   OUT=$OUT bash benchmarks/gpu_volume.sh          # deadline 550 s (DEADLINE_S)
#   bash benchmarks/gpu_volume.sh --dry-run         # the same steps, tiny, on a CPU machine
#
# Timeline (seconds from the start; the generation stops at GEN_STOP_S whatever it reached,
# the training's budget is what is left before the deadline less LOAD_S for reading the
# records):
#   0    preflight, install
#   ~20  eqfast-generate: GAMES games, accurate oracle in bf16, N = 100, uniform worlds,
#        2,048 games per batch, CUDA graphs (alone on the GPU: its games/s is clean)
#   stop --store-worlds on 4,096 more games (games/s, bytes per record)
#   then two lanes side by side:
#     A  eqfast-train-stage2 --device cuda --precision bf16 on every game generated
#        (d_model 128, 4 layers, feed-forward 256: 4.4x the shipped parameters)
#     B  pytest -m "gpu or interpreter" tests; compute-sanitizer memcheck on the kernel
#        tests; ncu on the posterior likelihood kernel
# Results in $OUT: steps.txt run.log tests.log sanitizer.log best.safetensors
# history.jsonl and one test shard of the generated data (test.safetensors + test.json).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_lib.sh

DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
DEADLINE=${DEADLINE_S:-550}
OUT=${OUT:-runs/gpu_volume}
W=${EQFAST_VOLUME_DIR:-/tmp/eqfast-volume}
PY=${PYTHON:-python3}
# scratch: a run left there (an earlier try on this machine) would be resumed with other
# settings and refused, so each run starts it empty
rm -rf "$W"
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 TRITON_CACHE_DIR=$W/triton
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
say() { echo "[$(elapsed) s] $*" | tee -a "$OUT/steps.txt"; }

if [ $DRY = 1 ]; then
    export TRITON_INTERPRET=1
    GAMES=${GAMES:-128}; GPB=64; GEN_STOP_S=${GEN_STOP_S:-240}; LOAD_S=20; DEV=cpu
    GEN_FLAGS=(--backend reference --threads 1)
    STORE_GAMES=64
    TRAIN_FLAGS=(--batch 64 --eval-every 10 --ckpt-every 10 --threads 1 --length-groups 2)
    TESTS=(tests/test_stage2.py -k "bf16")
else
    unset TRITON_INTERPRET
    GAMES=${GAMES:-1000000}; GPB=2048; GEN_STOP_S=${GEN_STOP_S:-300}; LOAD_S=${LOAD_S:-90}
    DEV=cuda
    GEN_FLAGS=(--backend triton --threads 4)
    STORE_GAMES=4096
    TRAIN_FLAGS=(--batch 4096 --eval-every 500 --ckpt-every 1000 --threads 8 --length-groups 2)
    TESTS=(-m "gpu or interpreter" tests)
fi
COMMON=(--n-samples 100 --oracle accurate --oracle-precision bf16 --device $DEV
        --pipeline fast --games-per-batch $GPB --quiet --profile)

preflight

# ---- the million games, alone on the GPU
left=$(( GEN_STOP_S - $(elapsed) ))
say "generate $GAMES games (stops at ${GEN_STOP_S} s: ${left} s)"
g0=$(date +%s.%N)
timeout -s TERM -k 10 $left $PY -m eqfast.cli.generate --out "$W/data" --games $GAMES \
    --seed-start 30000000000 "${COMMON[@]}" "${GEN_FLAGS[@]}" >> "$OUT/run.log" 2>&1
rc=$?
g1=$(date +%s.%N)
read -r ng nr < <(count_games "$W/data")
say "generate: exit $rc, $ng games ($nr records) in $(rate $ng $g0 $g1) (start-up and graph capture included); $(du -sm "$W/data" | cut -f1) MB"
f=$(ls "$W/data/test/"*.safetensors 2>/dev/null | head -1)
[ -n "$f" ] && cp "$f" "$OUT/test.safetensors" && cp "${f%.safetensors}.json" "$OUT/test.json"

# ---- stored worlds: the relabeller's input, its speed and size
s0=$(date +%s.%N)
timeout -k 10 60 $PY -m eqfast.cli.generate --out "$W/stored" --games $STORE_GAMES \
    --seed-start 31000000000 --store-worlds "${COMMON[@]}" "${GEN_FLAGS[@]}" >> "$OUT/run.log" 2>&1
rc=$?
s1=$(date +%s.%N)
read -r sg sr < <(count_games "$W/stored")
bytes=$(du -sb "$W/stored" | cut -f1)
say "store-worlds: exit $rc, $sg games ($sr records) in $(rate $sg $s0 $s1); $bytes bytes, $( [ "${sr:-0}" -gt 0 ] && echo $(( bytes / sr )) ) bytes/record"

# ---- lane A: the Stage 2 on every generated game
budget=$(( DEADLINE - $(elapsed) - LOAD_S ))
say "train: lane A, time budget ${budget} s; lane B (tests, sanitizer, ncu) beside it"
(
    $PY -m eqfast.cli.train_stage2 --data "$W/data" --run "$W/run" --device $DEV --precision bf16 \
        --d-model 128 --layers 4 --heads 4 --d-ff 256 --seen-tiles 2 --loss nll --centered-weight 1 \
        --lr 2e-3 --warmup 300 --steps 1000000 --time-budget $budget --quiet "${TRAIN_FLAGS[@]}" \
        > "$W/train.log" 2>&1
    echo "train exit $?" >> "$W/train.log"
) &
A=$!

# ---- lane B: correctness on the device
(
    left=$(( DEADLINE - $(elapsed) - 5 ))
    timeout -k 5 $left $PY -m pytest -q "${TESTS[@]}" -p no:cacheprovider --maxfail=20 -rfEs \
        > "$OUT/tests.log" 2>&1
    say "tests: exit $? ($(tail -1 "$OUT/tests.log"))"
    if [ $DRY = 0 ] && command -v compute-sanitizer >/dev/null; then
        left=$(( DEADLINE - $(elapsed) - 5 ))
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout -k 5 $left compute-sanitizer --tool memcheck \
            --error-exitcode 3 --print-limit 20 $PY -m pytest -q tests/test_kernel_advance.py \
            tests/test_kernel_public.py tests/test_kernel_sampling.py tests/test_kernel_tokenize.py \
            tests/test_kernel_moments.py tests/test_kernel_posterior.py -p no:cacheprovider -x \
            -k "not compiles" > "$OUT/sanitizer.log" 2>&1
        say "sanitizer: exit $? ($(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/sanitizer.log" | tail -2 | tr '\n' ' '))"
    fi
    if [ $DRY = 0 ] && command -v ncu >/dev/null; then
        left=$(( DEADLINE - $(elapsed) - 5 ))
        timeout -k 5 $left ncu --clock-control none --kernel-name regex:"_log_likelihood_kernel" \
            --launch-skip 1 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
            --section WarpStateStats $PY benchmarks/gpu_ncu_targets.py >> "$OUT/sanitizer.log" 2>&1
        say "ncu posterior: exit $?"
    fi
) &
B=$!

wait $A
say "train: $(grep -E 'train exit|final val|time budget|parameters' "$W/train.log" | tr '\n' ' ')"
cat "$W/train.log" >> "$OUT/run.log"
cp "$W/run/best.safetensors" "$W/run/history.jsonl" "$OUT/" 2>/dev/null
wait $B
say "end"
