"""The Stage 2 network: public transcript tokens -> μ(a) (and log σ²) per current-hand slot.

Input: the transcript of one decision (tokenizer `transcript_v1`, eqfast/engine/transcript.py
and docs/DATASET.md): tokens int [B, 36, 8] and lengths [B]. Output, per current-hand slot
i (= hand token 1 + i, the order of the records' per-slot fields):

    mu       [B, 7]  the predicted E[Q] of playing slot i, in points (actor frame)
    log_var  [B, 7]  log σ² in points² of the model's predictive variance of the label
                     (zeros when the config has no variance head; see docs/STAGE2.md)

Slots at and beyond the hand size hold numbers that mean nothing: callers mask them with
the legal moves, as the records' `legal_mask` does.

Optionally (`policy_head` 1) a linear head on the same hand-slot embeddings gives policy
logits [B, 7] (`forward_policy`), trained by the auxiliary cross-entropy against the
records' `action_taken` (docs/STAGE2.md, "Auxiliary policy head"); `forward` and play read
μ only, and a model without the head has no parameter of it.

Architecture: each token is the sum of one embedding per feature (high, low, double,
count, relative player, in hand, declaration, token type), an embedding of (declaration,
tile) (what the tile is under the contract: trump, suit, count, in one lookup) and a
learned embedding of its position (0..35), so the order of the plays is seen; pre-norm
encoder layers whose attention ignores the padding (key-padding mask from the lengths);
a linear head read at positions 1..7. Optionally (`seen_tiles` 1, 2 or 3) a summary of
the plays (who played which tile, the actor's hand, at level 2 the voids each player has
shown, at level 3 the chance that each other player holds each hidden tile) is read by
one linear layer and added to every token. The network works in units
of Q/42 internally (Q_SCALE) and scales μ back to points.

No data-dependent Python control flow: the module is TorchScript-able and `torch.export`
clean with dynamic batch and token dimensions (tests/test_stage2.py).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..engine.sampling import pool_completion_counts
from ..engine.transcript import MAX_TOKENS, N_FEATURES
from ..oracle.network import EncoderLayer
from ..rules.tables import FOLLOWS, HAND_SIZE, LED_SUIT, N_SEATS, N_SUITS, N_TILES
from .defaults import DEFAULT_CONFIG  # noqa: F401  (defined without torch, for --help)

#: Values in points are divided by this inside the network (|Q| <= 42).
Q_SCALE = 42.0
N_DECLS = 10
#: number of values of each token feature (transcript_v1): high, low, double, count,
#: relative player, in hand, decl, type
FEATURE_SIZES = (7, 7, 2, 3, 4, 2, N_DECLS, 3)

#: config keys and the ranges a weights file may give them
CONFIG_RANGES = {"d_model": (8, 1024), "n_layers": (1, 16), "n_heads": (1, 32),
                 "d_ff": (8, 8192), "var_head": (0, 1), "seen_tiles": (0, 3),
                 "policy_head": (0, 1)}
#: keys a config may leave out, and their value then (files written before they existed)
CONFIG_OPTIONAL = {"seen_tiles": 0, "policy_head": 0}
#: rows of the seen-tiles summary: the tiles each relative player has played, and the
#: actor's hand
SEEN_ROWS = N_SEATS + 1
#: size of the summary at each seen_tiles level: 1 the seen tiles, 2 also the voids shown
#: (relative player x suit, 8 suits with the called one), 3 also where each hidden tile
#: is (relative players 1..3 x tile); each level's summary begins with the one below it
SUMMARY_SIZE = {1: SEEN_ROWS * N_TILES, 2: SEEN_ROWS * N_TILES + N_SEATS * N_SUITS,
                3: SEEN_ROWS * N_TILES + N_SEATS * N_SUITS + (N_SEATS - 1) * N_TILES}


def check_config(config: dict) -> dict:
    """The config with int values; ValueError naming the key for anything else. A config
    with "arch": "belief" is the belief model's (belief.py), with "arch": "split" two
    models' (split.py); without "arch", this transformer's."""
    if not isinstance(config, dict):
        raise ValueError(f"config must be a JSON object, got {config!r}")
    if "arch" in config:
        if config["arch"] == "belief":
            from .belief import check_belief_config
            return check_belief_config(config)
        if config["arch"] == "split":
            from .split import check_split_config
            return check_split_config(config, check_config)
        raise ValueError(f"config 'arch' must be 'belief' or 'split' (or absent: the "
                         f"transformer), got {config['arch']!r}")
    config = {**CONFIG_OPTIONAL, **config}
    unknown = sorted(set(config) - set(CONFIG_RANGES))
    missing = sorted(set(CONFIG_RANGES) - set(config))
    if unknown or missing:
        raise ValueError(f"config keys: unknown {unknown}, missing {missing}")
    out = {}
    for key, (lo, hi) in CONFIG_RANGES.items():
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"config {key!r} must be an integer in [{lo}, {hi}], got {value!r}")
        out[key] = value
    if out["d_model"] % out["n_heads"]:
        raise ValueError(f"config d_model {out['d_model']} is not a multiple of n_heads "
                         f"{out['n_heads']}")
    return out


def token_features(tokens: torch.Tensor, lengths: torch.Tensor, feature_max: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(live [B, T] bool, features f [B, T, 8] clamped to their ranges and zero past the
    length, tile ids [B, T]) of transcript tokens: whatever the padding holds changes
    nothing read from them. feature_max [8]: FEATURE_SIZES - 1."""
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    live = positions[None, :] < lengths[:, None]
    f = torch.minimum(tokens.long().clamp(min=0), feature_max) * live[..., None]
    return live, f, f[..., 0] * (f[..., 0] + 1) // 2 + f[..., 1]


