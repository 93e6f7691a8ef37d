#!/usr/bin/env bash
# One run on a GPU machine that trains oracle networks on labels made on the same machine's CPUs.
#
#   bash benchmarks/gpu_train_oracle.sh            # on the GPU machine (results under $OUT)
#   bash benchmarks/gpu_train_oracle.sh --dry-run  # on a CPU: the same steps, tiny and short
#
# Timeline (seconds from the start, DEADLINE=530 by default):
#   0     install (pip -e ., the C solver must build: the labellers need it)
#   ~10   LABELLERS processes of `eqfast-label-oracle`, each its own directory
#         and deal range (worker w: deals 10,000,000 w + ...; fresh-deal evaluations use
#         deals >= 1,000,000,000), until the end; the GPU test suite beside them
#   ~30   the transformer trains (bf16, torch.compile, --follow: it reads the shards as
#         they come) until TRAIN_SPLIT = DEADLINE-170; if the compiled run fails it goes on
#         eagerly
#   TRAIN_SPLIT  two MLPs train side by side to MLP_END = DEADLINE-90: the shipped 256x2
#         fine-tuned from its weights, and a 512x3 from scratch
#   then  rows/s of every model on the GPU (fp32, bf16), and `eqfast-generate --oracle
#         accurate` on CUDA with the transformer's best weights installed as the accurate
#         oracle on that machine
# PLAN=accurate (the default) runs the labellers and the tests as above, but trains one
# model until MLP_END: the shipped accurate oracle (MLP 640x3) continued from its weights
# (--init) on fresh deals (labeller w: deals DEAL_BASE + 10,000,000 w + ..., DEAL_BASE
# 5,000,000 by default, past what its first training labelled), from when ACC_MIN_ROWS rows
# are labelled (2,000,000 by default, or a third of the deadline), at lr ACC_LR (2e-4).
# Why: at lr 1e-3 from 168K rows (2026-11-27) the pool was memorized within seconds (val
# q_gap 0.54 after 2,000 steps; the weights it began from have 0.38 on fresh deals) and
# the run ended worse (fresh q_gap 0.467); the wait and the lower rate are not yet measured.
# PLAN=explore compares architectures (a transformer, then two MLPs).
# Everything lands in $OUT as it comes (at most 8 files): log.txt, tests.log (with the
# diagnosis' lines when an engine comparison failed), results.jsonl (one line per training
# evaluation, throughput and labelling figure), and the weights of each run (and the transformer's
# checkpoint; resume: put a checkpoint back in its run dir, or start from weights with
# --init: the 640x3's checkpoint, with its optimizer state, is over the 16 MiB a file may
# bring back).
set -u
DEADLINE=${DEADLINE:-530}
PLAN=${PLAN:-accurate}
DRY=0
[ "${1:-}" = "--dry-run" ] && { DRY=1; DEADLINE=${DEADLINE_DRY:-200}; }
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
PY=${PY:-python3}
RES=${OUT:-runs/gpu_train_out}
WORK=${WORK:-/tmp/eqfast-train}
mkdir -p "$RES" "$WORK/lab" "$WORK/runs"
log() { echo "[$(elapsed) s] $*" | tee -a "$RES/log.txt"; }
export PYTHONUNBUFFERED=1

if [ $DRY = 1 ]; then
    DEVICE=cpu; LABELLERS=${LABELLERS:-1}; DEALS=20
    TRAIN_SPLIT=$(( DEADLINE - 120 )); MLP_END=$(( DEADLINE - 70 )); GEN=(--games 4 --n-samples 8)
    T_ARGS=(--d-model 16 --layers 1 --heads 2 --d-ff 32 --batch 64 --eval-every 50 --ckpt-every 50)
    M1_ARGS=(--batch 64 --eval-every 50); M2_ARGS=(--hidden 32 --depth 2 --batch 64 --eval-every 50)
    COMPILE=""; BATCHES=256,1024
else
    DEVICE=cuda; LABELLERS=${LABELLERS:-12}; DEALS=250
    TRAIN_SPLIT=$(( DEADLINE - 170 )); MLP_END=$(( DEADLINE - 90 )); GEN=(--games 64 --n-samples 100)
    T_ARGS=(--d-model 128 --layers 4 --heads 8 --d-ff 512 --batch 4096 --eval-every 1000
            --ckpt-every 1000 --precision bf16)
    M1_ARGS=(--batch 8192 --eval-every 2000); M2_ARGS=(--hidden 512 --depth 3 --batch 8192 --eval-every 2000)
    COMPILE=--compile; BATCHES=4096,16384,65536
