"""The confidence ladder of an oracle network, and its success table.

Four steps, each a measurement that can fail on its own:

1. One deal: positions of many games from one deal, split 80/20 at random; a network of the
   architecture under test is trained from scratch on the 80%. It must fit them (train MSE
   of Q/42 over legal moves < 0.01) and the held-out 20% (< 0.02): the encoding and the
   labels carry what the network needs.
2. Across deals: `deals` deals, the last `test_deals` held out whole; the rest split 90/10
   by position. Val MSE (same deals) against test MSE (unseen deals): how much of what it
   learns is the deal rather than the game.
3. Spot check: a trained weights file on positions of fresh deals; V = the best legal Q
   (the position's value for the actor) from the network beside the exact one, a sample
   printed, mean absolute and mean signed error over all.
4. PIMC move agreement: fresh games played by the E[Q] engine with the network; every
   decision with >= 2 legal moves re-run with the exact solver on the same worlds; the
   share where the network's E[Q] argmax is an argmax of the exact E[Q] (ties within
   TIE_TOL count).

`success_table` puts the trained file's figures beside the targets of the value-function
design (val MSE < 0.005, test MSE < 0.01, mean abs error < 2 points, PIMC agreement > 90%,
one-position inference < 1 ms, file < 2 MB). Labels come from the exact solver
(eqfast.oracle.dataset.label_deal, as eqfast-label-oracle labels); deal numbers are fixed per step and disjoint from the
training data's (docs/ORACLE.md, "Confidence ladder").
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ..oracle.dataset import COLUMNS, _DTYPES, as_batch, as_tensors, label_deal
from ..oracle.train import TrainConfig, evaluate_rows, prepare_rows, train
from ..oracle.weights import load_network
from .ladder_config import LadderConfig  # noqa: F401  (defined without torch, for --help)

#: First deal number of each step's deals (training data uses deals below 2e9).
ONE_DEAL = 2_000_000_000
ACROSS_DEALS = 2_100_000_000
SPOT_DEALS = 2_200_000_000
PIMC_SEEDS = 2_300_000_000



def label_rows(deals, games: int) -> dict[str, np.ndarray]:
    """Solver-labelled positions of `games` games from each deal (dataset columns)."""
    parts = [label_deal(d, games) for d in deals]
    return {c: np.concatenate([p[c] for p in parts]).astype(_DTYPES[c]) for c in COLUMNS}


def _write_shard(directory: Path, cols: dict[str, np.ndarray], split: np.ndarray) -> None:
    from safetensors.numpy import save_file

    directory.mkdir(parents=True, exist_ok=True)
    cols = {**cols, "split": split.astype(np.int8)}
    save_file({c: np.ascontiguousarray(v) for c, v in cols.items()},
              str(directory / "shard_00000.safetensors"),
              metadata={"dataset_version": "1", "deal_start": "0", "deal_stop": "0"})


def _fit(cfg: LadderConfig, cols: dict[str, np.ndarray], split: np.ndarray, log) -> dict:
    """Train a fresh network on rows with split 0 (val: split 1); MSE etc. of each split."""
    with tempfile.TemporaryDirectory() as tmp:
        _write_shard(Path(tmp) / "data", cols, split)
        tc = TrainConfig(data=str(Path(tmp) / "data"), run=str(Path(tmp) / "run"),
                         arch=dict(cfg.arch), steps=cfg.train_steps, batch=cfg.batch, lr=cfg.lr,
                         warmup=min(200, cfg.train_steps // 10), seed=cfg.seed,
                         val_rows=10**9, eval_every=cfg.train_steps, ckpt_every=cfg.train_steps)
        train(tc, log=lambda *a, **k: None)
        network, _ = load_network(Path(tmp) / "run" / "last.safetensors")
    out = {}
    for name, k in (("train", 0), ("val", 1), ("test", 2)):
        keep = split == k
        if keep.any():
            m = evaluate_rows(network, prepare_rows(cols, keep), "cpu")
            out[name] = {"positions": int(keep.sum()), "mse": m["loss"], "q_mae": m["q_mae"],
                         "q_gap": m["q_gap"]}
    log("   " + ", ".join(f"{k} MSE {v['mse']:.4f} (q_mae {v['q_mae']:.2f}, {v['positions']} "
                          f"positions)" for k, v in out.items()))
    return out


def one_deal(cfg: LadderConfig, log=print) -> dict:
    log(f"step 1: one deal ({ONE_DEAL}), {cfg.one_deal_games} games, 80/20 by position")
    cols = label_rows([ONE_DEAL], cfg.one_deal_games)
    rng = np.random.default_rng(cfg.seed)
    split = (rng.random(len(cols["q"])) >= 0.8).astype(np.int8)
    fit = _fit(cfg, cols, split, log)
    return {**fit, "deal": ONE_DEAL, "games": cfg.one_deal_games,
            "pass": fit["train"]["mse"] < 0.01 and fit["val"]["mse"] < 0.02}


def across_deals(cfg: LadderConfig, log=print) -> dict:
    log(f"step 2: {cfg.deals} deals from {ACROSS_DEALS}, {cfg.games_per_deal} games each, "
        f"the last {cfg.test_deals} held out whole")
    deals = range(ACROSS_DEALS, ACROSS_DEALS + cfg.deals)
    cols = label_rows(deals, cfg.games_per_deal)
    rng = np.random.default_rng(cfg.seed + 1)
    test = cols["deal"] >= ACROSS_DEALS + cfg.deals - cfg.test_deals
    split = np.where(test, 2, (rng.random(len(cols["q"])) >= 0.9).astype(np.int8))
    fit = _fit(cfg, cols, split, log)
    return {**fit, "deals": cfg.deals, "test_deals": cfg.test_deals,
            "pass": fit["val"]["mse"] < 0.01 and fit["test"]["mse"] < 0.02}


def _values(q: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    return torch.where(legal, q, torch.full_like(q, float("-inf"))).max(1).values


def spot_check(weights, cfg: LadderConfig, log=print) -> dict:
    """Network against the solver on positions of fresh deals (V and Q)."""
    from ..oracle.factory import oracle_from_spec

    log(f"step 3: spot check of {weights} on {cfg.spot_deals} fresh deals from {SPOT_DEALS}")
    cols = label_rows(range(SPOT_DEALS, SPOT_DEALS + cfg.spot_deals), 1)
    oracle, identity = oracle_from_spec(str(weights), "cpu")
    data = as_tensors(cols)
    with torch.no_grad():
        q_net, legal = oracle.query(as_batch(data))
    q_true = data["q"]
    v_net, v_true = _values(q_net, legal), _values(q_true, legal)
    err = v_net - v_true
    rng = np.random.default_rng(cfg.seed + 2)
    shown = sorted(rng.choice(len(err), min(cfg.spot_show, len(err)), replace=False).tolist())
    from ..rules.tables import DECL_NAMES
    log("   exact V | network V | error | position")
    for i in shown:
        log(f"   {float(v_true[i]):+7.1f} | {float(v_net[i]):+9.1f} | {float(err[i]):+5.1f} | "
            f"deal {int(data['deal'][i])}, trick {int(data['depth'][i]) // 4 + 1}, "
            f"{DECL_NAMES[int(data['decl'][i])]}, {int(legal[i].sum())} legal")
    q_err = (q_net - q_true)[legal]
    out = {"weights": str(weights), "positions": len(err),
           "v_mae": float(err.abs().mean()), "v_mean_signed": float(err.mean()),
           "q_mae": float(q_err.abs().mean()), "q_mse": float(((q_err / 42) ** 2).mean()),
           "shown": [{"exact_v": float(v_true[i]), "network_v": float(v_net[i]),
                      "deal": int(data["deal"][i]), "depth": int(data["depth"][i])}
                     for i in shown]}
    log(f"   V: mean abs error {out['v_mae']:.2f} points, mean signed {out['v_mean_signed']:+.2f}; "
        f"Q: mean abs {out['q_mae']:.2f}, MSE (Q/42) {out['q_mse']:.4f} over {len(err)} positions")
    return out


def pimc_agreement(weights, cfg: LadderConfig, log=print) -> dict:
    """Share of E[Q] decisions (>= 2 legal) where the network's argmax is an exact argmax on
    the same worlds, overall and per trick."""
    from ..engine.pipeline import Engine, EngineConfig
    from ..engine.policy import TIE_TOL
    from ..oracle.exact import ExactOracle
    from ..oracle.factory import oracle_from_spec
    from .validation import run_decisions, trick_of

    log(f"step 4: PIMC agreement, {cfg.pimc_games} fresh games from seed {PIMC_SEEDS}, "
        f"N = {cfg.pimc_worlds}, network against the solver on the same worlds")
    oracle, _ = oracle_from_spec(str(weights), "cpu")
    ecfg = EngineConfig(n_samples=cfg.pimc_worlds, seed=cfg.seed)
    records = Engine(oracle, ecfg).play(list(range(PIMC_SEEDS, PIMC_SEEDS + cfg.pimc_games)))
    exact = run_decisions(records, ExactOracle(), {}, seed=cfg.seed, n_samples=cfg.pimc_worlds)
    legal = records["legal_mask"]
    multi = legal.sum(1) >= 2
    net_q, ex_q = records["e_q_mean"].double(), exact["e_q_mean"].double()
    pick = torch.where(legal, net_q, torch.full_like(net_q, float("-inf"))).argmax(1)
    best = _values(ex_q, legal)
    agree = ex_q.gather(1, pick[:, None])[:, 0] >= best - TIE_TOL
    trick = trick_of(records)
    per = {int(t): float(agree[multi & (trick == t)].double().mean())
           for t in torch.unique(trick[multi]).tolist()}
    out = {"weights": str(weights), "games": cfg.pimc_games, "worlds": cfg.pimc_worlds,
           "decisions": int(multi.sum()), "agreement": float(agree[multi].double().mean()),
           "by_trick": per}
    out["pass"] = out["agreement"] > 0.90
    log(f"   agreement {100 * out['agreement']:.1f}% of {out['decisions']} decisions; by trick "
        + " / ".join(f"{100 * v:.0f}%" for v in per.values()))
    return out


def inference_ms(weights, repeats: int = 300) -> float:
    """Median milliseconds of one one-position forward (TorchScript, tokenizer included,
    this process's CPU threads)."""
    from ..oracle.factory import oracle_from_spec

    oracle, _ = oracle_from_spec(str(weights), "cpu")
    cols = label_rows([SPOT_DEALS], 1)
    b = as_batch(as_tensors(cols), slice(0, 1))
    inputs = (b.hands, b.remaining, b.decl, b.trick, b.actor)
    times = []
    with torch.no_grad():
        for _ in range(20):
            oracle.module(*inputs)
        for _ in range(repeats):
            t0 = time.perf_counter()
            oracle.module(*inputs)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def success_table(weights, spot: dict | None, pimc: dict | None) -> list[dict]:
    """Rows (metric, target, measured, met) for the trained file `weights`."""
    from ..oracle.weights import read_weights

    _, meta = read_weights(weights)
    metrics = meta.get("metrics") or {}
    val = metrics.get("val", metrics)       # files written by the trainer hold the val dict
    rows = [("val MSE (same deals; the training run's val split)", "< 0.005",
             val.get("loss"), lambda x: x < 0.005)]
    if spot:
        rows += [("test MSE (fresh deals)", "< 0.01", spot["q_mse"], lambda x: x < 0.01),
                 ("mean abs error of Q, fresh deals (points)", "< 2", spot["q_mae"], lambda x: x < 2),
                 ("mean abs error of V, fresh deals (points)", "< 2", spot["v_mae"], lambda x: x < 2)]
    if pimc:
        rows.append(("PIMC move agreement", "> 90%", pimc["agreement"], lambda x: x > 0.9))
    rows += [("inference, one position (ms, CPU, 1 thread)", "< 1", inference_ms(weights),
              lambda x: x < 1),
             ("model size (MB)", "< 2", Path(weights).stat().st_size / 1e6, lambda x: x < 2)]
    return [{"metric": m, "target": t, "measured": v, "met": None if v is None else bool(ok(v))}
            for m, t, v, ok in rows]