def seen_matrix(f: torch.Tensor, tile: torch.Tensor, n_seats: int = N_SEATS,
                n_tiles: int = N_TILES) -> torch.Tensor:
    """[B, (n_seats + 1) * n_tiles] float zeros and ones from the clamped features f
    [B, T, 8] (zero past the length) and the tile ids [B, T]: entry r * 28 + t is 1 when
    relative player r < 4 has played tile t, or, for r = 4, when the actor holds it. The
    declaration token and padding (token type 0) count nowhere."""
    row = torch.where(f[..., 7] == 2, f[..., 4], torch.full_like(tile, n_seats))
    counted = (f[..., 7] > 0).float()
    # a scatter, not a [B, T, 140] one-hot summed over T: the same zeros and ones, 6x
    # faster (118 -> 18 us at B = 64, T = 20, one thread)
    out = torch.zeros(tile.shape[0], (n_seats + 1) * n_tiles, device=tile.device)
    return out.scatter_add_(1, row * n_tiles + tile, counted)


def void_matrix(f: torch.Tensor, tile: torch.Tensor, live: torch.Tensor,
                led_suit: torch.Tensor, follows: torch.Tensor, n_seats: int = N_SEATS,
                n_suits: int = N_SUITS) -> torch.Tensor:
    """[B, n_seats * n_suits] float zeros and ones: entry r * 8 + s is 1 when relative
    player r has shown a void in suit s, by playing a tile that does not follow s in a
    trick whose lead made s the led suit (docs/RULES.md, "Leading, following, voids").
    f [B, T, 8] clamped features, zero past the length; tile [B, T] ids; live
    [B, T]; led_suit [10, 28] and follows [10, 8, 28] the rules tables."""
    t = tile.shape[1]
    pos = torch.arange(t, device=tile.device)[None, :]
    is_play = f[..., 7] == 2
    n_before = ((f[..., 7] < 2) & live).sum(1, keepdim=True)            # decl + hand tokens
    place = (pos - n_before).clamp(min=0) % n_seats                       # 0: the lead
    lead_tile = tile.gather(1, (pos - place).clamp(min=0))
    decl = f[:, :1, 6].expand_as(tile)
    led = led_suit[decl, lead_tile]
    shown = is_play & (place > 0) & ~follows[decl, led, tile]
    out = torch.zeros(tile.shape[0], n_seats * n_suits, device=tile.device)
    return out.scatter_reduce_(1, f[..., 4] * n_suits + led, shown.float(), "amax")


