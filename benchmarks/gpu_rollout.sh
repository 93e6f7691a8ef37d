#!/usr/bin/env bash
# Rollout labels at GPU volume, in one lease: the shipped transformer (`stage2_soup`, the
# early part of the shipped `stage2`) plays games (epsilon 0.05) while `rollout:1` labels
# them on the GPU (each move valued by the hand played on by that model at every seat to
# the actor's next turn, 16 uniform worlds: the labels of the improvement loop,
# docs/STAGE2.md "Rollout labels"), then three transformers train on them side by side on
# the same GPU, and the weights come back for matches on the CPU.
#
# Usage (repository root, on the GPU machine; its python3 holds CUDA torch):
#   OUT=$OUT bash benchmarks/gpu_rollout.sh          # deadline 540 s (DEADLINE_S)
#   bash benchmarks/gpu_rollout.sh --dry-run         # the same steps, tiny, on a CPU (60 s)
#
# Timeline (seconds from the start; the generation stops at GEN_STOP_S whatever it reached,
# each shard of GPB games saved as it completes; the training lanes get what is left
# before the deadline less LOAD_S for reading the records):
#   0    preflight, install
#   ~20  eqfast-generate --oracle rollout:1:SOUP --n-samples 16 --play-policy stage2:SOUP
#        --epsilon 0.05 --device cuda --pipeline reference: games/s of rollout labels on
#        the GPU (SOUP = eqfast/models/stage2_soup.safetensors)
#   then two training lanes side by side on every game generated:
#     A  d_model 128, 4 layers, feed-forward 256 (4.4x the shipped parameters), from
#        scratch, bf16, batch 4,096, lr 2e-3 (the recipe of docs/STAGE2.md "A million GPU
#        games")
#     B  the shipped size from the shipped weights (--init), the replay rounds' recipe
#        (lr 5e-4) at batch 1,024
#     C  the shipped weights grown to 6 layers (--init with more --layers: the added
#        layers start as the identity), lane B's recipe
# Results in $OUT: steps.txt run.log big.safetensors big.jsonl init.safetensors init.jsonl
# deep.safetensors deep.jsonl
# and the first four shards of the test split of the generated data (test/).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_lib.sh

DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
SOUP=eqfast/models/stage2_soup.safetensors
DEADLINE=${DEADLINE_S:-540}
[ $DRY = 1 ] && DEADLINE=${DEADLINE_S:-60}
OUT=${OUT:-runs/gpu_rollout}
W=${EQFAST_ROLLOUT_DIR:-/tmp/eqfast-rollout}
PY=${PYTHON:-python3}
# scratch: a run left there (an earlier try on this machine) would be resumed with other
# settings and refused, so each run starts it empty
rm -rf "$W"
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
say() { echo "[$(elapsed) s] $*" | tee -a "$OUT/steps.txt"; }

if [ $DRY = 1 ]; then
    GAMES=${GAMES:-16}; GPB=8; GEN_STOP_S=${GEN_STOP_S:-120}; LOAD_S=10; DEV=cpu
    A_FLAGS=(--batch 64 --eval-every 10 --ckpt-every 10 --threads 1)
    B_FLAGS=(--batch 64 --eval-every 10 --ckpt-every 10 --threads 1)
else
    GAMES=${GAMES:-400000}; GPB=${GPB:-2048}; GEN_STOP_S=${GEN_STOP_S:-280}
    LOAD_S=${LOAD_S:-30}; DEV=cuda
    A_FLAGS=(--batch 4096 --eval-every 500 --ckpt-every 1000 --threads 4)
    B_FLAGS=(--batch 1024 --eval-every 500 --ckpt-every 1000 --threads 4)
fi
RECIPE=(--seen-tiles 2 --loss nll --centered-weight 1 --precision bf16 --length-groups 2
        --steps 1000000 --quiet)

preflight

# ---- the rollout labels, alone on the GPU
left=$(( GEN_STOP_S - $(elapsed) ))
say "generate: up to $GAMES games of rollout:1 labels, $GPB a batch (stops at ${GEN_STOP_S} s: ${left} s)"
generate() {    # $1: the device stages' backend (auto: Triton kernels on CUDA)
    timeout -s TERM -k 15 $(( GEN_STOP_S - $(elapsed) )) $PY -m eqfast.cli.generate \
        --out "$W/data" --games $GAMES --seed-start 32000000000 --games-per-batch $GPB \
        --device $DEV --backend $1 --pipeline reference --oracle rollout:1:$SOUP \
        --n-samples 16 --play-policy stage2:$SOUP --epsilon 0.05 --quiet >> "$OUT/run.log" 2>&1
}
g0=$(date +%s.%N)
generate auto
rc=$?
if [ $rc != 0 ] && [ $rc != 124 ] && [ $(elapsed) -lt 90 ]; then
    # a failure at start-up (not the deadline's TERM): the pure-PyTorch stages instead
    say "generate: exit $rc with the Triton backend ($(tail -1 "$OUT/run.log")); again with --backend reference"
    rm -rf "$W/data"
    g0=$(date +%s.%N)
    generate reference
    rc=$?
fi
g1=$(date +%s.%N)
read -r ng nr < <(count_games "$W/data")
say "generate: exit $rc, $ng games ($nr records) in $(rate $ng $g0 $g1) (start-up and the last, unfinished batch included); $(du -sm "$W/data" | cut -f1) MB"
mkdir -p "$OUT/test"      # the first four test shards: a held-out set for the CPU
for f in $(ls "$W/data/test/"shard_*.safetensors 2>/dev/null | head -4); do
    cp "$f" "${f%.safetensors}.json" "$OUT/test/"
done
[ "${ng:-0}" -gt 0 ] || { say "no games: nothing to train"; exit 1; }

# ---- two training lanes side by side on the same records
budget=$(( DEADLINE - $(elapsed) - LOAD_S ))
say "train: lanes A (big, from scratch), B (shipped size, from the shipped weights) and C (the shipped weights grown to 6 layers), ${budget} s each"
lane() {    # $1: the lane's name (run directory, log, result files); the rest: its flags
    local name=$1
    shift
    $PY -m eqfast.cli.train_stage2 --data "$W/data" --run "$W/$name" --device $DEV \
        --warmup 300 --time-budget $budget "${RECIPE[@]}" "$@" > "$W/$name.log" 2>&1
    echo "train exit $?" >> "$W/$name.log"
}
lane big --d-model 128 --layers 4 --heads 4 --d-ff 256 --lr 2e-3 "${A_FLAGS[@]}" &
A=$!
SHIPPED=(--init $SOUP --d-model 64 --heads 4 --d-ff 128 --lr 5e-4)
lane init "${SHIPPED[@]}" --layers 3 "${B_FLAGS[@]}" &
B=$!
lane deep "${SHIPPED[@]}" --layers 6 "${B_FLAGS[@]}" &      # lane B's flags
C=$!
wait $A $B $C
for lane in big init deep; do
    say "train $lane: $(grep -E 'train exit|final|budget|parameters|steps' "$W/$lane.log" | tail -4 | tr '\n' ' ')"
    cat "$W/$lane.log" >> "$OUT/run.log"
    cp "$W/$lane/best.safetensors" "$OUT/$lane.safetensors" 2>/dev/null
    cp "$W/$lane/history.jsonl" "$OUT/$lane.jsonl" 2>/dev/null
done
say "end"
