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
from .defaults import DEFAULT_CONFIG

#: the package's names and the modules that define them, imported when first asked for
#: (PEP 562), so that `eqfast.stage2.defaults` (a command's --help) does not import torch
_LAZY = {"Stage2Model": "model", "build_model": "model", "DEFAULT_STAGE2": "weights",
         "Stage2WeightsError": "weights", "load_stage2": "weights",
         "load_stage2_with_meta": "weights"}


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_CONFIG", "Stage2Model", "build_model", "DEFAULT_STAGE2",
           "Stage2WeightsError", "load_stage2", "load_stage2_with_meta"]