def holder_marginals(seen: torch.Tensor, voids: torch.Tensor, decl: torch.Tensor,
                     follows: torch.Tensor, n_seats: int = N_SEATS, n_tiles: int = N_TILES,
                     hand_size: int = HAND_SIZE) -> torch.Tensor:
    """[B, (n_seats - 1) * n_tiles] float: entry (r - 1) * 28 + t is the probability that
    relative player r = 1, 2, 3 holds tile t, over the deals consistent with what the
    actor knows, all equally likely: the uniform worlds the engine samples (a hidden tile
    may go to a seat that has shown no void in a suit it follows; each seat holds 7 less
    what it has played). Zero for tiles not hidden, and for every tile of a row no full
    deal fits.

    seen [B, 5 * 28] and voids [B, 4 * 8] are seen_matrix and void_matrix; decl [B] the
    declarations; follows [10, 8, 28] the rules table. Counted exactly: G[i][a, b], the
    sampler's completion counts (`pool_completion_counts`, eqfast/engine/sampling.py)
    over the hidden tiles in id order, is the number of ways to give tiles i, i + 1, ...
    to seats 1, 2, 3 with seats 1 and 2 needing a and b of them; F[i][a, b], counted
    forwards here, the number of ways for the tiles before i to leave them needing a and
    b. Tile i goes to seat 1 in sum_ab F[i][a, b] G[i + 1][a - 1, b] of the G[0][n1, n2]
    deals (int64: each such product counts distinct deals, at most 21! / (7!)^3 < 2^29).
    G is padded by a zero row and column in front once, so each shift is a view."""
    b = seen.shape[0]
    pool = (n_seats - 1) * hand_size                                           # 21
    seen = seen.view(b, n_seats + 1, n_tiles)
    hidden = seen.sum(1) == 0                                                 # [B, 28]
    forbid = torch.bmm(voids.view(b, n_seats, -1).double(),
                       follows[decl].double()) > 0                            # [B, 4, 28]
    may = hidden[:, None, :] & ~forbid[:, 1:]                                 # [B, 3, 28]
    played = seen[:, 1:n_seats].sum(2)                                       # [B, 3]
    n_pool = hidden.sum(1)
    # a row whose hidden tiles do not fill the three hands (no full deal fits it)
    fits = (n_pool == pool - played.sum(1)) & (played <= hand_size).all(1)
    need = (hand_size - played[:, :2]).long().clamp(0, hand_size)           # [B, 2]
    # the hidden tiles first, in id order: the sampler's pool
    order = torch.sort((~hidden).to(torch.int64), dim=1, stable=True).indices[:, :pool]
    m = may.gather(2, order[:, None, :].expand(b, 3, pool)).long()          # [B, 3, 21]
    g = torch.nn.functional.pad(pool_completion_counts(m.transpose(1, 2), n_pool),
                                (1, 0, 1, 0))                                # [B, 22, 9, 9]
    k = torch.arange(hand_size + 1, device=seen.device)
    start = ((k[None, :, None] == need[:, 0, None, None])
             & (k[None, None, :] == need[:, 1, None, None])).long()         # [B, 8, 8]
    # F behind a zero row and column; past a row's pool m is 0 and so is what it adds
    f = torch.nn.functional.pad(start, (0, 1, 0, 1))
    parts = []
    for i in range(pool):
        here, nxt = f[:, :-1, :-1], g[:, i + 1]
        parts.append(torch.stack([here * nxt[:, :-1, 1:], here * nxt[:, 1:, :-1],
                                  here * nxt[:, 1:, 1:]], 1).sum((2, 3)))       # [B, 3]
        f = torch.nn.functional.pad(m[:, 0, i, None, None] * f[:, 1:, :-1]
                                    + m[:, 1, i, None, None] * f[:, :-1, 1:]
                                    + m[:, 2, i, None, None] * here, (0, 1, 0, 1))
    counts = torch.stack(parts, 2) * m                                        # [B, 3, 21]
    total = (start * g[:, 0, 1:, 1:]).sum((1, 2))                            # [B]
    probs = counts.double() / torch.where(total > 0, total, torch.ones_like(total)
                                          ).double()[:, None, None]
    probs = probs * fits.double()[:, None, None]
    out = torch.zeros(b, 3, n_tiles, dtype=torch.float64, device=seen.device)
    out = out.scatter(2, order[:, None, :].expand(b, 3, pool), probs)
    return out.reshape(b, (n_seats - 1) * n_tiles).float()


