"""Oracle networks: codes [N, 28] (see tokenizer.py) -> Q [N, 7] in points, actor frame.

Two families, both predicting one value per tile id and gathering the actor's 7 slots:

- `EmbSumMLP` ("mlp"): h = ReLU(sum_t E[code_t] + b), then `depth` ReLU layers of width
  `hidden`, then a 28-wide head. The embedding sum is one-hot(3080) x Linear done as 28
  row gathers (`EmbeddingBag`), so the cost is ~hidden^2 * depth multiply-adds per row.
- `TileTransformer` ("transformer"): 28 tile tokens (embedding of their code), pre-norm
  encoder layers, a per-token scalar head. ~28x the FLOPs of an MLP of equal width.

Both are TorchScript-able and `torch.export`-clean (no data-dependent Python control flow).
`OracleModule` glues tokenizer + network into one module with the `OracleBatch` fields as
inputs; it is what gets scripted, frozen and exported. The engines call its `forward_codes`
on rows tokenized outside TorchScript (`NetworkOracle.query` says why).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..rules.tables import N_TILES
from .tokenizer import N_CODES, actor_slot_tiles, tokenize

#: Networks work in units of Q/42 internally; outputs are scaled back to points.
Q_SCALE = 42.0

DEFAULT_CONFIGS = {
    "mlp": {"arch": "mlp", "hidden": 256, "depth": 2, "roles": 1},
    "transformer": {"arch": "transformer", "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128},
    # The 816K-parameter transformer size of the earlier implementation, for speed comparisons.
    "transformer816k": {"arch": "transformer", "d_model": 128, "n_layers": 4, "n_heads": 8,
                        "d_ff": 512},
    # The 3.3M-parameter transformer size of the earlier implementation (speed comparisons on a GPU).
    "transformer3m": {"arch": "transformer", "d_model": 256, "n_layers": 4, "n_heads": 8,
                      "d_ff": 768},
}


def tile_roles() -> torch.Tensor:
    """ROLE[decl*28 + tile] in 0..N_ROLES-1: what a tile *is* under a declaration, shared
    across declarations so what is learned about one transfers to the others.

    Called-suit tiles with trump power (decl 0..7): 3*order + points class (order 0..6 within
    the called suit by rank key; points 0/5/10 -> 0/1/2): roles 0..20. Called tiles of decl 8
    (doubles as a suit): 21 + order. Every other tile: 28 + tile id (a plain tile).
    """
    from ..rules.tables import IN_CALLED, POINTS, RANK, CALLED

    role = torch.zeros(10 * 28, dtype=torch.int64)
    for d in range(10):
        called = [t for t in range(28) if IN_CALLED[d, t]]
        order = {t: i for i, t in enumerate(sorted(called, key=lambda t: RANK[d, CALLED, t]))}
        for t in range(28):
            if t in order and d <= 7:
                role[d * 28 + t] = 3 * order[t] + int(POINTS[t]) // 5
            elif t in order:
                role[d * 28 + t] = 21 + order[t]
            else:
                role[d * 28 + t] = 28 + t
    return role


N_ROLES = 56
MAX_BEATERS = 3


def tile_beaters() -> torch.Tensor:
    """BEATS[decl, t, u]: tile u follows the suit t leads and outranks t (u != t).

    With the tokenizer's "gone" status this gives, per tile, how many higher tiles of its own
    suit are still live (0: it is the boss of its suit), the one relation the trick winner
    hinges on and an embedding sum cannot form by itself.
    """
    from ..rules.tables import FOLLOWS, LED_SUIT, RANK

    import numpy as np

    d = np.arange(10)[:, None, None]
    led = LED_SUIT[:, :, None].astype(np.int64)                      # suit t leads [10, 28, 1]
    u = np.arange(28)[None, None, :]
    rank_t = np.take_along_axis(RANK, LED_SUIT.astype(np.int64)[:, None, :], 1)[:, 0, :, None]
    beats = FOLLOWS[d, led, u] & (RANK[d, led, u] > rank_t)
    return torch.from_numpy(beats)


class TileRoles(nn.Module):
    """Per-tile relational codes from the tokens: what each tile is under the declaration
    (`tile_roles`), its status (owner relative to the actor, in the trick, gone) and, with
    roles = 2, how many higher tiles of its own suit are still live (0: the boss of its
    suit; capped at MAX_BEATERS). The rule tables are buffers rebuilt from tables.py, never
    stored in weight files. Unused tables are 1-row placeholders so every mode scripts the
    same way."""

    def __init__(self, roles: int):
        super().__init__()
        self.roles = int(roles)
        self.n_beat = MAX_BEATERS + 1 if roles == 2 else 1
        self.register_buffer("role_of", tile_roles() if roles else torch.zeros(1, dtype=torch.int64),
                             persistent=False)
        # beats_t[u, d*28 + t] = 1.0 when u outranks t within t's suit under decl d: one
        # [N,28] x [28,280] matmul counts the live higher tiles for all 10 declarations at
        # once (7840 MACs a row, ~6% of the 256x2 MLP), then the row's decl picks 28 columns.
        # (A gathered [N,28,28] int product was measured 2x slower end to end.)
        beats_t = (tile_beaters().permute(2, 0, 1).reshape(28, 280).float() if roles == 2
                   else torch.zeros(1, 1))
        self.register_buffer("beats_t", beats_t, persistent=False)
        self.n_codes = N_ROLES * 11 * self.n_beat if roles else 1     # the role codes' range

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [N, 28] -> role codes [N, 28] in [0, n_codes)."""
        status = codes % 11
        role_code = self.role_of[codes // 11] * 11 + status
        if self.roles == 2:
            live = (status != 10).to(torch.float32)                        # [N, 28]
            counts = torch.mm(live, self.beats_t)                          # [N, 280]
            cols = (codes[:, :1] // (28 * 11)) * 28 + torch.arange(28, device=codes.device)
            higher = counts.gather(1, cols).to(torch.int64).clamp(max=self.n_beat - 1)
            role_code = role_code * self.n_beat + higher
        return role_code


class EmbSumMLP(nn.Module):
    def __init__(self, hidden: int = 256, depth: int = 2, roles: int = 0):
        super().__init__()
        self.q_scale = Q_SCALE
        # roles 0: codes only; 1: + (role, status); 2: + (role, status, live higher tiles of
        # its suit, capped at MAX_BEATERS); see TileRoles
        self.roles = int(roles)
        self.tile_roles = TileRoles(roles)
        self.role_embed = nn.EmbeddingBag(self.tile_roles.n_codes, hidden, mode="sum")
        self.embed = nn.EmbeddingBag(N_CODES, hidden, mode="sum")
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(depth)])
        self.head = nn.Linear(hidden, N_TILES)
        with torch.no_grad():  # a sum of 28 rows: keep its scale near a Linear's
            self.embed.weight.normal_(0.0, 1.0 / 28 ** 0.5)
            self.role_embed.weight.normal_(0.0, 1.0 / 28 ** 0.5)

    def forward(self, codes: torch.Tensor, slot_tiles: torch.Tensor) -> torch.Tensor:
        h = self.embed(codes) + self.bias
        if self.roles > 0:
            h = h + self.role_embed(self.tile_roles(codes))
        x = torch.relu(h)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x).gather(1, slot_tiles) * self.q_scale


