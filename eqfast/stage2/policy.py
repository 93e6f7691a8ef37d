"""The Stage 2 model as a player: the move of the acting seat of every game of a batch.

`stage2_slots(model, games)` builds the acting seat's transcript tokens
(`eqfast.engine.transcript.transcript_tokens`: the declaration, the seat's own current
hand, every play so far, nothing hidden), runs one forward, takes the argmax of μ over the
legal moves (ties: the lowest current-hand slot) and maps that current-hand slot back to
the slot of the seat's initial hand that `BatchedGames.play` takes
(`current_hand_order`). The legal moves come from the seat's own hand and the led suit,
both public to it. So the decision depends on public information only
(tests/test_stage2.py swaps the hidden hands and checks it).
"""
from __future__ import annotations

import torch

from ..engine.transcript import current_hand_order, transcript_tokens
from .model import trim_tokens


def current_legal(games, slot_of_pos: torch.Tensor | None = None) -> torch.Tensor:
    """Legal moves [B, 7] of the acting seat in current-hand order (hand token 1 + i)."""
    if slot_of_pos is None:
        slot_of_pos = current_hand_order(games)
    legal = games.legal_mask().gather(1, slot_of_pos.clamp(min=0))
    return legal & (slot_of_pos >= 0)


@torch.no_grad()
def stage2_mu(model, games) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mu [B, 7] points in current-hand order, legal [B, 7] in the same order,
    slot_of_pos [B, 7]: the initial-hand slot of each current-hand position, -1 padded)."""
    tokens, lengths = transcript_tokens(games)
    mu, _ = model(trim_tokens(tokens, lengths).long(), lengths)
    slot_of_pos = current_hand_order(games)
    return mu, current_legal(games, slot_of_pos), slot_of_pos


@torch.no_grad()
def stage2_slots(model, games) -> torch.Tensor:
    """Initial-hand slot [B] int64 the acting seat of each game plays (argmax μ over its
    legal moves); 0 for finished games, which `BatchedGames.play` leaves as they are.

    `model` is a Stage2Model (eval mode), its TorchScript, or anything with the same
    call (tokens int64 [B, T, 8] cut to the longest length, 8 <= T <= 36, lengths [B]) ->
    (mu, log_var), on `games.device`."""
    mu, legal, slot_of_pos = stage2_mu(model, games)
    masked = torch.where(legal, mu.float(), torch.full_like(mu, float("-inf"), dtype=torch.float32))
    choice = masked.argmax(1)                                   # first maximum: lowest slot
    slot = slot_of_pos.gather(1, choice[:, None])[:, 0]
    return torch.where(legal.any(1) & (slot >= 0), slot, torch.zeros_like(slot))


class Stage2Play:
    """A Stage 2 model as the engine's play policy (`Engine(play_policy=)`,
    `eqfast-generate --play-policy stage2[:PATH]`): the moves of the transcripts come from
    the model while the engine labels every decision as usual. `choose(games)` gives the
    model's μ in the actor's initial-hand slots (the engine's slot space; 0 at slots no
    longer held) and the slot `stage2_slots` plays, so with exploration off the games are
    exactly those of the `stage2` player of eqfast-arena."""

    def __init__(self, model, device="cpu"):
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()

    @torch.no_grad()
    def choose(self, games, seeds=None, decision=None) -> tuple[torch.Tensor, torch.Tensor]:
        mu, legal, slot_of_pos = stage2_mu(self.model, games)
        values = torch.zeros(mu.shape[0], 8, dtype=torch.float32, device=mu.device)
        values.scatter_(1, torch.where(slot_of_pos >= 0, slot_of_pos, 7), mu.float())
        masked = torch.where(legal, mu.float(), torch.full_like(mu, float("-inf"),
                                                                dtype=torch.float32))
        slot = slot_of_pos.gather(1, masked.argmax(1)[:, None])[:, 0]
        return values[:, :7], slot


class ArenaPlay:
    """Any non-cheating player of eqfast-arena (eqfast/play/policies.py: `expert`,
    `rules`, `eq:...`, `endgame:...`, `split:...`, `search:...`, `random`) as the engine's
    play policy (`eqfast-generate --play-policy SPEC`): the transcripts are its games while
    the engine labels every decision as usual. The engine hands it the games' seeds and the
    decision, so its own draws are keyed as in the arena. It gives no values of its own:
    `choose` gives 1 at the slot it plays and 0 at the others, so epsilon and blunders pick
    among the other legal moves (a blunder's regret is 1 on that scale: any
    `--blunder-max-regret` of 1 or more lets every other legal move be one)."""

    def __init__(self, policy):
        self.policy = policy

    @torch.no_grad()
    def choose(self, games, seeds=None, decision=None) -> tuple[torch.Tensor, torch.Tensor]:
        slot = self.policy.decide(games, seeds, decision).to(games.device)
        values = torch.zeros(games.batch_size, 7, dtype=torch.float32, device=games.device)
        values.scatter_(1, slot[:, None], 1.0)
        return values, slot


def play_policy_from_spec(spec: str, device="cpu", run_seed: int = 0, threads: int = 1):
    """(play policy, identity) of an `eqfast-generate --play-policy` spec: 'stage2' (the
    shipped model) or 'stage2:PATH' (its μ are the values exploration acts on), or any
    other non-cheating eqfast-arena spec ('expert', 'endgame:5', ...; `ArenaPlay`). The
    identity's SHA-256 covers what the moves depend on, so a changed player is a changed
    setting: the weights file for stage2; the source of `expert`; for the others the spec,
    the player's own identity (its weights files) and the source of the module that
    defines it. ValueError naming the problem."""
    import hashlib
    import inspect
    from pathlib import Path

    from .weights import load_stage2, stage2_weights

    if spec == "stage2" or spec.startswith("stage2:"):
        path = stage2_weights(spec[len("stage2:"):])
        if not path.is_file():
            raise ValueError(f"{spec}: no such Stage 2 weights file {path}")
        model = load_stage2(path)
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        return Stage2Play(model, device), {"name": spec, "path": str(path), "sha256": sha}
    from ..play.policies import policy_from_spec

    try:
        policy = policy_from_spec(spec, run_seed=run_seed, device=device, threads=threads)
    except ValueError as e:
        raise ValueError(f"unknown play policy or bad argument: {e} (stage2[:PATH] or a "
                         "player of eqfast-arena)") from None
    if policy.cheating:
        raise ValueError(f"{spec!r} looks at the hidden hands: the transcripts must be "
                         "played from each seat's own information")
    source = Path(inspect.getsourcefile(type(policy)))
    if spec == "expert":        # as written since --play-policy expert exists (resumable)
        sha = hashlib.sha256(source.read_bytes()).hexdigest()
    else:
        own = (getattr(policy, "identity", None) or {}).get("sha256", "")
        sha = hashlib.sha256(f"{spec}|{own}|".encode() + source.read_bytes()).hexdigest()
    return ArenaPlay(policy), {"name": spec, "path": str(source), "sha256": sha}
