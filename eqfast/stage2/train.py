"""Train the Stage 2 model on eqfast-generate records (the train and val splits as written).

Loss (units of Q/42, docs/STAGE2.md):

    mse  (default)  sum_r w_r sum_{legal i} (μ_ri - E[Q]_ri)² / sum_r w_r n_legal_r
    nll             mse + the Gaussian negative log-likelihood of the label under the
                    variance head, with μ held fixed (detached) in it:
                    sum_r w_r sum_{legal i} ½ (log v_ri + (μ_ri - E[Q]_ri)² / v_ri) / (same),
                    v = σ²_ri + s²_ri, σ² = exp(log_var) the model's predictive variance and
                    s² = e_q_var / ess the label's own sampling variance (stage2/data.py).
                    μ is learned by the MSE alone, so both variants fit the same μ; the
                    head learns how far the label lies from μ beyond the sampling noise.

w_r is 1, or `forced_weight` (default 0.1) for a decision with one legal move.

`mc_weight` λ > 0 replaces E[Q] in every term above, at the slot of the move actually
played only, by (1 - λ) E[Q] + λ realized_to_go: the Monte Carlo return of that move in
the game as it was played (stage2/data.py `mc_target`). The other slots keep E[Q]; the
label variance s² of the nll term is left as it is. Evaluation (regret, MSE, agreement)
is always against E[Q].
`centered_weight` c > 0 adds c times the same weighted mean of ((μ - E[Q]) - its mean over
the decision's legal moves)²: the error in the differences between moves, which alone
decide the argmax, against the error in the position's overall level.
`policy_weight` ρ > 0 (a model with `policy_head` 1) adds ρ times the auxiliary policy
cross-entropy sum_r w_r (-log softmax over the legal slots of the policy logits, at the
slot of `action_taken`) / sum_r w_r: behaviour cloning of the moves the data's games
played. ρ = 0 (the default) leaves the loss, and every step, exactly as without it.

`label_tricks` (with `init`) keeps the data's labels only at the decisions of those tricks
(1..7); every other decision's target is the `init` model's own μ, computed once before
training (stage2/data.py `own_targets_outside`): the run changes the model's values, so
its play, in those tricks and holds them elsewhere (self-distillation), e.g. E[Q] labels
late in the hand on a model trained on rollouts. Those decisions weigh 0 in the nll term,
and validation (regret, MSE) is against the same mixed target.
`tricks` trains and validates on the decisions of those tricks only (stage2/data.py
`rows_of_tricks`): a model for part of the hand, e.g. the late tricks, where exact labels
are cheap and the play is most exact, which the `split` player (eqfast/play/policies.py)
uses from its first trick on. `min_worlds` N > 1 keeps only the decisions whose label
rests on at least N worlds or on every consistent one (`well_labelled`): runs that
labelled some tricks only (one world elsewhere) can then join one model's data.

`ema` d > 0 keeps, beside the trained weights, their exponential moving average over the
steps, a_t = d_t a_(t-1) + (1 - d_t) w_t with d_t = min(d, (1 + t) / (10 + t)) (t counting
this run's steps, so the first steps do not pull the average towards the start): the
evaluations, best.safetensors and last.safetensors are then the average's, while training
goes on from the trained weights. It averages one run's last steps as eqfast-average-stage2
averages runs (docs/STAGE2.md, "Averaging the loop's models").

AdamW, linear warm-up then cosine decay to `min_lr_frac` * lr at `steps` (or over the spent
fraction of `time_budget`). Each step draws `batch` records uniformly (with replacement)
from the train split with a CPU generator keyed by mix_seed(seed, step), whatever the
device, so a run is a pure function of (data, arguments, seed) and a resumed run continues
the same sequence: interrupted and resumed equals straight, bit for bit on the CPU
(tests/test_stage2.py). A `time_budget` run depends on the machine's speed.

Run directory (as eqfast/oracle/train.py):
    checkpoint.safetensors  model (+ its average) + optimizer state + history (atomic;
                            resumed automatically)
    best.safetensors        weights (stage2/weights.py format) with the lowest val regret
    last.safetensors        weights at the latest evaluation
    history.jsonl           one JSON line per evaluation (the learning curve)
    config.json             the arguments of the run
"""
from __future__ import annotations