class EncoderLayer(nn.Module):
    """Pre-norm self-attention + ReLU feed-forward over a token sequence: the 28 tile tokens
    here (no mask needed), the transcript tokens of the Stage 2 model (a key mask)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor, attend: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x [N, T, d]; attend [N, 1, 1, T] bool (True: a key to attend to) or None (all)."""
        n, t, d = x.shape
        h = self.n_heads
        qkv = self.qkv(self.norm1(x)).reshape(n, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        att = nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2],
                                                         attn_mask=attend)
        x = x + self.proj(att.transpose(1, 2).reshape(n, t, d))
        return x + self.ff2(torch.relu(self.ff1(self.norm2(x))))


class TileTransformer(nn.Module):
    """Self-attention over the 28 tile tokens; one scalar Q head shared by all tiles, read at
    the actor's 7 slots. `roles` (as in EmbSumMLP) adds the relational tile codes to each
    token's embedding; `value_head` adds V(state) = a linear read of the mean token, trained
    as an auxiliary target (the value of the position for the actor: the best legal Q)."""

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, d_ff: int = 128,
                 roles: int = 0, value_head: int = 0):
        super().__init__()
        self.q_scale = Q_SCALE
        self.roles = int(roles)
        self.tile_roles = TileRoles(roles)
        self.embed = nn.Embedding(N_CODES, d_model)
        self.role_embed = nn.Embedding(self.tile_roles.n_codes, d_model)
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff)
                                     for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 1)
        self.has_value = int(value_head)
        self.value = nn.Linear(d_model, 1) if value_head else nn.Identity()

    def encode(self, codes: torch.Tensor) -> torch.Tensor:
        x = self.embed(codes)
        if self.roles > 0:
            x = x + self.role_embed(self.tile_roles(codes))
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)                                                  # [N, 28, d]

    def forward(self, codes: torch.Tensor, slot_tiles: torch.Tensor) -> torch.Tensor:
        per_tile = self.head(self.encode(codes)).squeeze(-1)                 # [N, 28]
        return per_tile.gather(1, slot_tiles) * self.q_scale

    @torch.jit.export
    def forward_with_value(self, codes: torch.Tensor, slot_tiles: torch.Tensor):
        """(Q [N, 7], V [N]) in points; V is zeros without a value head."""
        h = self.encode(codes)
        q = self.head(h).squeeze(-1).gather(1, slot_tiles) * self.q_scale
        if self.has_value:
            v = self.value(h.mean(1)).squeeze(-1) * self.q_scale
        else:
            v = torch.zeros(codes.shape[0], device=codes.device)
        return q, v


def build_network(config: dict) -> nn.Module:
    """A fresh network from a config dict ({"arch": "mlp"|"transformer", sizes...})."""
    arch = config.get("arch")
    sizes = {k: int(v) for k, v in config.items() if k != "arch"}
    if arch == "mlp":
        return EmbSumMLP(**sizes)
    if arch == "transformer":
        return TileTransformer(**sizes)
    raise ValueError(f"unknown oracle architecture {arch!r} (expected 'mlp' or 'transformer')")