class Stage2Model(nn.Module):
    """Transformer over the transcript tokens; `forward(tokens, lengths) -> (mu, log_var)`."""

    def __init__(self, d_model: int = 64, n_layers: int = 3, n_heads: int = 4, d_ff: int = 128,
                 var_head: int = 1, seen_tiles: int = 0, policy_head: int = 0):
        super().__init__()
        self.q_scale = Q_SCALE
        self.var_head = int(var_head)
        self.seen_tiles = int(seen_tiles)
        self.n_seats = N_SEATS
        self.n_tiles = N_TILES
        self.decl_tile_index = N_DECLS * N_TILES
        self.hand_size = HAND_SIZE
        # log(42²): log σ² of a value in points from log σ² in units of Q/42
        self.log_var_shift = 2.0 * math.log(Q_SCALE)
        offsets = [0]
        for size in FEATURE_SIZES[:-1]:
            offsets.append(offsets[-1] + size)
        self.register_buffer("feature_offset", torch.tensor(offsets, dtype=torch.int64),
                             persistent=False)
        self.register_buffer("feature_max", torch.tensor(FEATURE_SIZES, dtype=torch.int64) - 1,
                             persistent=False)
        self.register_buffer("positions", torch.arange(MAX_TOKENS, dtype=torch.int64),
                             persistent=False)
        self.feature_embed = nn.Embedding(sum(FEATURE_SIZES), d_model)
        # (decl, tile) of tile tokens; index N_DECLS * N_TILES for the declaration token
        self.tile_embed = nn.Embedding(N_DECLS * N_TILES + 1, d_model)
        self.position_embed = nn.Embedding(MAX_TOKENS, d_model)
        # seen_tiles: a linear read of a summary of the plays (seen_matrix, and at level 2
        # void_matrix) added to every token, so what is still out, and who cannot hold a
        # suit, is at hand in the first layer instead of being gathered by attention over
        # the plays (a list of one layer or none: no parameter without it)
        self.seen_embed = nn.ModuleList([nn.Linear(SUMMARY_SIZE[self.seen_tiles], d_model,
                                                   bias=False)] if self.seen_tiles else [])
        self.register_buffer("led_suit", torch.as_tensor(LED_SUIT, dtype=torch.int64),
                             persistent=False)
        self.register_buffer("follows", torch.as_tensor(FOLLOWS, dtype=torch.bool),
                             persistent=False)
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff)
                                     for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 2 if self.var_head else 1)
        # the auxiliary policy head (a list of one layer or none, as seen_embed)
        self.policy_head = nn.ModuleList([nn.Linear(d_model, 1)] if policy_head else [])

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor):
        """tokens [B, T, 8] int (int8 as stored, or int64), lengths [B] int64 ->
        (mu [B, 7] points, log_var [B, 7] log points²).

        T is 36 as stored, or any T from 8 (the declaration and a full hand) up, at least
        the batch's longest length (`trim_tokens`): positions past a row's length change
        no output, so cutting them off gives the same μ up to float rounding, at a cost
        that grows with T."""
        return self._heads(self._encode(tokens, lengths))

    def _encode(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The final normalized embeddings [B, 7, d_model] of the hand slots."""
        positions = self.positions[:tokens.shape[1]]
        live, f, tile = token_features(tokens, lengths, self.feature_max)
        x = self.feature_embed(f + self.feature_offset).sum(2)
        tile_index = torch.where(f[..., 7] > 0, f[..., 6] * self.n_tiles + tile,
                                 torch.full_like(tile, self.decl_tile_index))
        x = x + self.tile_embed(tile_index) + self.position_embed(positions)
        for seen_embed in self.seen_embed:
            seen = seen_matrix(f, tile, self.n_seats, self.n_tiles)
            if self.seen_tiles >= 2:
                voids = void_matrix(f, tile, live, self.led_suit, self.follows)
                parts = [seen, voids]
                if self.seen_tiles >= 3:
                    parts.append(holder_marginals(seen, voids, f[:, 0, 6], self.follows,
                                                  self.n_seats, self.n_tiles,
                                                  self.hand_size))
                seen = torch.cat(parts, 1)
            x = x + seen_embed(seen.to(x.dtype))[:, None, :]
        attend = live[:, None, None, :]
        for layer in self.layers:
            x = layer(x, attend)
        return self.norm(x[:, 1:1 + self.hand_size])

    def _heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mu [B, 7] points, log_var [B, 7]) of the hand-slot embeddings h."""
        out = self.head(h)                                                      # [B, 7, 1 or 2]
        mu = out[..., 0] * self.q_scale
        if self.var_head:
            log_var = out[..., 1] + self.log_var_shift
        else:
            log_var = torch.zeros_like(mu)
        return mu, log_var

    def forward_policy(self, tokens: torch.Tensor, lengths: torch.Tensor):
        """(mu, log_var, policy logits [B, 7]) from one encoder pass; the logits are zeros
        without a policy head. Mask them with the legal moves before a softmax."""
        h = self._encode(tokens, lengths)
        mu, log_var = self._heads(h)
        logits = torch.zeros_like(mu)
        for head in self.policy_head:
            logits = head(h)[..., 0]
        return mu, log_var, logits


#: the shortest token length a forward takes: the declaration and a full hand, whose
#: positions 1..7 the head reads
MIN_TOKENS = 1 + HAND_SIZE


def trim_tokens(tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`tokens` [B, 36, 8] cut to the batch's longest length (at least MIN_TOKENS): the
    same outputs at a fraction of the cost. The records' lengths run from 8 to 29 and
    average 18.5, and a training step of the default model costs 118 / 98 / 73 / 55 ms at
    T = 36 / 30 / 24 / 18 (256 records, one thread of the 2-core VM)."""
    if tokens.shape[0] == 0:
        return tokens
    t = max(int(lengths.max()), MIN_TOKENS)
    return tokens[:, :min(t, tokens.shape[1])]


def length_groups(lengths: torch.Tensor, groups: int) -> list[torch.Tensor]:
    """Row indices [.] of `groups` near-equal groups of rows of similar length (the rows
    sorted by length, stable, then split): each group's forward on `trim_tokens` of its
    rows costs what its own longest row needs rather than the batch's."""
    order = torch.sort(lengths, stable=True).indices
    return [g for g in torch.tensor_split(order, min(groups, max(len(order), 1))) if len(g)]


def forward_by_length(model, tokens: torch.Tensor, lengths: torch.Tensor,
                      groups: int, policy: bool = False) -> tuple[torch.Tensor, ...]:
    """`model(tokens, lengths)` computed as one forward per `length_groups` group on its
    trimmed tokens, the outputs put back in row order: the same (mu, log_var) up to float
    rounding, and gradients flow through it as through one forward. policy: the model's
    `forward_policy` instead, (mu, log_var, policy logits)."""
    run = model.forward_policy if policy else model
    if groups <= 1:
        return run(trim_tokens(tokens, lengths).long(), lengths)
    parts = length_groups(lengths, groups)
    outs = [run(trim_tokens(tokens[g], lengths[g]).long(), lengths[g]) for g in parts]
    inverse = torch.argsort(torch.cat(parts))
    return tuple(torch.cat([o[k] for o in outs])[inverse] for k in range(len(outs[0])))


def build_model(config: dict) -> nn.Module:
    """A fresh model of `config` (DEFAULT_CONFIG's keys, or a belief config: belief.py);
    ValueError for a bad config."""
    config = check_config(config)
    if config.get("arch") == "belief":
        from .belief import BeliefModel
        return BeliefModel(**{k: v for k, v in config.items() if k != "arch"})
    if config.get("arch") == "split":
        from .split import SplitModel
        return SplitModel(build_model(config["early"]), build_model(config["late"]),
                          config["first_trick"])
    return Stage2Model(**config)


def is_belief(config: dict) -> bool:
    """Whether `config` is a belief model's (belief.py)."""
    return config.get("arch") == "belief"


def is_transformer(config: dict) -> bool:
    """Whether `config` is this transformer's (no "arch": not a belief or split model)."""
    return "arch" not in config


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def script_model(model: Stage2Model) -> torch.jit.ScriptModule:
    """TorchScript of `model` in eval mode (same outputs as the eager module)."""
    return torch.jit.script(model.eval())


def export_program(model: Stage2Model, n: int = 4):
    """`torch.export.export` of `model` (eval) with dynamic batch and token dimensions
    (T from MIN_TOKENS to 36, as `trim_tokens` cuts them)."""
    from torch.export import Dim, export

    tokens = torch.zeros(n, MAX_TOKENS, N_FEATURES, dtype=torch.int64)
    tokens[:, 0, 6] = torch.arange(n) % N_DECLS
    lengths = torch.full((n,), 2, dtype=torch.int64)
    batch = Dim("batch", min=1, max=1 << 20)
    length = Dim("tokens", min=MIN_TOKENS, max=MAX_TOKENS)
    return export(model.eval(), (tokens, lengths),
                  dynamic_shapes={"tokens": {0: batch, 1: length}, "lengths": {0: batch}})
