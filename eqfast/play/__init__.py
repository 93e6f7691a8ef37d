"""Playing strength: policies that choose a move for the acting seat of many games at once
(policies.py), the duplicate arena that plays them against each other (arena.py) and the
league that rates a panel of them on one scale (league.py); the command is eqfast-arena
(eqfast/cli/arena.py), the results docs/PLAY.md."""
#: the package's names and the modules that define them, imported when first asked for
#: (PEP 562), so that `eqfast.play.names` (eqfast-arena --help) does not import torch
_LAZY = {"MatchResult": "arena", "play_match": "arena", "round_robin": "arena",
         "POLICIES": "policies", "Policy": "policies", "policy_from_spec": "policies"}


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["POLICIES", "Policy", "policy_from_spec", "MatchResult", "play_match", "round_robin"]
