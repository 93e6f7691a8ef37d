"""Stage 2 training-step benchmarks: one forward over the stored 36 tokens (the baseline)
against length groups (`forward_by_length`, eqfast-train-stage2 --length-groups), side by
side on the same batch and model.

A step is the forward, the loss (nll with the centred term, the shipped recipe), the
backward and an AdamW step, for 256 transcripts of random games: 16 batches of 16 games
after 0, 2, 4, ... 30 random legal plays (the records' mix of lengths, 8 to 29 tokens).
The labels are random: the step's cost does not depend on them.

Run: python -m pytest benchmarks/test_bench_stage2.py --benchmark-enable -s
"""
from __future__ import annotations

import pytest
import torch
from conftest import random_played_games

from eqfast.engine.transcript import transcript_tokens
from eqfast.stage2.model import DEFAULT_CONFIG, build_model, forward_by_length
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
