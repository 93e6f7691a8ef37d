"""Stage 2: the model that plays from public information alone, trained on eqfast records.

model.py    the transformer over the transcript tokens (μ and log σ² per current-hand slot)
weights.py  safetensors weights files with their config and data card; `load_stage2`
train.py    the deterministic, resumable trainer (eqfast-train-stage2)
evaluate.py μ error, argmax agreement, regret, σ calibration, speed (eqfast-eval-stage2)
policy.py   `stage2_slots`: the move of the acting seat of every game of a BatchedGames
behaviour.py `window_values`: the model as the posterior's behaviour model (each past play's
            E[Q] from its player's information set, in every sampled world)

See docs/STAGE2.md.
"""
from .model import DEFAULT_CONFIG, Stage2Model, build_model
from .weights import DEFAULT_STAGE2, Stage2WeightsError, load_stage2, load_stage2_with_meta

__all__ = ["DEFAULT_CONFIG", "Stage2Model", "build_model", "DEFAULT_STAGE2",
           "Stage2WeightsError", "load_stage2", "load_stage2_with_meta"]
