#!/usr/bin/env bash
# Does label fidelity show in play? The same game seeds labelled two ways, the same Stage 2
# recipe trained on each, then both models judged on the better labels and in the arena.
#
#   A: the CPU default labels (exact solver, budgets 25,50,100,..., the shipped network as
#      control variate on 400 worlds): unbiased, total RMSE ~1.4 points
#   B: the shipped network alone, N = 100: total RMSE ~3.0 points, most of it bias
#
# Steps can be run one at a time (STEP=data-a|data-b|train|eval|h2h|arena); each writes under
# OUT (default runs/s2cv). GAMES games (default 10000), STEPS optimizer steps of 256 records
# for each model (default 4000; steps, not seconds, so the machine's load cannot favour
# either), HANDS arena hands per pair
# (default 2000) between the two models, the shipped Stage 2 model (83,000 network-label
# games) and the rules player.
set -eu
OUT=${OUT:-runs/s2cv}
GAMES=${GAMES:-10000}
STEPS=${STEPS:-4000}
HANDS=${HANDS:-2000}
STEP=${STEP:-all}
SEED=${SEED:-0}                 # training seed; models of SEED > 0 go to model_DATA_sSEED
suffix=$([ "$SEED" = 0 ] || echo "_s$SEED")
mkdir -p "$OUT"

step() { [ "$STEP" = all ] || [ "$STEP" = "$1" ]; }

if step data-a; then
  eqfast-generate --out "$OUT/exact_cv" --games "$GAMES" --games-per-batch 100 --threads 1 --quiet
fi
if step data-b; then
  eqfast-generate --out "$OUT/network" --games "$GAMES" --games-per-batch 100 \
    --oracle default --n-samples 100 --threads 1 --quiet
fi
if step train; then
  # the shipped model's recipe (docs/STAGE2.md) for STEPS steps; DATA=exact_cv or network
  # trains one of the two
  for data in ${DATA:-exact_cv network}; do
    python -m eqfast.cli.train_stage2 --data "$OUT/$data" --run "$OUT/model_$data$suffix" --seed "$SEED" \
      --loss nll --centered-weight 1 --lr 2e-3 --warmup 300 --steps "$STEPS" \
      --eval-every 500 --val-rows 10000 --threads 1 --quiet \
      > "$OUT/train_$data$suffix.log" 2>&1 &
  done
  wait
fi
if step eval; then
  # both models on the test split of A (the better labels) and of B
  for data in exact_cv network; do
    for model in exact_cv network; do
      echo "model $model on $data test:"
      python -m eqfast.cli.eval_stage2 --weights "$OUT/model_$model/best.safetensors" \
        --data "$OUT/$data" --split test --json | tail -1
    done
  done | tee "$OUT/eval.txt"
fi
if step h2h; then
  # the two models of SEED head to head on 5,000 more fresh deals
  eqfast-arena --policies "stage2:$OUT/model_exact_cv$suffix/best.safetensors,stage2:$OUT/model_network$suffix/best.safetensors" \
    --hands 10000 --seed-start 2000000 --threads 1 --quiet --out "$OUT/arena_h2h$suffix.json" \
    | tee "$OUT/arena_h2h$suffix.txt"
fi
if step arena; then
  eqfast-arena --policies "stage2:$OUT/model_exact_cv/best.safetensors,stage2:$OUT/model_network/best.safetensors,stage2,rules" \
    --hands "$HANDS" --seed-start 1000000 --threads 1 --quiet --out "$OUT/arena.json" \
    | tee "$OUT/arena.txt"      # deals from seed 1,000,000: none of them was trained on
fi