import copy
import json
import math
import platform
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from ..oracle.train import StepClock, load_checkpoint, lr_at, save_checkpoint
from ..rules.deal import mix_seed
from ..rules.tables import N_TRICKS
from ..utils.atomic import atomic_write_text
from .defaults import LENGTH_GROUPS, PRECISIONS
from .average import describe, source_card
from .data import (FORCED_WEIGHT, data_card, data_hash, in_tricks, load_split,
                   own_targets_outside, prepare_rows, select_rows, well_labelled)
from .evaluate import metrics as eval_metrics
from .evaluate import predict
from .model import (CONFIG_OPTIONAL, DEFAULT_CONFIG, Q_SCALE, build_model, check_config,
                    count_parameters, forward_by_length, is_belief, is_transformer)
from .weights import is_oracle_file, load_stage2_with_meta, save_stage2

LOSSES = ("mse", "nll")
#: arguments a resumed run must share with the checkpoint (the others may change)
RESUME_KEYS = ("arch", "loss", "forced_weight", "centered_weight", "steps", "batch", "lr",
               "weight_decay", "warmup", "min_lr_frac", "seed", "time_budget", "init",
               "mc_weight", "policy_weight", "precision", "ema", "label_tricks", "tricks",
               "min_worlds")
#: the value a checkpoint written before a RESUME_KEYS entry existed had
RESUME_DEFAULTS = {"mc_weight": 0.0, "policy_weight": 0.0, "precision": "fp32", "ema": 0.0,
                   "label_tricks": None, "tricks": None, "min_worlds": 1}


@dataclass
class TrainConfig:
    data: str | list[str]      # an eqfast-generate output directory (train/ val/ test/),
                               # or several: their union (stage2.data.data_dirs)
    run: str
    arch: dict = field(default_factory=lambda: dict(DEFAULT_CONFIG))
    loss: str = "mse"
    forced_weight: float = FORCED_WEIGHT
    centered_weight: float = 0.0
    steps: int = 20000
    batch: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int = 500
    min_lr_frac: float = 0.05
    seed: int = 0
    val_rows: int = 50000
    eval_every: int = 1000
    ckpt_every: int = 1000
    device: str = "cpu"
    stop_at: int | None = None   # leave the loop after this step (checkpointed), as if interrupted
    time_budget: float | None = None  # seconds of training wall time; schedule over time
    init: str | None = None      # start from these Stage 2 weights (same architecture)
    length_groups: int = LENGTH_GROUPS  # forwards per step by length; float rounding only
    mc_weight: float = 0.0       # λ: played move's target (1 - λ) E[Q] + λ realized_to_go
    policy_weight: float = 0.0   # ρ: weight of the auxiliary policy head's cross-entropy
    precision: str = "fp32"      # "bf16": the forward under autocast (a GPU's tensor cores)
    ema: float = 0.0             # d: evaluate and save the weights' moving average (0: off)
    label_tricks: list[int] | None = None  # labels at these tricks only; init's μ elsewhere
    tricks: list[int] | None = None  # train and validate on these tricks' decisions only
    min_worlds: int = 1          # and on decisions labelled from >= this many worlds only


