"""Train an oracle network on solver-labelled shards (see dataset.py).

Loss: mean squared error of Q/42 over the legal slots of each row (optionally plus a
weighted MSE of the row-centred values, see `masked_mse`). Adam(W), linear warm-up
then cosine decay to `min_lr_frac` * lr at `steps`. Each step draws `batch` rows uniformly
(with replacement) from the train split with a generator keyed by mix_seed(seed, step), so a
run is a pure function of (data, arguments, seed) and resuming from a checkpoint continues
the same sequence. With `follow`, new shards written by a running generator are picked up
every `reload_every` steps and appended to the rows (then the run also depends on when they
arrived).

`time_budget` (seconds) trains for a fixed wall time instead of a fixed step count: the
cosine decay runs over the elapsed fraction of the budget and the run stops (evaluated and
checkpointed) once the budget is spent; `steps` stays an upper bound. Such a run depends on
the machine's speed, so only step-scheduled runs resume bit-identically. `init` starts a
fresh run from the weights of a weights file of the same architecture (fine-tuning).

On CUDA the rows live on the device and each step's indices are drawn there (from a CUDA
generator keyed the same way, so a CUDA run draws other rows than a CPU run), AdamW is the
fused kernel and the loss is read back every `LOSS_EVERY` steps only: the host never waits
on the device between those reads.

Several processes (`torchrun --nproc-per-node K -m eqfast.cli.train_oracle ...`): each
rank holds the data, draws the same global batch of `batch` rows per step and trains on
its interleaved share of it (rows rank, rank + K, ...) in DistributedDataParallel (NCCL on
CUDA, gloo on the CPU). Each rank's loss is normalized by the global batch's legal count
and scaled by K, so the averaged gradient is the one-process gradient of the same batch:
a K-rank run follows the one-process run up to float summation order. Rank 0 alone
evaluates and writes the run directory; every rank resumes from its checkpoint.

`precision="bf16"` trains the forward under bfloat16 autocast (weights and optimizer stay
float32); `compile=True` wraps the network in `torch.compile`.

Run directory:
    checkpoint.safetensors  model + optimizer state + history (atomic; resumed automatically)
    best.safetensors        weights (weights.py format) with the best validation q_gap
    last.safetensors        weights at the latest evaluation
    history.jsonl           one JSON line per evaluation (the learning curve)
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..rules.deal import mix_seed
from ..utils.atomic import atomic_save_safetensors, atomic_write_text
from .dataset import COLUMNS, SPLITS, shard_paths
from .evaluate import fidelity
from .network import DEFAULT_CONFIGS, Q_SCALE, build_network, count_parameters
from .tokenizer import actor_slot_tiles, tokenize
from .weights import save_weights


@dataclass
class TrainConfig:
    data: str  # shard directory, or several separated by commas
    run: str
    arch: dict = field(default_factory=lambda: dict(DEFAULT_CONFIGS["mlp"]))
    steps: int = 20000
    batch: int = 1024
    lr: float = 2e-3
    weight_decay: float = 0.1
    warmup: int = 500
    min_lr_frac: float = 0.05
    seed: int = 0
    val_rows: int = 50000
    eval_every: int = 1000
    ckpt_every: int = 1000
    follow: bool = False
    reload_every: int = 2000
    max_shards: int | None = None
    device: str = "cpu"
    centered_weight: float = 0.0
    stop_at: int | None = None  # leave the loop after this step (checkpointed), as if interrupted
    precision: str = "fp32"     # fp32, or bf16 (autocast of the forward)
    value_weight: float = 0.0   # weight of the auxiliary value loss (networks with a value head)
    compile: bool = False       # torch.compile the network
    time_budget: float | None = None  # seconds of training wall time; schedule over time
    init: str | None = None     # weights file to start a fresh run from (same architecture)


#: Steps between reads of the loss (each read waits for the device).
LOSS_EVERY = 50


class StepClock:
    """The step bookkeeping of a training loop (this trainer's and Stage 2's): the wall time
    trained across resumes, the step to stop before (cfg.steps, cfg.stop_at, or now if the
    time budget is already spent), the progress bar over this invocation's steps, and after
    each step whether the run ends and whether to evaluate; the loss is read back (a device
    wait) every LOSS_EVERY steps and at evaluations only.

    cfg needs steps, stop_at, time_budget and eval_every."""

    def __init__(self, cfg, step: int, wall_trained: float, name: str, log, show: bool = True):
        from ..utils.progress import Progress

        self.cfg = cfg
        self._t0, self._wall0 = time.perf_counter(), wall_trained
        self.end = cfg.steps if cfg.stop_at is None else min(cfg.steps, cfg.stop_at)
        if cfg.time_budget is not None and wall_trained >= cfg.time_budget:
            log(f"the time budget of {cfg.time_budget:.0f} s is spent "
                f"({wall_trained:.0f} s trained)")
            self.end = step
        # a time budget ends the run before --steps: no step total (nor an ETA) to show then
        timed = cfg.time_budget is not None
        self.bar = Progress(total=None if timed else max(0, self.end - step),
                            desc=f"{name} (from step {step}, {cfg.time_budget:.0f} s budget)"
                            if timed else f"{name} (steps {step}..{self.end})",
                            unit="steps", disable=not show)
        self.loss = float("nan")       # the last loss read back
        self.out_of_time = False

    def wall(self) -> float:
        """Seconds trained, earlier invocations of the run (before a resume) included."""
        return self._wall0 + time.perf_counter() - self._t0

    def after_step(self, step: int, loss: torch.Tensor) -> tuple[bool, bool]:
        """(last, evaluate) once `step` steps are done; advances the bar, reads the loss
        when due (self.loss) and notes a spent time budget (self.out_of_time)."""
        cfg = self.cfg
        self.out_of_time = cfg.time_budget is not None and self.wall() >= cfg.time_budget
        last = step == self.end or self.out_of_time
        evaluate = step % cfg.eval_every == 0 or last
        if step % LOSS_EVERY == 0 or evaluate:
            self.loss = loss.item()
            self.bar.update(1, loss=self.loss)
        else:
            self.bar.update(1)
        return last, evaluate


class Ranks:
    """This process's place among the ranks torchrun started (one rank without torchrun)."""

    def __init__(self):
        import os

        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local = int(os.environ.get("LOCAL_RANK", "0"))

    @property
    def main(self) -> bool:
        return self.rank == 0

    def start(self, device: torch.device) -> torch.device:
        """Join the process group (if several ranks); the device this rank trains on."""
        if self.world == 1:
            return device
        import torch.distributed as dist

        if device.type == "cuda":
            device = torch.device("cuda", self.local)
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return device

    def stop(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()


class ShardCache:
    """Tokenized rows of every shard read so far, split into train and val (int16 codes)."""

    def __init__(self, directories, max_shards: int | None = None):
        if isinstance(directories, (str, Path)):
            directories = [d for d in str(directories).split(",") if d]
        self.directories = [Path(d) for d in directories]
        self.max_shards = max_shards  # per directory
        self.parts: dict[str, dict[str, dict[str, torch.Tensor]]] = {}
        self.hashes: dict[str, str] = {}

    def refresh(self) -> list[str]:
        """Read shards not seen yet; the keys of those added (empty: nothing new)."""
        from safetensors.numpy import load

        added = []
        paths = [p for d in self.directories for p in shard_paths(d)[:self.max_shards]]
        for p in paths:
            key = f"{p.parent.name}/{p.name}"
            if key in self.parts:
                continue
            raw = p.read_bytes()
            try:
                cols = load(raw)
            except Exception as e:
                raise ValueError(f"cannot read oracle data shard {p}: {e}") from e
            self.hashes[key] = hashlib.sha256(raw).hexdigest()[:16]
            self.parts[key] = {s: prepare_rows(cols, cols["split"] == i)
                                  for i, s in enumerate(SPLITS) if s != "test"}
            added.append(key)
        if not self.parts:
            raise FileNotFoundError(f"no shard_*.safetensors files in {self.directories}")
        return added

    def split(self, name: str, keys: list[str] | None = None) -> dict[str, torch.Tensor]:
        """Rows of split `name` of the shards `keys` (all read so far when None), in key order."""
        parts = [self.parts[k][name] for k in sorted(self.parts if keys is None else keys)]
        return {c: torch.cat([p[c] for p in parts]) for c in parts[0]}

    def data_hash(self) -> str:
        """Hash of the shards read: their directory/file names and content hashes."""
        h = hashlib.sha256()
        for name in sorted(self.hashes):
            h.update(f"{name}:{self.hashes[name]};".encode())
        return h.hexdigest()[:16]


def prepare_rows(cols: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, torch.Tensor]:
    """Shard columns -> compact training tensors: codes int16 [R,28], slot tiles int8 [R,7],
    q float32 [R,7], legal bool [R,7], depth int8 [R]."""
    t = {c: torch.from_numpy(np.ascontiguousarray(cols[c][keep])) for c in COLUMNS}
    hands, actor = t["hands"].long(), t["actor"].long()
    codes = tokenize(hands, t["remaining"].long(), t["decl"].long(), t["trick"].long(), actor)
    return {"codes": codes.to(torch.int16), "slots": actor_slot_tiles(hands, actor).to(torch.int8),
            "q": t["q"], "legal": t["legal"], "depth": t["depth"]}


def lr_at(cfg: TrainConfig, step: int, wall_s: float = 0.0) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay over the remaining steps, or
    over the spent fraction of `time_budget` (wall_s: training seconds so far) when set."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.time_budget is not None:
        frac = min(1.0, wall_s / cfg.time_budget)
    else:
        frac = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def masked_mse(pred: torch.Tensor, q: torch.Tensor, legal: torch.Tensor,
               centered_weight: float = 0.0, n_legal: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over legal slots of ((pred - q) / 42)^2, plus `centered_weight` times the same
    for both sides centred on their mean over the row's legal slots (weights the differences
    between moves, which decide q_gap, against the position's overall level). `n_legal`:
    the number of legal slots to divide by (default: those of these rows; a rank of a
    distributed run passes the global batch's)."""
    pred = pred.float()
    legal_f = legal.to(pred.dtype)
    n = (legal_f.sum() if n_legal is None else n_legal.to(pred.dtype)).clamp(min=1)
    diff = (pred - q) / Q_SCALE
    loss = (diff ** 2 * legal_f).sum() / n
    if centered_weight > 0:
        mean = (diff * legal_f).sum(1, keepdim=True) / legal_f.sum(1, keepdim=True).clamp(min=1)
        loss = loss + centered_weight * (((diff - mean) ** 2) * legal_f).sum() / n
    return loss


def value_mse(value: torch.Tensor, q: torch.Tensor, legal: torch.Tensor,
              batch_rows: int) -> torch.Tensor:
    """Sum over these rows of ((V - V*) / 42)^2 / batch_rows, V* = the best legal Q (the
    position's value for the actor under perfect play); batch_rows is the global batch."""
    best = torch.where(legal, q, torch.full_like(q, -1e9)).max(1).values
    return (((value.float() - best) / Q_SCALE) ** 2).sum() / batch_rows


def evaluate_rows(network, rows: dict[str, torch.Tensor], device, chunk: int = 8192) -> dict:
    network.eval()
    preds = []
    with torch.no_grad():
        for s in range(0, len(rows["q"]), chunk):
            preds.append(network(rows["codes"][s:s + chunk].to(device).long(),
                                 rows["slots"][s:s + chunk].to(device).long()).cpu())
    network.train()
    pred = torch.cat(preds)
    m = fidelity(pred, rows["q"], rows["legal"], rows["depth"])
    m["loss"] = float(masked_mse(pred, rows["q"], rows["legal"]))
    return m


# ------------------------------------------------------------------ checkpoints
def save_checkpoint(path: Path, network, optimizer, step: int, state: dict,
                    extra: dict | None = None) -> None:
    """`extra`: more modules to keep, by prefix (a Stage 2 run's averaged weights, "ema")."""
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in network.state_dict().items()}
    for prefix, module in (extra or {}).items():
        tensors.update({f"{prefix}.{k}": v.detach().cpu().contiguous()
                        for k, v in module.state_dict().items()})
    opt = optimizer.state_dict()
    for pid, st in opt["state"].items():
        for k, v in st.items():
            tensors[f"optim.{pid}.{k}"] = torch.as_tensor(v).detach().cpu().contiguous()
    meta = {"step": str(step), "state": json.dumps(state),
            "param_groups": json.dumps(opt["param_groups"])}
    atomic_save_safetensors(tensors, path, metadata=meta)


def load_checkpoint(path: Path, network, optimizer, extra: dict | None = None
                    ) -> tuple[int, dict]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:
        raise ValueError(f"cannot read training checkpoint {path}: {e}") from e
    network.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    for prefix, module in (extra or {}).items():
        held = {k[len(prefix) + 1:]: v for k, v in tensors.items() if k.startswith(prefix + ".")}
        if not held:
            raise ValueError(f"training checkpoint {path} holds no {prefix!r} weights")
        module.load_state_dict(held)
    opt_state: dict = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, pid, name = k.split(".", 2)
            opt_state.setdefault(int(pid), {})[name] = v
    optimizer.load_state_dict({"state": opt_state, "param_groups": json.loads(meta["param_groups"])})
    return int(meta["step"]), json.loads(meta["state"])


def load_init(network, path, arch: dict) -> None:
    """Copy the weights of file `path` into `network`; ValueError naming the file when its
    architecture is not `arch`."""
    from .weights import load_network

    loaded, meta = load_network(path)
    if meta["config"] != arch:
        raise ValueError(f"--init {path}: holds a {meta['config']} network, but this run "
                         f"trains {arch}")
    network.load_state_dict(loaded.state_dict())


# ------------------------------------------------------------------ the loop
def train(cfg: TrainConfig, log=print) -> dict:
    """Train (or resume) per `cfg`; returns the last evaluation's metrics."""
    if cfg.precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be fp32 or bf16, got {cfg.precision!r}")
    if cfg.value_weight > 0 and not cfg.arch.get("value_head"):
        raise ValueError("value_weight > 0 needs a network with a value head "
                         "(transformer with value_head=1)")
    ranks = Ranks()
    if cfg.value_weight > 0 and ranks.world > 1:
        raise ValueError("the value loss is not wired through DistributedDataParallel yet: "
                         "train it with one process")
    if cfg.time_budget is not None and ranks.world > 1:
        raise ValueError("time_budget stops each rank on its own clock: train several ranks "
                         "with --steps instead")
    if cfg.time_budget is not None and not cfg.time_budget > 0:
        raise ValueError(f"time_budget must be > 0 seconds, got {cfg.time_budget}")
    if cfg.batch % ranks.world:
        raise ValueError(f"batch {cfg.batch} must be a multiple of the {ranks.world} ranks")
    if not ranks.main:
        log = lambda *a, **k: None          # noqa: E731  one rank reports
    run = Path(cfg.run)
    run.mkdir(parents=True, exist_ok=True)
    device = ranks.start(torch.device(cfg.device))
    torch.manual_seed(cfg.seed)
    network = build_network(cfg.arch).to(device)
    on_device = device.type == "cuda"
    optimizer = torch.optim.AdamW(network.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                  fused=on_device)
    ckpt = run / "checkpoint.safetensors"
    state = {"rows_seen": 0, "best_q_gap": None, "history": [], "wall_s": 0.0,
             "config": asdict(cfg)}
    step = 0
    if ckpt.exists():
        step, state = load_checkpoint(ckpt, network, optimizer)
        log(f"resumed {ckpt} at step {step} ({state['rows_seen']} rows seen)", flush=True)
    elif cfg.init:
        load_init(network, cfg.init, cfg.arch)
        log(f"initialized from {cfg.init}", flush=True)
    if ranks.main:
        atomic_write_text(run / "config.json", json.dumps(asdict(cfg), indent=1) + "\n")
    forward = network
    if ranks.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        forward = DistributedDataParallel(network, device_ids=[device.index]
                                          if device.type == "cuda" else None)
    if cfg.compile:
        forward = torch.compile(forward)

    device_name = torch.cuda.get_device_name(device) if on_device else "cpu"
    rows_device = device if on_device else torch.device("cpu")

    def place(rows: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {c: v.to(device) for c, v in rows.items()} if on_device else rows

    cache = ShardCache(cfg.data, cfg.max_shards)
    cache.refresh()
    train_rows = place(cache.split("train"))
    val_rows = {c: v[:cfg.val_rows] for c, v in cache.split("val").items()}
    if len(val_rows["q"]) == 0 or len(train_rows["q"]) == 0:
        raise ValueError(f"{cfg.data}: need rows of both the train and the val split, got "
                         f"{len(train_rows['q'])} and {len(val_rows['q'])}: generate more deals")
    log(f"{count_parameters(network)} parameters ({cfg.arch}); {len(train_rows['q'])} train rows, "
        f"{len(val_rows['q'])} val rows from {len(cache.parts)} shards", flush=True)

    metrics: dict = {}
    clock = StepClock(cfg, step, state["wall_s"], "train-oracle", log, show=ranks.main)
    network.train()
    while step < clock.end:
        if cfg.follow and step % cfg.reload_every == 0 and step > 0:
            added = cache.refresh()
            if added:
                new = place(cache.split("train", added))
                train_rows = {c: torch.cat([train_rows[c], new[c]]) for c in train_rows}
                log(f"step {step}: reloaded, {len(train_rows['q'])} train rows", flush=True)
        n = len(train_rows["q"])
        # drawn where the rows are: a host-to-device copy of the indices would wait for the
        # device every step
        gen = torch.Generator(device=rows_device).manual_seed(mix_seed(cfg.seed, step))
        idx = torch.randint(n, (cfg.batch,), generator=gen, device=rows_device)
        legal = train_rows["legal"][idx]
        n_legal = legal.sum()                               # the global batch's, on every rank
        share = slice(ranks.rank, None, ranks.world)
        idx, legal = idx[share], legal[share].to(device)
        codes = train_rows["codes"][idx].to(device).long()
        slots = train_rows["slots"][idx].to(device).long()
        q = train_rows["q"][idx].to(device)
        for g in optimizer.param_groups:
            g["lr"] = lr_at(cfg, step, clock.wall())
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
            if cfg.value_weight > 0:
                pred, value = network.forward_with_value(codes, slots)
            else:
                pred = forward(codes, slots)
        # x world: DDP averages the ranks' gradients, each rank's loss covers its share
        loss = masked_mse(pred, q, legal, cfg.centered_weight, n_legal.to(device)) * ranks.world
        if cfg.value_weight > 0:
            loss = loss + cfg.value_weight * value_mse(value, q, legal, cfg.batch) * ranks.world
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        state["rows_seen"] += cfg.batch
        last, evaluate = clock.after_step(step, loss)
        if not ranks.main:
            continue
        if evaluate:
            metrics = evaluate_rows(network, val_rows, device)
            state["wall_s"] = clock.wall()
            point = {"step": step, "rows_seen": state["rows_seen"], "train_rows": n,
                     "wall_s": round(state["wall_s"], 1), "train_loss": clock.loss,
                     **{k: metrics[k] for k in ("loss", "q_mae", "q_gap", "q_gap_multi",
                                                "accuracy", "blunder_rate")}}
            state["history"].append(point)
            atomic_write_text(run / "history.jsonl",
                              "".join(json.dumps(h) + "\n" for h in state["history"]))
            clock.bar.set_postfix(loss=clock.loss, val_gap=metrics["q_gap"],
                                  val_mae=metrics["q_mae"])
            train_info = {"seed": cfg.seed, "step": step, "rows_seen": state["rows_seen"],
                          "train_rows": n, "wall_s": round(state["wall_s"], 1),
                          "batch": cfg.batch, "lr": cfg.lr, "data": str(cfg.data),
                          "precision": cfg.precision, "device": device_name}
            if cfg.init:
                train_info["init"] = str(cfg.init)
            if cfg.time_budget is not None:
                train_info["time_budget_s"] = cfg.time_budget
            val_metrics = {"split": "val", **metrics}
            dh = cache.data_hash()
            save_weights(run / "last.safetensors", network, cfg.arch, dh, val_metrics, train_info)
            if state["best_q_gap"] is None or metrics["q_gap"] < state["best_q_gap"]:
                state["best_q_gap"] = metrics["q_gap"]
                save_weights(run / "best.safetensors", network, cfg.arch, dh, val_metrics, train_info)
        if step % cfg.ckpt_every == 0 or last:
            state["wall_s"] = clock.wall()
            save_checkpoint(ckpt, network, optimizer, step, state)
        if clock.out_of_time:
            log(f"time budget of {cfg.time_budget:.0f} s spent at step {step}", flush=True)
            break
    clock.bar.close()
    # the DDP reducer holds the process group's work threads: free it before the group
    # (destroying the group under a live reducer aborted a rank at exit on a loaded machine)
    del forward
    import gc
    gc.collect()
    ranks.stop()
    return metrics
