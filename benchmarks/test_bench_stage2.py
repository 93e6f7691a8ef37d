"""Stage 2 benchmarks, each side by side on the same inputs.

Training step: one forward over the stored 36 tokens (the baseline) against length groups
(`forward_by_length`, eqfast-train-stage2 --length-groups), on the same batch and model.

A step is the forward, the loss (nll with the centred term, the shipped recipe), the
backward and an AdamW step, for 256 transcripts of random games: 16 batches of 16 games
after 0, 2, 4, ... 30 random legal plays (the records' mix of lengths, 8 to 29 tokens).
The labels are random: the step's cost does not depend on them.

Player forward: the model at seen_tiles 0 (the baseline), 1, 2 and 3, in inference mode, on
what `stage2_slots` gives it in the arena: batches of 64 games at the same decision, cut
to their longest transcript, at decisions 0, 4, 8, ... 24 (one pass over the seven).

Run: python -m pytest benchmarks/test_bench_stage2.py --benchmark-enable -s
"""
from __future__ import annotations

import pytest
import torch
from conftest import random_played_games

from eqfast.engine.transcript import transcript_tokens
from eqfast.stage2.model import DEFAULT_CONFIG, build_model, forward_by_length, trim_tokens
from eqfast.stage2.train import stage2_loss

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_RESULTS: dict[str, float] = {}


def _batch() -> dict:
    tokens, lengths = [], []
    for i, plays in enumerate(range(0, 32, 2)):
        games = random_played_games(16, min(plays, 27), 100 + i, "cpu")
        t, ln = transcript_tokens(games)
        tokens.append(t)
        lengths.append(ln)
    tokens, lengths = torch.cat(tokens), torch.cat(lengths)
    gen = torch.Generator().manual_seed(0)
    n = tokens.shape[0]
    legal = torch.rand(n, 7, generator=gen) < 0.6
    legal[:, 0] = True
    return {"tokens": tokens.to(DEVICE), "lengths": lengths.to(DEVICE),
            "q": (torch.rand(n, 7, generator=gen) * 84 - 42).to(DEVICE),
            "s2": torch.rand(n, 7, generator=gen).to(DEVICE), "legal": legal.to(DEVICE),
            "weight": torch.ones(n).to(DEVICE)}


@pytest.mark.parametrize("groups", [0, 1, 4])
def test_bench_stage2_train_step(benchmark, groups):
    """groups 0: one forward over 36 tokens (the baseline); 1: one forward cut to the
    batch's longest; 4: the trainer's default."""
    batch = _batch()
    torch.manual_seed(0)
    model = build_model(DEFAULT_CONFIG).to(DEVICE).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        if groups == 0:
            mu, log_var = model(batch["tokens"].long(), batch["lengths"])
        else:
            mu, log_var = forward_by_length(model, batch["tokens"], batch["lengths"], groups)
        loss = stage2_loss(mu, log_var, batch, "nll", centered_weight=1.0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return loss

    loss = benchmark.pedantic(step, rounds=10, iterations=1, warmup_rounds=2)
    assert torch.isfinite(loss)
    if benchmark.stats is None:                  # --benchmark-disable: ran once, no timing
        return
    median = benchmark.stats.stats.median
    _RESULTS[groups] = median
    benchmark.extra_info.update({"device": DEVICE, "records": 256, "groups": groups,
                                 "ms_per_step": round(median * 1e3, 2)})
    if 0 in _RESULTS:
        benchmark.extra_info["ratio_to_uncut"] = round(_RESULTS[0] / median, 3)
    print(f"\nstage2 train step, groups {groups} ({DEVICE}): {median * 1e3:.1f} ms"
          + (f", {_RESULTS[0] / median:.2f}x the uncut step" if groups and 0 in _RESULTS else ""))


def _player_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for i, plays in enumerate(range(0, 28, 4)):
        tokens, lengths = transcript_tokens(random_played_games(64, plays, 200 + i, "cpu"))
        out.append((trim_tokens(tokens, lengths).to(DEVICE), lengths.to(DEVICE)))
    return out


@pytest.mark.parametrize("seen_tiles", [0, 1, 2, 3])
def test_bench_stage2_player_forward(benchmark, seen_tiles):
    """The default model's forward as the player runs it, by seen-tiles level."""
    batches = _player_batches()
    torch.manual_seed(0)
    model = build_model({**DEFAULT_CONFIG, "seen_tiles": seen_tiles}).to(DEVICE).eval()

    def forward():
        with torch.inference_mode():
            outs = [model(t, ln)[0] for t, ln in batches]
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return outs

    outs = benchmark.pedantic(forward, rounds=20, iterations=1, warmup_rounds=3)
    assert all(bool(torch.isfinite(o).all()) for o in outs)
    if benchmark.stats is None:
        return
    median = benchmark.stats.stats.median
    key = f"player{seen_tiles}"
    _RESULTS[key] = median
    decisions = sum(int(t.shape[0]) for t, _ in batches)
    benchmark.extra_info.update({"device": DEVICE, "seen_tiles": seen_tiles,
                                 "decisions_per_s": round(decisions / median)})
    if "player0" in _RESULTS:
        benchmark.extra_info["time_ratio_to_level0"] = round(median / _RESULTS["player0"], 3)
    print(f"\nstage2 player forward, seen_tiles {seen_tiles} ({DEVICE}): "
          f"{decisions / median:,.0f} decisions/s"
          + (f", {median / _RESULTS['player0']:.3f}x level 0's time"
             if seen_tiles and "player0" in _RESULTS else ""))
