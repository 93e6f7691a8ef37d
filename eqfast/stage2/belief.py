"""The belief model: Stage 2 as the oracle's network read on what the actor believes.

The oracle's embedding-sum network (`EmbSumMLP`, eqfast/oracle/network.py) values a
perfect-information position from one code per tile: (declaration, tile, status), the
status saying where the tile is (in relative seat r's hand, at position p of the current
trick, or gone). Its first layer is a sum of one embedding row per tile. The acting player
knows every tile's status except the hidden tiles' holder; for those it knows, from the
transcript, the chance that each other seat holds each one over the deals consistent with
its information, all equally likely (`holder_marginals`, the same uniform worlds the engine
samples). The belief model gives the first layer each of a hidden tile's three possible
codes weighted by those chances, so its first layer is the expected first layer of the
oracle over those worlds, exactly (a sum is linear; tests/test_belief.py checks it against
every consistent deal of late positions), then the oracle's hidden layers and 28-wide head,
read at the actor's hand tiles.

Why: the transcript transformer (model.py) has to learn from the plays who may hold what
and what a tile is worth under the contract; this model starts from a network that already
values positions (the shipped oracle, `init_from_oracle`) and from the exact beliefs, so
what it learns is the rest. Read straight from the shipped oracle, untrained, it plays
late in the hand better than the shipped transformer (docs/STAGE2.md, "The belief model in
play"). Its forward costs what the transformer's does or less: at 1,024 decisions of trick
5, 164 ms at the accurate oracle's size against the transformer's 412 ms (one thread of
the 2-core VM, beside the test suite); most of it is the holder chances.

`forward(tokens, lengths) -> (mu [B, 7], log_var [B, 7])`: the transformer's call, so the
trainer, the evaluation, the players, the averaging and the behaviour model take either
(config key "arch": "belief"; the transformer's configs have no "arch").
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..oracle.network import N_ROLES, tile_roles
from ..oracle.tokenizer import N_CODES, N_STATUS, STATUS_GONE
from ..rules.tables import FOLLOWS, HAND_SIZE, LED_SUIT, N_SEATS, N_TILES
from .model import (FEATURE_SIZES, Q_SCALE, holder_marginals, seen_matrix, token_features,
                    void_matrix)

#: config keys of a belief model and their ranges (model.check_config dispatches here)
BELIEF_RANGES = {"hidden": (8, 4096), "depth": (0, 8), "roles": (0, 1), "var_head": (0, 1)}
BELIEF_DEFAULT = {"arch": "belief", "hidden": 256, "depth": 2, "roles": 1, "var_head": 0}


class BeliefModel(nn.Module):
    """`forward(tokens, lengths) -> (mu, log_var)` (module docstring). The layers are the
    oracle's `EmbSumMLP` (hidden, depth, roles), named as there, so an oracle's file loads
    into them (`init_from_oracle`); var_head 1 adds a 28-wide head for log σ²."""

    def __init__(self, hidden: int = 256, depth: int = 2, roles: int = 1, var_head: int = 0):
        super().__init__()
        self.q_scale = Q_SCALE
        self.var_head = int(var_head)
        self.roles = int(roles)
        self.log_var_shift = 2.0 * math.log(Q_SCALE)
        # sizes as attributes: TorchScript reads no module-level constant
        self.n_seats, self.n_tiles, self.hand_size = N_SEATS, N_TILES, HAND_SIZE
        self.status_gone, self.n_status = STATUS_GONE, N_STATUS
        self.embed = nn.EmbeddingBag(N_CODES, hidden, mode="sum")
        # (role, status) codes: what a tile is under the contract, shared by the contracts
        # (tile_roles); one row when roles is 0, weighted 0
        self.role_embed = nn.EmbeddingBag(N_ROLES * N_STATUS if roles else 1, hidden,
                                          mode="sum")
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(depth)])
        self.head = nn.Linear(hidden, N_TILES)
        self.var = nn.ModuleList([nn.Linear(hidden, N_TILES)] if var_head else [])
        self.register_buffer("role_of", tile_roles(), persistent=False)
        self.register_buffer("feature_max", torch.tensor(FEATURE_SIZES, dtype=torch.int64) - 1,
                             persistent=False)
        self.register_buffer("led_suit", torch.as_tensor(LED_SUIT, dtype=torch.int64),
                             persistent=False)
        self.register_buffer("follows", torch.as_tensor(FOLLOWS, dtype=torch.bool),
                             persistent=False)
        with torch.no_grad():  # a sum of 28 rows: keep its scale near a Linear's (as EmbSumMLP)
            self.embed.weight.normal_(0.0, 1.0 / N_TILES ** 0.5)
            self.role_embed.weight.normal_(0.0, 1.0 / N_TILES ** 0.5)
            for head in self.var:
                head.weight.zero_()
                head.bias.zero_()

    def inputs(self, tokens: torch.Tensor, lengths: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(declaration [B], status [B, 28, 3] int64, weight [B, 28, 3] float, hand tiles
        [B, 7] int64) of the decisions' transcript tokens [B, T, 8] (any T from 8, as the
        transformer takes them).

        Per tile, up to three candidate oracle statuses (tokenizer.py: 0..3 the hand of
        relative seat r, 4 + k(k - 1)/2 + p position p of a current trick of k tiles, 10 gone)
        and their chances: a tile in the actor's hand, in the current trick or played earlier
        has its one status with weight 1; a hidden tile has statuses 1, 2, 3 weighted by the
        chance that that seat holds it (`holder_marginals`). Hand tiles past the hand size
        are 0 (their outputs mean nothing; callers mask them with the legal moves)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        live, f, tile = token_features(tokens, lengths, self.feature_max)
        seen = seen_matrix(f, tile, self.n_seats, self.n_tiles)
        voids = void_matrix(f, tile, live, self.led_suit, self.follows)
        decl = f[:, 0, 6]
        hold = holder_marginals(seen, voids, decl, self.follows, self.n_seats, self.n_tiles,
                                self.hand_size)
        b = tokens.shape[0]
        seen = seen.view(b, self.n_seats + 1, self.n_tiles)
        hold = hold.view(b, self.n_seats - 1, self.n_tiles)
        # the current trick: the last (plays mod 4) plays; the play of relative seat r sits at
        # position p = (r + k) mod 4 of a trick of k tiles (the actor, who has not played, is k)
        is_play = f[..., 7] == 2
        n_plays = is_play.sum(1)
        k = n_plays % self.n_seats
        first = 1 + (f[..., 7] == 1).sum(1) + n_plays - k
        in_trick = is_play & (positions[None, :] >= first[:, None])
        trick_status = (4 + k[:, None] * (k[:, None] - 1) // 2
                        + (f[..., 4] + k[:, None]) % self.n_seats)
        known = torch.full((b, self.n_tiles + 1), self.status_gone, dtype=torch.int64,
                           device=tokens.device)
        dump = torch.full_like(tile, self.n_tiles)
        # column 28 takes the tokens that are not current-trick plays, then is dropped
        known.scatter_(1, torch.where(in_trick, tile, dump), trick_status)
        known = known[:, :self.n_tiles]
        known = torch.where(seen[:, self.n_seats] > 0, torch.zeros_like(known), known)
        hidden = seen.sum(1) == 0                                             # [B, 28]
        # three candidates a tile: a hidden tile's holders 1, 2, 3; a known tile's status
        # three times, weighted 1, 0, 0
        cand = torch.arange(1, self.n_seats, device=tokens.device)[None, None, :]
        shape = (b, self.n_tiles, self.n_seats - 1)
        status = torch.where(hidden[..., None], cand.expand(shape), known[..., None].expand(shape))
        weight = torch.where(hidden[..., None], hold.transpose(1, 2),
                             (cand == 1).to(hold.dtype).expand(shape))
        hand = torch.where(f[:, 1:1 + self.hand_size, 7] == 1, tile[:, 1:1 + self.hand_size],
                           torch.zeros_like(tile[:, 1:1 + self.hand_size]))
        return decl, status, weight, hand

    def first_layer(self, tokens: torch.Tensor, lengths: torch.Tensor):
        """(pre-activation of the first layer [B, hidden], hand tiles [B, 7])."""
        decl, status, weight, hand = self.inputs(tokens, lengths)
        b = tokens.shape[0]
        tile_of = decl[:, None] * self.n_tiles + torch.arange(self.n_tiles, device=tokens.device)
        codes = (tile_of[..., None] * self.n_status + status).view(b, -1)
        w = weight.reshape(b, -1).to(self.bias.dtype)
        h = self.embed(codes, per_sample_weights=w) + self.bias
        if self.roles > 0:
            roles = (self.role_of[tile_of][..., None] * self.n_status + status).view(b, -1)
            h = h + self.role_embed(roles, per_sample_weights=w)
        return h, hand

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor):
        h, hand = self.first_layer(tokens, lengths)
        x = torch.relu(h)
        for layer in self.layers:
            x = torch.relu(layer(x))
        mu = self.head(x).gather(1, hand) * self.q_scale
        log_var = torch.zeros_like(mu)
        for head in self.var:
            log_var = head(x).gather(1, hand) + self.log_var_shift
        return mu, log_var


def check_belief_config(config: dict) -> dict:
    """The belief config with int values; ValueError naming the key for anything else."""
    config = {**BELIEF_DEFAULT, **config}
    unknown = sorted(set(config) - set(BELIEF_RANGES) - {"arch"})
    if unknown:
        raise ValueError(f"belief config keys: unknown {unknown}")
    out = {"arch": "belief"}
    for key, (lo, hi) in BELIEF_RANGES.items():
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"config {key!r} must be an integer in [{lo}, {hi}], got {value!r}")
        out[key] = value
    return out


def oracle_config(meta_config: dict) -> dict:
    """The belief config that holds an oracle network of config `meta_config`; ValueError
    for an oracle that is not the embedding-sum network (the transformer oracle has no
    first-layer sum to take the expectation of)."""
    if meta_config.get("arch") != "mlp":
        raise ValueError(f"the belief model starts from an embedding-sum oracle ('mlp'), "
                         f"this one is {meta_config.get('arch')!r}")
    return check_belief_config({"hidden": int(meta_config["hidden"]),
                                "depth": int(meta_config["depth"]),
                                "roles": int(meta_config.get("roles", 0))})


def init_from_oracle(model: BeliefModel, path) -> dict:
    """Copy the oracle network of weights file `path` (eqfast/oracle/weights.py) into
    `model`, whose config must hold it (`oracle_config`); the variance head, not in the
    oracle, stays as built (zero: log σ² = log 42²). Returns the oracle's metadata.
    OracleWeightsError for an unreadable file, ValueError for another architecture."""
    from ..oracle.weights import load_network

    network, meta = load_network(path)
    want = oracle_config(meta["config"])
    have = {k: v for k, v in check_belief_config({"hidden": model.bias.shape[0],
                                                 "depth": len(model.layers),
                                                 "roles": model.roles}).items()}
    if {**want, "var_head": 0} != {**have, "var_head": 0}:
        raise ValueError(f"{path}: the oracle is {meta['config']}, the run's belief model "
                         f"{have}; give the run --hidden {want['hidden']} --depth "
                         f"{want['depth']} --roles {want['roles']}")
    missing = model.load_state_dict(network.state_dict(), strict=False)
    extra = [k for k in missing.missing_keys if not k.startswith("var.")]
    if extra or missing.unexpected_keys:
        raise ValueError(f"{path}: the oracle's tensors do not fit the belief model: "
                         f"missing {extra}, unexpected {missing.unexpected_keys}")
    return meta
