# Shared by the one-lease GPU scripts (gpu_volume.sh, gpu_rollout.sh); source it after
# setting DRY (1 = the CPU dry run), DEADLINE, OUT and PY and defining say().

# The start line, then: nvidia-smi, the python/torch/triton versions (CUDA required unless
# DRY), and the no-index install; run.log gets their output, and any failure ends the script.
preflight() {
    say "start $(date -u +%Y-%m-%dT%H:%M:%SZ) commit ${EQFAST_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)} dry-run $DRY deadline $DEADLINE"
    if [ $DRY = 0 ]; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$OUT/run.log" 2>&1 \
            || { say "no GPU: nvidia-smi failed"; exit 1; }
    fi
    $PY -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available()); assert $DRY or torch.cuda.is_available()" \
        >> "$OUT/run.log" 2>&1 || { say "preflight failed"; cat "$OUT/run.log"; exit 1; }
    if [ $DRY = 0 ]; then
        $PY -m pip install -q --no-build-isolation --no-deps --no-index -e . >> "$OUT/run.log" 2>&1 \
            || { say "install failed"; tail -20 "$OUT/run.log"; exit 1; }
    fi
    say "preflight ok: $(tail -1 "$OUT/run.log")"
}

# "GAMES RECORDS" written to an eqfast-generate directory (every split).
count_games() {
    $PY - "$1" <<'PYEOF'
import json, sys
from pathlib import Path
batches, recs = set(), 0
for p in Path(sys.argv[1]).glob("*/shard_*.json"):
    s = json.loads(p.read_text())["shard"]
    batches.add((s["seed_lo"], s["seed_hi"]))
    recs += s["n_records"]
print(sum(hi - lo + 1 for lo, hi in batches), recs)
PYEOF
}

# "SECONDS s: RATE games/s" of N games between the times A and B (date +%s.%N).
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.1f s: %.1f games/s", b - a, n / (b - a) }'; }
