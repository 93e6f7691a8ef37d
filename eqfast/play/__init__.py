"""Playing strength: policies that choose a move for the acting seat of many games at once
(policies.py), the duplicate arena that plays them against each other (arena.py) and the
league that rates a panel of them on one scale (league.py); the command is eqfast-arena
(eqfast/cli/arena.py), the results docs/PLAY.md."""
from .arena import MatchResult, play_match, round_robin
from .policies import POLICIES, Policy, policy_from_spec

__all__ = ["POLICIES", "Policy", "policy_from_spec", "MatchResult", "play_match", "round_robin"]