def check_train_config(cfg: TrainConfig) -> None:
    """ValueError naming the first bad setting."""
    if cfg.loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {cfg.loss!r}")
    check_config(cfg.arch)
    if cfg.loss == "nll" and not cfg.arch["var_head"]:
        raise ValueError("loss 'nll' needs a model with a variance head (var_head 1)")
    if not 0 <= cfg.forced_weight <= 1:
        raise ValueError(f"forced_weight must be in [0, 1], got {cfg.forced_weight}")
    if not cfg.centered_weight >= 0:
        raise ValueError(f"centered_weight must be >= 0, got {cfg.centered_weight}")
    if not 0 <= cfg.mc_weight <= 1:
        raise ValueError(f"mc_weight must be in [0, 1], got {cfg.mc_weight}")
    if not (cfg.policy_weight >= 0 and math.isfinite(cfg.policy_weight)):
        raise ValueError(f"policy_weight must be >= 0, got {cfg.policy_weight}")
    if cfg.policy_weight > 0 and not cfg.arch.get("policy_head"):
        raise ValueError("policy_weight > 0 needs a model with a policy head (policy_head 1)")
    for name in ("steps", "batch", "eval_every", "ckpt_every", "val_rows"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {cfg.warmup}")
    if not cfg.lr > 0:
        raise ValueError(f"lr must be > 0, got {cfg.lr}")
    if cfg.time_budget is not None and not cfg.time_budget > 0:
        raise ValueError(f"time_budget must be > 0 seconds, got {cfg.time_budget}")
    if cfg.length_groups < 1:
        raise ValueError(f"length_groups must be >= 1, got {cfg.length_groups}")
    if not 0 <= cfg.ema < 1:
        raise ValueError(f"ema must be in [0, 1), got {cfg.ema}")
    if cfg.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {cfg.precision!r}")
    if cfg.label_tricks is not None:
        if cfg.init is None:
            raise ValueError("label_tricks needs init: the other tricks' targets are the init "
                             "model's own values")
        if not cfg.label_tricks or any(t not in range(1, N_TRICKS + 1)
                                       for t in cfg.label_tricks):
            raise ValueError(f"label_tricks must be tricks in 1..{N_TRICKS}, got "
                             f"{cfg.label_tricks}")
    if cfg.min_worlds < 1:
        raise ValueError(f"min_worlds must be >= 1, got {cfg.min_worlds}")
    if cfg.tricks is not None and (not cfg.tricks or any(t not in range(1, N_TRICKS + 1)
                                                         for t in cfg.tricks)):
        raise ValueError(f"tricks must be tricks in 1..{N_TRICKS}, got {cfg.tricks}")


def init_weights(model: torch.nn.Module, cfg: TrainConfig) -> dict:
    """Load `cfg.init` into `model` (a fresh run's starting point); the record of it for
    the training card: path, SHA-256 of the file, and its own training record's steps.
    The run may have a higher seen-tiles level or more layers than the file (`grown`):
    the model then starts with the file's outputs exactly. Stage2WeightsError for an
    unreadable file; ValueError when the architectures differ otherwise.

    A belief model (belief.py) starts from a belief model's file of the same config, or
    from an embedding-sum oracle's weights file (`init_from_oracle`: the oracle read on
    the actor's beliefs)."""
    if is_belief(check_config(cfg.arch)) and is_oracle_file(cfg.init):
        from .belief import init_from_oracle
        meta = init_from_oracle(model, cfg.init)
        return {**source_card(cfg.init, meta), "oracle": meta["config"]}
    start, meta = load_stage2_with_meta(cfg.init)
    if not (is_transformer(cfg.arch) and is_transformer(meta["config"])):
        if check_config(meta["config"]) != check_config(cfg.arch):
            raise ValueError(f"{cfg.init}: --init weights have the architecture "
                             f"{meta['config']}, the run {cfg.arch}: a belief or split model "
                             "starts from one of the same config (a belief model also from "
                             "an oracle's weights)")
        model.load_state_dict(start.state_dict())
        return source_card(cfg.init, meta)
    have, want = check_config(meta["config"]), check_config(cfg.arch)
    same = ({**have, "seen_tiles": 0, "n_layers": 0} == {**want, "seen_tiles": 0, "n_layers": 0}
            and have["seen_tiles"] <= want["seen_tiles"] and have["n_layers"] <= want["n_layers"])
    if not same:
        raise ValueError(f"{cfg.init}: --init weights have the architecture {meta['config']}, "
                         f"the run {cfg.arch}; give the run the same --d-model, --heads, "
                         "--d-ff and variance head (--seen-tiles and --layers the same or "
                         "higher)")
    model.load_state_dict(grown(start.state_dict(), model.state_dict()))
    return source_card(cfg.init, meta)


def grown(state: dict, target: dict) -> dict:
    """The weights `state` of a model laid out as `target` (a state dict of the run's
    model), whose seen-tiles level or layer count may be higher: each seen-tiles level's
    summary begins with the one below it, so the added columns (and at level 0 the whole
    read) start at zero; added layers come after the file's, with their random weights but
    the attention output and second feed-forward layer zero, so each adds nothing to its
    input (a pre-norm residual layer is then the identity). Either way the run starts from
    the file's outputs exactly (tests/test_stage2.py) and learns the new parts from there."""
    out = dict(state)
    key = "seen_embed.0.weight"
    if key in target and (key not in state or state[key].shape != target[key].shape):
        wide = torch.zeros_like(target[key])
        if key in state:
            wide[:, :state[key].shape[1]] = state[key]
        out[key] = wide
    for name, value in target.items():
        if name in out:
            continue
        if name.startswith("layers.") and name.split(".", 2)[2] in (
                "proj.weight", "proj.bias", "ff2.weight", "ff2.bias"):
            out[name] = torch.zeros_like(value)
        else:
            out[name] = value.clone()
    return out


def policy_cross_entropy(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """sum_r w_r (-log softmax over the legal slots of logits_r at batch["action"]_r)
    / sum_r w_r: the auxiliary policy term of the module docstring."""
    legal = batch["legal"].bool()
    masked = torch.where(legal, logits.float(), torch.full_like(logits.float(), float("-inf")))
    logp = torch.log_softmax(masked, dim=1).gather(1, batch["action"].long()[:, None])[:, 0]
    w = batch["weight"]
    return -(w * logp).sum() / w.sum().clamp(min=1e-12)


def stage2_loss(mu: torch.Tensor, log_var: torch.Tensor, batch: dict, loss: str = "mse",
                centered_weight: float = 0.0, policy_logits: torch.Tensor | None = None,
                policy_weight: float = 0.0) -> torch.Tensor:
    """The loss of the module docstring; mu, log_var in points / log points² as the model
    gives them, batch: `prepare_rows` tensors of the same rows; policy_logits [B, 7] the
    policy head's (`Stage2Model.forward_policy`), used when policy_weight > 0."""
    legal = batch["legal"].to(mu.dtype)
    w = batch["weight"][:, None] * legal
    denom = w.sum().clamp(min=1e-12)
    diff = (mu - batch.get("target", batch["q"])) / Q_SCALE
    total = (w * diff ** 2).sum() / denom
    if centered_weight > 0:
        mean = (diff * legal).sum(1, keepdim=True) / legal.sum(1, keepdim=True).clamp(min=1)
        total = total + centered_weight * (w * (diff - mean) ** 2).sum() / denom
    if loss == "nll":
        v = (log_var - 2.0 * math.log(Q_SCALE)).exp() + batch["s2"] / Q_SCALE ** 2
        nll = 0.5 * (v.log() + diff.detach() ** 2 / v)
        if "label_w" in batch:          # decisions whose target is a model's own value
            nll = nll * batch["label_w"][:, None]
        total = total + (w * nll).sum() / denom
    if policy_weight > 0:
        total = total + policy_weight * policy_cross_entropy(policy_logits, batch)
    return total


def machine() -> str:
    """The CPU model and core count (or the GPU's name) the run trained on, for the card."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os
    return f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def _batch(rows: dict, idx: torch.Tensor, device) -> dict:
    return {k: v[idx].to(device) for k, v in rows.items()}


def evaluate_rows(model, rows: dict, device, loss: str, centered_weight: float = 0.0) -> dict:
    """Val figures (evaluate.metrics) plus the training objective on these rows."""
    mu, log_var = predict(model, rows["tokens"], rows["lengths"], device)
    m = eval_metrics(mu, log_var if model.var_head else None, rows)
    m["loss"] = float(stage2_loss(mu, log_var, rows, loss, centered_weight))
    return m


def keep_own_values(cfg: TrainConfig, train_rows: dict, train_idx: torch.Tensor,
                    val_rows: dict, val_idx: torch.Tensor, log=print) -> None:
    """`label_tricks`: the init model's μ as the target outside those tricks, in both
    splits (computed from the file, so a resumed run gets the same targets)."""
    start, _ = load_stage2_with_meta(cfg.init)
    for rows, idx in ((train_rows, train_idx), (val_rows, val_idx)):
        mu, _ = predict(start, rows["tokens"], rows["lengths"])
        own_targets_outside(rows, idx, cfg.label_tricks, mu)
    kept = float(train_rows["label_w"].mean())
    log(f"labels at tricks {','.join(map(str, cfg.label_tricks))} ({kept:.1%} of the train "
        f"records); {cfg.init}'s own values elsewhere", flush=True)


def train(cfg: TrainConfig, log=print, progress: bool = True) -> dict:
    """Train (or resume) per `cfg`; returns the last evaluation's metrics."""
    check_train_config(cfg)
    cfg = replace(cfg, arch=check_config(cfg.arch))      # every key, optional ones filled in
    run = Path(cfg.run)
    device = torch.device(cfg.device)
    train_records, train_metas = load_split(cfg.data, "train")
    val_records, val_metas = load_split(cfg.data, "val")
    card = data_card(cfg.data, {"train": (train_records, train_metas),
                                "val": (val_records, val_metas)})
    dh = data_hash(cfg.data)
    train_rows = prepare_rows(train_records, cfg.forced_weight, cfg.mc_weight)
    val_rows = prepare_rows(val_records, cfg.forced_weight, cfg.mc_weight)
    train_dec, val_dec = train_records["decision_idx"], val_records["decision_idx"]
    if cfg.tricks is not None or cfg.min_worlds > 1:
        keep = [torch.ones(len(d), dtype=torch.bool) for d in (train_dec, val_dec)]
        if cfg.tricks is not None:
            keep = [k & in_tricks(d, cfg.tricks) for k, d in zip(keep, (train_dec, val_dec))]
            log(f"decisions of tricks {','.join(map(str, cfg.tricks))} only", flush=True)
        if cfg.min_worlds > 1:
            kept = [k & well_labelled(r, cfg.min_worlds)
                    for k, r in zip(keep, (train_records, val_records))]
            log(f"labels from >= {cfg.min_worlds} worlds (or every consistent one) only: "
                f"{int(kept[0].sum())} of {int(keep[0].sum())} train decisions", flush=True)
            keep = kept
        train_rows, val_rows = select_rows(train_rows, keep[0]), select_rows(val_rows, keep[1])
        train_dec, val_dec = train_dec[keep[0]], val_dec[keep[1]]
        if not len(train_dec) or not len(val_dec):
            raise ValueError("no train or val decisions left"
                             + (f" in tricks {cfg.tricks}" if cfg.tricks is not None else "")
                             + (f" labelled from >= {cfg.min_worlds} worlds"
                                if cfg.min_worlds > 1 else ""))
    val_rows = {k: v[:cfg.val_rows] for k, v in val_rows.items()}
    if cfg.label_tricks is not None:
        keep_own_values(cfg, train_rows, train_dec, val_rows, val_dec[:cfg.val_rows], log)
    del train_records, val_records
    if device.type == "cuda":
        # the whole split on the device (371 bytes a record): a step's gather is then one
        # kernel, not a host copy of the batch
        train_rows = {k: v.to(device) for k, v in train_rows.items()}

    run.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.arch).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    ckpt = run / "checkpoint.safetensors"
    state = {"records_seen": 0, "best_regret": None, "history": [], "wall_s": 0.0,
             "config": asdict(cfg)}
    step = 0
    # the weights' moving average (cfg.ema), evaluated and saved in the trained weights' place
    average = copy.deepcopy(model).eval() if cfg.ema > 0 else None
    extra = {"ema": average} if average is not None else None
    if ckpt.exists():
        step, state = load_checkpoint(ckpt, model, optimizer, extra)
        saved = state.get("config", {})
        if isinstance(saved.get("arch"), dict) and is_transformer(saved["arch"]):
            # transformer keys added since fill in their default
            saved["arch"] = {**CONFIG_OPTIONAL, **saved["arch"]}
        for k, v in RESUME_DEFAULTS.items():
            saved.setdefault(k, v)
        changed = [k for k in RESUME_KEYS if saved.get(k) != asdict(cfg)[k]]
        if changed:
            raise ValueError(f"{ckpt}: the run was started with other settings ("
                             + ", ".join(f"{k}: {saved.get(k)!r} there, {asdict(cfg)[k]!r} now"
                                         for k in changed)
                             + "); resume with the same ones or use another --run")
        log(f"resumed {ckpt} at step {step} ({state['records_seen']} records seen)", flush=True)
    elif cfg.init is not None:
        state["init"] = init_weights(model, cfg)
        log(f"started from {cfg.init} (sha256 {state['init']['sha256'][:16]}, "
            f"{describe(state['init'])})", flush=True)
        if average is not None:
            average.load_state_dict(model.state_dict())
    atomic_write_text(run / "config.json", json.dumps(asdict(cfg), indent=1) + "\n")
    n = train_rows["q"].shape[0]
    log(f"{count_parameters(model)} parameters ({cfg.arch}); {n} train records, "
        f"{val_rows['q'].shape[0]} val records ({card['splits']['train']['games']} + "
        f"{card['splits']['val']['games']} games); loss {cfg.loss}, forced weight "
        f"{cfg.forced_weight}, centered weight {cfg.centered_weight}", flush=True)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else machine()

    metrics: dict = {}
    clock = StepClock(cfg, step, state["wall_s"], "train-stage2", log, show=progress)
    model.train()
    while step < clock.end:
        gen = torch.Generator().manual_seed(mix_seed(cfg.seed, step))
        idx = torch.randint(n, (cfg.batch,), generator=gen).to(train_rows["q"].device)
        batch = _batch(train_rows, idx, device)
        for g in optimizer.param_groups:
            g["lr"] = lr_at(cfg, step, clock.wall())
        with torch.autocast(device.type, torch.bfloat16, enabled=cfg.precision == "bf16"):
            out = forward_by_length(model, batch["tokens"], batch["lengths"],
                                    cfg.length_groups, policy=cfg.policy_weight > 0)
        # (mu, log_var[, policy logits]), the loss in fp32 at any precision
        mu, log_var, *rest = (t.float() for t in out)
        logits = rest[0] if rest else None
        loss = stage2_loss(mu, log_var, batch, cfg.loss, cfg.centered_weight, logits,
                           cfg.policy_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if average is not None:
            decay = min(cfg.ema, (1 + step) / (10 + step))
            with torch.no_grad():
                for a, w in zip(average.parameters(), model.parameters()):
                    a.lerp_(w, 1 - decay)
        state["records_seen"] += cfg.batch
        last, evaluate = clock.after_step(step, loss)
        if evaluate:
            scored = model if average is None else average
            metrics = evaluate_rows(scored, val_rows, device, cfg.loss, cfg.centered_weight)
            state["wall_s"] = clock.wall()
            point = {"step": step, "records_seen": state["records_seen"],
                     "wall_s": round(state["wall_s"], 1), "train_loss": clock.loss,
                     **{k: metrics[k] for k in ("loss", "mse", "mae", "agreement", "regret")}}
            state["history"].append(point)
            atomic_write_text(run / "history.jsonl",
                              "".join(json.dumps(h) + "\n" for h in state["history"]))
            clock.bar.set_postfix(loss=clock.loss, val_mse=metrics["mse"],
                                  val_regret=metrics["regret"])
            log(f"step {step}: train loss {clock.loss:.5f}, val MSE {metrics['mse']:.3f} "
                f"MAE {metrics['mae']:.3f} agreement {metrics['agreement']:.4f} regret "
                f"{metrics['regret']:.4f}", flush=True)
            train_info = {"seed": cfg.seed, "step": step, "steps": cfg.steps,
                          "records_seen": state["records_seen"], "wall_s": round(state["wall_s"], 1),
                          "batch": cfg.batch, "lr": cfg.lr, "loss": cfg.loss,
                          "forced_weight": cfg.forced_weight,
                          "centered_weight": cfg.centered_weight, "mc_weight": cfg.mc_weight,
                          **({"policy_weight": cfg.policy_weight} if cfg.policy_weight else {}),
                          **({"ema": cfg.ema} if cfg.ema else {}),
                          **({"label_tricks": list(cfg.label_tricks)}
                             if cfg.label_tricks is not None else {}),
                          **({"tricks": list(cfg.tricks)} if cfg.tricks is not None else {}),
                          **({"min_worlds": cfg.min_worlds} if cfg.min_worlds > 1 else {}),
                          "device": device_name, "precision": cfg.precision,
                          "time_budget_s": cfg.time_budget, "init": state.get("init"),
                          "data_card": card}
            val_metrics = {"split": "val", **metrics}
            save_stage2(run / "last.safetensors", scored, cfg.arch, dh, val_metrics, train_info)
            if state["best_regret"] is None or metrics["regret"] < state["best_regret"]:
                state["best_regret"] = metrics["regret"]
                save_stage2(run / "best.safetensors", scored, cfg.arch, dh, val_metrics,
                            train_info)
        if step % cfg.ckpt_every == 0 or last:
            state["wall_s"] = clock.wall()
            save_checkpoint(ckpt, model, optimizer, step, state, extra)
        if clock.out_of_time:
            log(f"time budget of {cfg.time_budget:.0f} s spent at step {step}", flush=True)
            break
    clock.bar.close()
    return metrics
