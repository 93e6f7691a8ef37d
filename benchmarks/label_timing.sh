#!/usr/bin/env bash
# games/s of the label configurations of benchmarks/label_frontier.py, side by side on one
# machine: two rounds, each configuration on 1 and 2 threads (24 fresh games each).
set -eu
C="--games 24 --seed-start 880000000 --games-per-batch 24 --pipeline reference --quiet"
for rep in 1 2; do
for cfg in "network|--oracle default --n-samples 100" "exact-n100|--oracle exact --n-samples 100" "exact-n50|--oracle exact --n-samples 50" "exact-by-trick|--oracle exact --n-by-trick 25,50,100,100,100,100,100" "exact-sem|--oracle exact --n-samples 25 --sem 1.0 --max-samples 100"; do
  name=${cfg%%|*}; flags=${cfg#*|}
  for t in 1 2; do
    rm -rf "${TMPDIR:-/tmp}/tm"; g=$(python -m eqfast.cli.generate --out "${TMPDIR:-/tmp}/tm" $C $flags --threads $t | tail -1 | python -c "import sys,json; print(json.load(sys.stdin)['games_per_s'])")
    echo "$rep $name threads=$t $g"
  done
done; done