fi

# ---------------------------------------------------------------- install
log "start: $(date -u +%FT%TZ) commit ${EQFAST_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
if [ $DRY = 0 ]; then
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >> "$RES/log.txt" 2>&1
    $PY -m pip install -q --no-build-isolation --no-deps --no-index -e . >> "$RES/log.txt" 2>&1 \
        || { log "install failed"; exit 1; }
fi
$PY -c "import eqfast.solver._csolver" 2>> "$RES/log.txt" || { log "the C solver did not build"; exit 1; }
$PY -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)" >> "$RES/log.txt"

# ---------------------------------------------------------------- labellers
if [ "$PLAN" = accurate ]; then DEAL_BASE=${DEAL_BASE:-5000000}; else DEAL_BASE=${DEAL_BASE:-0}; fi
DIRS=""
for w in $(seq 0 $(( LABELLERS - 1 ))); do
    d="$WORK/lab/w$(printf %02d $w)"
    DIRS="${DIRS:+$DIRS,}$d"
    $PY -m eqfast.cli.label_oracle --out "$d" --deal-offset $(( DEAL_BASE + w * 10000000 )) \
        --deals-per-shard $DEALS --shards 1000000 > "$d.log" 2>&1 &
done
log "$LABELLERS labellers started"

# ---------------------------------------------------------------- GPU tests beside them
if [ $DRY = 0 ]; then
    # the engine-against-reference comparisons first (on a failure, the stage-by-stage
    # diagnosis of benchmarks/gpu_engine_diagnose.py follows them), then the rest
    { timeout -k 5 60 $PY -m pytest -q tests/test_fast_engine.py tests/test_oracle_network.py \
          -p no:cacheprovider -rfE -k "network_oracle_and_posterior or graphs_on_equals or cuda_equals_cpu" \
          || timeout -k 5 90 $PY benchmarks/gpu_engine_diagnose.py --out "$WORK/diag.jsonl"
      timeout -k 5 170 $PY -m pytest -q -m "gpu or interpreter" tests -p no:cacheprovider \
          --maxfail=10 -rfEs; } > "$RES/tests.log" 2>&1 &
    TESTS_PID=$!
fi

labelled_rows() {  # rows written so far (the generator's log lines carry each shard's rows)
    cat "$WORK"/lab/w*.log 2>/dev/null | awk '/^shard/ {s += $3} END {print s + 0}'
}
record() { echo "$1" >> "$RES/results.jsonl"; }

until [ "$(ls "$WORK"/lab/w*/shard_*.safetensors 2>/dev/null | wc -l)" -ge $(( LABELLERS * 2 )) ]; do
    sleep 2
    (( $(elapsed) > 120 )) && { log "labellers too slow: $(tail -3 "$WORK/lab/w00.log")"; exit 1; }
done
log "labelled rows before training: $(labelled_rows)"

# ---------------------------------------------------------------- training
train() {  # name budget_s args...: train into $WORK/runs/name, until the budget is spent
    local name=$1 budget=$2; shift 2
    timeout -k 5 $(( budget + 90 )) $PY -m eqfast.cli.train_oracle --data "$DIRS" --run "$WORK/runs/$name" --device $DEVICE \
        --follow --reload-every 200 --steps 100000000 --time-budget "$budget" --val-rows 50000 \
        "$@" > "$WORK/runs/$name.log" 2>&1
}
publish_run() {  # name: copy its weights (and checkpoint) and history into $OUT
    local name=$1 src="$WORK/runs/$1"
    mkdir -p "$RES/$name"
    [ -f "$src/best.safetensors" ] && cp "$src/best.safetensors" "$RES/$name/"
    [ -n "${2:-}" ] && [ -f "$src/checkpoint.safetensors" ] && cp "$src/checkpoint.safetensors" "$RES/$name/"
    [ -f "$src/history.jsonl" ] && sed "s/^{/{\"run\": \"$name\", /" "$src/history.jsonl" >> "$RES/results.jsonl"
    { echo "--- $name (last lines)"; grep -v "^train-oracle" "$WORK/runs/$name.log" | tail -5
      grep "^train-oracle" "$WORK/runs/$name.log" | tail -2; } >> "$RES/log.txt"
}