def speed_test_network(config: dict, seed: int = 0) -> nn.Module:
    """A random-weight network (eval mode) for speed measurements: it costs per row what a
    trained one of the same config costs, and its output head is scaled by 1e-3 so that Q
    stays well inside [-42, 42] (a plain random head gives |Q| > 42, which the engine's
    record checks reject as impossible)."""
    torch.manual_seed(seed)
    network = build_network(config).eval()
    with torch.no_grad():
        network.head.weight.mul_(1e-3)
        network.head.bias.zero_()
    return network


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class OracleModule(nn.Module):
    """Tokenizer + network: OracleBatch fields -> Q [N, 7] (points, actor frame).

    Q is clamped to [-42, 42], the range the rules allow: the network is a regression and
    can overshoot a little (the shipped one predicts 42.5 at some opening leads), and a
    value outside the possible range is certainly wrong, so clamping only moves it closer
    to the truth and keeps E[Q] inside the dataset's invariant |E[Q]| <= 42. Training
    calls the bare network (no clamp: an out-of-range prediction keeps its gradient)."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network
        self.q_bound = Q_SCALE

    def forward(self, hands: torch.Tensor, remaining: torch.Tensor, decl: torch.Tensor,
                trick: torch.Tensor, actor: torch.Tensor) -> torch.Tensor:
        codes = tokenize(hands, remaining, decl, trick, actor)
        rows = torch.arange(hands.shape[0], device=hands.device)
        slot_tiles = hands[rows, actor].clamp(min=0)
        return self.forward_codes(codes, slot_tiles)

    @torch.jit.export
    def forward_codes(self, codes: torch.Tensor, slot_tiles: torch.Tensor) -> torch.Tensor:
        """The network on already tokenized rows (the Triton `tokenize_worlds` path)."""
        return self.network(codes, slot_tiles).clamp(-self.q_bound, self.q_bound)


def script_module(network: nn.Module, freeze: bool = True) -> torch.jit.ScriptModule:
    """TorchScript (frozen by default) of `OracleModule(network)` in eval mode."""
    module = torch.jit.script(OracleModule(network).eval())
    return torch.jit.freeze(module, preserved_attrs=["forward_codes"]) if freeze else module


#: A network forward runs on at least this many rows. Below 12 rows the CPU BLAS takes
#: other kernels whose float order depends on the row count (measured with torch 2.13's
#: Linear(256, 256): rows 1-3 differ with one thread, 1-11 with two; from 12 rows up every
#: row is bit-identical at any count up to 40,000), so a row's Q, and from it a record,
#: would depend on how many rows shared the call.
MIN_ROWS = 16


def forward_rows(fn, *rows: torch.Tensor) -> torch.Tensor:
    """fn(*rows) [n, ...], with fewer than MIN_ROWS rows padded by copies of the first row
    and the result cut back to n: a row's value does not depend on how many rows came."""
    n = rows[0].shape[0]
    if n == 0 or n >= MIN_ROWS:
        return fn(*rows)
    padded = [torch.cat([t, t[:1].expand(MIN_ROWS - n, *t.shape[1:])]) for t in rows]
    return fn(*padded)[:n]


class NetworkOracle:
    """`Oracle` protocol on a trained network: q [N,7] float32 actor frame, legal [N,7].

    `module` is an `OracleModule` (eager) or its TorchScript; queries run under no_grad on
    `device`, and the results come back on the batch's device.
    """

    def __init__(self, module, device="cpu", config: dict | None = None):
        self.module = module
        self.device = torch.device(device)
        self.config = dict(config or {})

    def query(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """q [N, 7] and legal [N, 7] of OracleBatch rows. The rows are tokenized here, in
        eager PyTorch, and only `forward_codes` runs as TorchScript: on CUDA, TorchScript
        fuses the module's own tokenizer into generated kernels after its profiling runs,
        and on an H100 (torch 2.11) those gave Q up to 19.8 points off the CPU's from the 4th
        call on; with the fusers off, or tokenized outside, every row matched
        (benchmarks/gpu_runs/2026-11-27-h100-b0a5af2/, tests/test_oracle_network.py)."""
        from .protocol import legal_slots

        src = batch.hands.device
        b = batch.to(self.device) if src != self.device else batch
        with torch.no_grad():
            codes = tokenize(b.hands, b.remaining, b.decl, b.trick, b.actor)
            q = forward_rows(self.module.forward_codes, codes, actor_slot_tiles(b.hands, b.actor))
        legal = legal_slots(b)
        return q.float().to(src), legal.to(src)

    def query_codes(self, codes: torch.Tensor, slot_tiles: torch.Tensor) -> torch.Tensor:
        """q [N, 7] (actor frame) of rows already tokenized (codes [N,28], slot_tiles [N,7])."""
        src = codes.device
        with torch.no_grad():
            q = forward_rows(self.module.forward_codes, codes.to(self.device),
                             slot_tiles.to(self.device))
        return q.float().to(src)