if [ "$PLAN" = accurate ]; then
    ACC_MIN_ROWS=${ACC_MIN_ROWS:-$([ $DRY = 1 ] && echo 0 || echo 2000000)}
    until (( $(labelled_rows) >= ACC_MIN_ROWS || $(elapsed) > DEADLINE / 3 )); do sleep 2; done
    log "labelled rows when the accurate run starts: $(labelled_rows)"
    budget=$(( MLP_END - $(elapsed) ))
    if [ $DRY = 1 ]; then
        A_ARGS=(--hidden 32 --depth 2 --batch 64 --eval-every 50)    # a tiny stand-in
    else
        A_ARGS=(--hidden 640 --depth 3 --batch 8192 --eval-every 2000
                --init eqfast/models/accurate.safetensors)
    fi
    log "accurate (continued): ${budget} s"
    train accurate "$budget" --arch mlp --roles 1 --lr "${ACC_LR:-2e-4}" --warmup 200 "${A_ARGS[@]}"
    log "accurate: exit $?"
    publish_run accurate
else
budget=$(( TRAIN_SPLIT - $(elapsed) ))
log "transformer: ${budget} s $COMPILE"
train transformer "$budget" --arch transformer --roles 2 --lr 1e-3 --warmup 300 "${T_ARGS[@]}" $COMPILE
rc=$?
if [ $rc != 0 ] && [ -n "$COMPILE" ] && (( TRAIN_SPLIT - $(elapsed) > 60 )); then
    log "transformer with --compile failed (exit $rc): $(tail -2 "$WORK/runs/transformer.log"); eager"
    mv "$WORK/runs/transformer.log" "$WORK/runs/transformer-compile.log"
    budget=$(( TRAIN_SPLIT - $(elapsed) ))
    train transformer "$budget" --arch transformer --roles 2 --lr 1e-3 --warmup 300 "${T_ARGS[@]}"
    rc=$?
fi
log "transformer: exit $rc"
publish_run transformer checkpoint

budget=$(( MLP_END - $(elapsed) ))
log "mlps: ${budget} s each, side by side; labelled rows so far: $(labelled_rows)"
train mlp256-init "$budget" --arch mlp --init eqfast/models/default.safetensors --lr 5e-4 \
    --warmup 100 "${M1_ARGS[@]}" &
P1=$!
train mlp512 "$budget" --arch mlp --roles 1 --lr 2e-3 --warmup 300 "${M2_ARGS[@]}" &
P2=$!
wait $P1; log "mlp256-init: exit $?"
wait $P2; log "mlp512: exit $?"
publish_run mlp256-init
publish_run mlp512
fi

kill $(jobs -p) 2>/dev/null   # labellers (and tests, if still running)
sleep 1
rows=$(labelled_rows)
record "{\"what\": \"labelling\", \"labellers\": $LABELLERS, \"rows\": $rows, \"seconds\": $(elapsed)}"
log "labellers stopped: $rows rows"
[ $DRY = 0 ] && { grep -E "passed|failed|error" "$RES/tests.log" | tail -3 | sed 's/^/tests: /' >> "$RES/log.txt"; }

# ---------------------------------------------------------------- throughput and the engine
specs=default,accurate
for name in accurate transformer mlp256-init mlp512; do
    [ -f "$WORK/runs/$name/best.safetensors" ] && specs="$specs,$WORK/runs/$name/best.safetensors"
done
timeout -k 5 40 $PY benchmarks/gpu_oracle_throughput.py --oracles "$specs" --data "$WORK/lab/w00" \
    --device $DEVICE --batches $BATCHES --out "$RES/results.jsonl" >> "$RES/log.txt" 2>&1
log "throughput: exit $?"
newest=$([ "$PLAN" = accurate ] && echo accurate || echo transformer)
if [ -f "$WORK/runs/$newest/best.safetensors" ]; then
    # on the device (a disposable copy of the tree) the new weights become `accurate`, so the
    # command runs the name's own path; a dry run leaves the shipped file alone
    spec="$WORK/runs/$newest/best.safetensors"
    if [ $DRY = 0 ]; then cp "$spec" eqfast/models/accurate.safetensors; spec=accurate; fi
    left=$(( DEADLINE - $(elapsed) )); (( left < 15 )) && left=15
    timeout -k 5 $left $PY -m eqfast.cli.generate --oracle "$spec" --device $DEVICE "${GEN[@]}" \
        --out "$WORK/gen" --quiet --profile >> "$RES/log.txt" 2>&1
    log "eqfast-generate --oracle $spec --device $DEVICE: exit $?"
fi
log "end"
